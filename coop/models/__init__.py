"""Reference models built from coop.nn: an MLP, GPT (GPT-2's layout) and ResNet (basic and
bottleneck blocks; ``resnet50`` is torchvision's layout). Each takes the runtime first and a
seed or Generator for reproducible initialization; ``num_parameters()`` counts parameters."""
from coop.models.gpt import GPT
from coop.models.mlp import MLP
from coop.models.resnet import ResNet, resnet18, resnet50

__all__ = ["GPT", "MLP", "ResNet", "resnet18", "resnet50"]

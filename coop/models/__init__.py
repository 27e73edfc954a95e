"""Reference models built from coop.nn: an MLP, GPT (GPT-2's layout), ResNet (basic and
bottleneck blocks; ``resnet50``/``resnet152`` are torchvision's layout), DenseNet-121,
Inception-V3, U-Net, Swin-T, BERT (masked-LM) and a BiLSTM classifier; coop.models.paper is
the Coop paper's evaluation set. Each takes the runtime first and a seed or Generator for
reproducible initialization; ``num_parameters()`` counts parameters.

Layer: above coop.nn and coop.optim (and the simulation backend, for the paper's set); only
coop.cli imports it."""
from coop.models.bert import BERT, bert_large
from coop.models.bilstm import BiLSTM, bilstm
from coop.models.densenet import DenseNet, densenet121
from coop.models.gpt import GPT
from coop.models.inception import InceptionV3, inception_v3
from coop.models.mlp import MLP
from coop.models.resnet import ResNet, resnet18, resnet50, resnet152
from coop.models.swin import SwinTransformer, swin_t
from coop.models.unet import UNet, unet

__all__ = ["BERT", "GPT", "MLP", "BiLSTM", "DenseNet", "InceptionV3", "ResNet", "SwinTransformer",
           "UNet", "bert_large", "bilstm", "densenet121", "inception_v3", "resnet18", "resnet50",
           "resnet152", "swin_t", "unet"]

"""What the classifiers (MLP, ResNet) share: the cross-entropy loss helper."""
from coop import ops
from coop.nn.module import Module, as_tensor


class Classifier(Module):
    """A module whose forward gives logits (N, classes)."""

    def loss(self, x, targets):
        """Mean cross entropy of forward(x) against integer targets (N,): an array or Tensor."""
        return ops.cross_entropy(self(x), as_tensor(x.runtime, targets))

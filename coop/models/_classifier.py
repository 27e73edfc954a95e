"""What the classifiers (MLP, ResNet) share: the cross-entropy loss helper."""
from coop import ops
from coop.nn.module import Module, as_tensor


class Classifier(Module):
    """A module whose forward gives logits (N, classes)."""

    def loss(self, x, targets):
        """Mean cross entropy of forward(x) against integer targets (N,): an array or Tensor."""
        logits = self(x)
        return ops.cross_entropy(logits, as_tensor(x.runtime, targets, logits.shape[-1],
                                                   "targets"))

"""A bidirectional LSTM classifier: one coop.nn.LSTM layer (bidirectional, batch first) over
the sequence, and a Linear head on the last step's output (both directions' hidden states at
the final position concatenated, 2H; i.e. ``outputs[:, -1]``).

Parameters: 2 x (D x 4H + H x 4H + 4H) + 2H x classes + classes; coop's LSTM has one bias per
direction where PyTorch's nn.LSTM has two (b_ih and b_hh: 8H more in all). At D 100, H 256 and
2 classes: 732,162.
"""
import numpy

from coop import ops
from coop.models._classifier import Classifier
from coop.nn import LSTM, Linear
from coop.nn.module import generator, runtime_of


class BiLSTM(Classifier):
    """forward(x (N, T, input_size)) -> logits (N, num_classes)."""

    def __init__(self, rt, input_size=100, hidden_size=256, num_classes=2, rng=None,
                 dtype=numpy.float32):
        super().__init__()
        rt, rng = runtime_of(rt), generator(rng)
        self.lstm = LSTM(rt, input_size, hidden_size, batch_first=True, bidirectional=True,
                         rng=rng, dtype=dtype)
        self.fc = Linear(rt, 2 * hidden_size, num_classes, rng=rng, dtype=dtype)

    def forward(self, x):
        outputs, _ = self.lstm(x)
        return self.fc(ops.getitem(outputs, (slice(None), -1)))


def bilstm(rt, input_size=100, hidden_size=256, num_classes=2, **options):
    """The paper's BiLSTM: input 100, hidden 256 (732,162 parameters with a 2-class head)."""
    return BiLSTM(rt, input_size, hidden_size, num_classes, **options)

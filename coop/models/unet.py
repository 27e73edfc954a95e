"""U-Net (Ronneberger et al. 2015) as the widely used PyTorch implementation
(milesial/Pytorch-UNet, bilinear=False): DoubleConv = (3x3 conv padded by 1, no bias,
BatchNorm, ReLU) x 2; four downs (2x2 max pool, DoubleConv) from 64 to 1024 channels; four ups
(2x2/2 transposed convolution halving the channels, zero-padded to the skip's size as F.pad
does when an odd size was floored on the way down, concatenation [skip, upsampled],
DoubleConv); a 1x1 output convolution with bias.

At n_channels=3, n_classes=2: 31,037,698 parameters. The loss is the per-pixel cross entropy
(the repository adds a Dice loss, which has no parameters and works on the 2-channel logits).
"""
import itertools

import numpy

from coop import ops
from coop.nn import BatchNorm2d, Conv2d, ConvTranspose2d, Sequential
from coop.nn.module import Module, as_tensor, generator, runtime_of


class DoubleConv(Module):
    """(3x3 conv, BatchNorm, ReLU) twice."""

    def __init__(self, rt, c_in, c_out, rng, dtype):
        super().__init__()
        layers = []
        for a, b in ((c_in, c_out), (c_out, c_out)):
            layers += [Conv2d(rt, a, b, 3, padding=1, bias=False, rng=rng, dtype=dtype),
                       BatchNorm2d(rt, b, dtype=dtype)]
        self.body = Sequential(*layers)

    def forward(self, x):
        for conv, norm in zip(self.body[::2], self.body[1::2]):
            x = ops.relu(norm(conv(x)))
        return x


class Up(Module):
    """2x upsampling by a transposed convolution, padding to the skip, concatenation,
    DoubleConv."""

    def __init__(self, rt, c_in, c_out, rng, dtype):
        super().__init__()
        self.up = ConvTranspose2d(rt, c_in, c_in // 2, 2, stride=2, rng=rng, dtype=dtype)
        self.conv = DoubleConv(rt, c_in, c_out, rng, dtype)

    def forward(self, x, skip):
        x = self.up(x)
        dy, dx = skip.shape[2] - x.shape[2], skip.shape[3] - x.shape[3]
        if dy or dx:
            x = ops.pad(x, ((0, 0), (0, 0), (dy // 2, dy - dy // 2), (dx // 2, dx - dx // 2)))
        return self.conv(ops.concatenate([skip, x], axis=1))


class UNet(Module):
    """forward(x (N, n_channels, H, W)) -> logits (N, n_classes, H, W)."""

    def __init__(self, rt, n_channels=3, n_classes=2, width=64, rng=None, dtype=numpy.float32):
        super().__init__()
        rt, rng = runtime_of(rt), generator(rng)
        widths = [width << i for i in range(5)]
        self.inc = DoubleConv(rt, n_channels, widths[0], rng, dtype)
        self.downs = Sequential(*(DoubleConv(rt, a, b, rng, dtype)
                                  for a, b in itertools.pairwise(widths)))
        self.ups = Sequential(*(Up(rt, a, b, rng, dtype)
                                for a, b in itertools.pairwise(widths[::-1])))
        self.outc = Conv2d(rt, widths[0], n_classes, 1, rng=rng, dtype=dtype)

    def forward(self, x):
        skips = [self.inc(x)]
        for down in self.downs:
            skips.append(down(ops.max_pool2d(skips[-1], 2)))
        x = skips.pop()
        for up in self.ups:
            x = up(x, skips.pop())
        return self.outc(x)

    def loss(self, x, targets):
        """Mean cross entropy over every pixel against integer targets (N, H, W)."""
        logits = self(x)
        targets = as_tensor(logits.runtime, targets, logits.shape[1], "targets")
        flat = ops.reshape(ops.transpose(logits, (0, 2, 3, 1)), (-1, logits.shape[1]))
        return ops.cross_entropy(flat, ops.reshape(targets, (-1,)))


def unet(rt, n_channels=3, n_classes=2, **options):
    """U-Net (milesial/Pytorch-UNet, bilinear=False): 31,037,698 parameters at 3 channels in and
    2 classes."""
    return UNet(rt, n_channels, n_classes, **options)

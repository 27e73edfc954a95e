"""Inception-V3 (Szegedy et al. 2016) in torchvision's layout, with the auxiliary classifier.

Every convolution is torchvision's BasicConv2d: no bias, BatchNorm (eps 0.001), ReLU. The
1x7/7x1 and 1x3/3x1 convolutions pad one axis only: coop.ops.conv2d pads both axes alike, so
they zero-pad explicitly (coop.ops.pad) and convolve unpadded, which keeps a padded copy of
their input as an extra storage (PyTorch pads inside the kernel). The training loss is
torchvision's recipe: cross entropy of the logits plus 0.4 x that of the auxiliary logits.
At 1000 classes: 27,161,264 parameters, AuxLogits included (torchvision's inception_v3 with
aux_logits=True); 23,834,568 without it.
"""
import math

import numpy

from coop import ops
from coop.nn import BatchNorm2d, Dropout, Linear
from coop.nn.module import (
    Module,
    as_tensor,
    generator,
    make_parameter,
    runtime_of,
    uniform,
)


class BasicConv(Module):
    """Convolution (kernel (kh, kw), no bias), BatchNorm (eps 0.001), ReLU."""

    def __init__(self, rt, c_in, c_out, kernel, stride=1, padding=0, rng=None,
                 dtype=numpy.float32):
        super().__init__()
        kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
        self.pad = (padding, padding) if isinstance(padding, int) else tuple(padding)
        self.stride = stride
        self.weight = make_parameter(rt, (c_out, c_in, kh, kw), dtype,
                                     uniform(generator(rng), 1.0 / math.sqrt(c_in * kh * kw)))
        self.norm = BatchNorm2d(rt, c_out, eps=0.001, dtype=dtype)

    def forward(self, x):
        ph, pw = self.pad
        if ph == pw:
            x = ops.conv2d(x, self.weight, stride=self.stride, padding=ph)
        else:
            x = ops.conv2d(ops.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw))), self.weight,
                           stride=self.stride)
        return ops.relu(self.norm(x))


def _maker(rt, rng, dtype):
    """BasicConv's constructor with the runtime, generator and dtype bound."""
    return lambda *args, **kw: BasicConv(rt, *args, rng=rng, dtype=dtype, **kw)


def _chain(x, *convs):
    for conv in convs:
        x = conv(x)
    return x


class InceptionA(Module):
    """35x35: 1x1; 1x1 then 5x5; 1x1 then two 3x3; 3x3 average pool then 1x1."""

    def __init__(self, rt, c_in, pool_features, rng, dtype):
        super().__init__()
        c = _maker(rt, rng, dtype)
        self.b1 = c(c_in, 64, 1)
        self.b5_1, self.b5_2 = c(c_in, 48, 1), c(48, 64, 5, padding=2)
        self.b3_1, self.b3_2, self.b3_3 = (c(c_in, 64, 1), c(64, 96, 3, padding=1),
                                           c(96, 96, 3, padding=1))
        self.bp = c(c_in, pool_features, 1)

    def forward(self, x):
        return ops.concatenate([self.b1(x), _chain(x, self.b5_1, self.b5_2),
                                _chain(x, self.b3_1, self.b3_2, self.b3_3),
                                self.bp(ops.avg_pool2d(x, 3, 1, padding=1))], axis=1)


class InceptionB(Module):
    """35x35 -> 17x17: 3x3/2; 1x1, 3x3, 3x3/2; 3x3/2 max pool."""

    def __init__(self, rt, c_in, rng, dtype):
        super().__init__()
        c = _maker(rt, rng, dtype)
        self.b3 = c(c_in, 384, 3, stride=2)
        self.bd_1, self.bd_2, self.bd_3 = (c(c_in, 64, 1), c(64, 96, 3, padding=1),
                                           c(96, 96, 3, stride=2))

    def forward(self, x):
        return ops.concatenate([self.b3(x), _chain(x, self.bd_1, self.bd_2, self.bd_3),
                                ops.max_pool2d(x, 3, 2)], axis=1)


class InceptionC(Module):
    """17x17: 1x1; 1x1, 1x7, 7x1; 1x1, 7x1, 1x7, 7x1, 1x7; average pool then 1x1."""

    def __init__(self, rt, c_in, c7, rng, dtype):
        super().__init__()
        c = _maker(rt, rng, dtype)
        row, col = {"padding": (0, 3)}, {"padding": (3, 0)}
        self.b1 = c(c_in, 192, 1)
        self.b7_1, self.b7_2, self.b7_3 = (c(c_in, c7, 1), c(c7, c7, (1, 7), **row),
                                           c(c7, 192, (7, 1), **col))
        self.bd_1, self.bd_2, self.bd_3, self.bd_4, self.bd_5 = (
            c(c_in, c7, 1), c(c7, c7, (7, 1), **col), c(c7, c7, (1, 7), **row),
            c(c7, c7, (7, 1), **col), c(c7, 192, (1, 7), **row))
        self.bp = c(c_in, 192, 1)

    def forward(self, x):
        return ops.concatenate([
            self.b1(x), _chain(x, self.b7_1, self.b7_2, self.b7_3),
            _chain(x, self.bd_1, self.bd_2, self.bd_3, self.bd_4, self.bd_5),
            self.bp(ops.avg_pool2d(x, 3, 1, padding=1))], axis=1)


class InceptionD(Module):
    """17x17 -> 8x8: 1x1, 3x3/2; 1x1, 1x7, 7x1, 3x3/2; 3x3/2 max pool."""

    def __init__(self, rt, c_in, rng, dtype):
        super().__init__()
        c = _maker(rt, rng, dtype)
        self.b3_1, self.b3_2 = c(c_in, 192, 1), c(192, 320, 3, stride=2)
        self.b7_1, self.b7_2, self.b7_3, self.b7_4 = (
            c(c_in, 192, 1), c(192, 192, (1, 7), padding=(0, 3)),
            c(192, 192, (7, 1), padding=(3, 0)), c(192, 192, 3, stride=2))

    def forward(self, x):
        return ops.concatenate([_chain(x, self.b3_1, self.b3_2),
                                _chain(x, self.b7_1, self.b7_2, self.b7_3, self.b7_4),
                                ops.max_pool2d(x, 3, 2)], axis=1)


class InceptionE(Module):
    """8x8: 1x1; 1x1 then (1x3 | 3x1); 1x1, 3x3 then (1x3 | 3x1); average pool then 1x1."""

    def __init__(self, rt, c_in, rng, dtype):
        super().__init__()
        c = _maker(rt, rng, dtype)
        row, col = {"padding": (0, 1)}, {"padding": (1, 0)}
        self.b1 = c(c_in, 320, 1)
        self.b3_1, self.b3_2a, self.b3_2b = (c(c_in, 384, 1), c(384, 384, (1, 3), **row),
                                             c(384, 384, (3, 1), **col))
        self.bd_1, self.bd_2, self.bd_3a, self.bd_3b = (
            c(c_in, 448, 1), c(448, 384, 3, padding=1), c(384, 384, (1, 3), **row),
            c(384, 384, (3, 1), **col))
        self.bp = c(c_in, 192, 1)

    def forward(self, x):
        b3 = self.b3_1(x)
        bd = _chain(x, self.bd_1, self.bd_2)
        return ops.concatenate([self.b1(x), self.b3_2a(b3), self.b3_2b(b3), self.bd_3a(bd),
                                self.bd_3b(bd), self.bp(ops.avg_pool2d(x, 3, 1, padding=1))],
                               axis=1)


class InceptionAux(Module):
    """On the 17x17 map: 5x5/3 average pool, 1x1 to 128, 5x5 to 768, global mean, Linear."""

    def __init__(self, rt, c_in, num_classes, rng, dtype):
        super().__init__()
        c = _maker(rt, rng, dtype)
        self.conv0, self.conv1 = c(c_in, 128, 1), c(128, 768, 5)
        self.fc = Linear(rt, 768, num_classes, rng=rng, dtype=dtype)

    def forward(self, x):
        x = _chain(ops.avg_pool2d(x, 5, 3), self.conv0, self.conv1)
        return self.fc(ops.mean(x, axis=(2, 3)))


class InceptionV3(Module):
    """forward(x (N, 3, 299, 299)) -> (logits, aux logits), each (N, num_classes); the aux
    logits only in training mode (None in eval)."""

    def __init__(self, rt, num_classes=1000, aux_logits=True, dropout=0.5, rng=None,
                 dtype=numpy.float32):
        super().__init__()
        rt, rng = runtime_of(rt), generator(rng)
        c = _maker(rt, rng, dtype)
        self.conv0, self.conv1, self.conv2 = (c(3, 32, 3, stride=2), c(32, 32, 3),
                                              c(32, 64, 3, padding=1))
        self.conv3, self.conv4 = c(64, 80, 1), c(80, 192, 3)
        self.mixed_5b = InceptionA(rt, 192, 32, rng, dtype)
        self.mixed_5c = InceptionA(rt, 256, 64, rng, dtype)
        self.mixed_5d = InceptionA(rt, 288, 64, rng, dtype)
        self.mixed_6a = InceptionB(rt, 288, rng, dtype)
        self.mixed_6b = InceptionC(rt, 768, 128, rng, dtype)
        self.mixed_6c = InceptionC(rt, 768, 160, rng, dtype)
        self.mixed_6d = InceptionC(rt, 768, 160, rng, dtype)
        self.mixed_6e = InceptionC(rt, 768, 192, rng, dtype)
        self.aux = InceptionAux(rt, 768, num_classes, rng, dtype) if aux_logits else None
        self.mixed_7a = InceptionD(rt, 768, rng, dtype)
        self.mixed_7b = InceptionE(rt, 1280, rng, dtype)
        self.mixed_7c = InceptionE(rt, 2048, rng, dtype)
        self.dropout = Dropout(dropout)
        self.fc = Linear(rt, 2048, num_classes, rng=rng, dtype=dtype)

    def forward(self, x):
        x = ops.max_pool2d(_chain(x, self.conv0, self.conv1, self.conv2), 3, 2)
        x = ops.max_pool2d(self.conv4(self.conv3(x)), 3, 2)
        for mixed in (self.mixed_5b, self.mixed_5c, self.mixed_5d, self.mixed_6a, self.mixed_6b,
                      self.mixed_6c, self.mixed_6d, self.mixed_6e):
            x = mixed(x)
        aux = self.aux(x) if self.aux is not None and self.training else None
        for mixed in (self.mixed_7a, self.mixed_7b, self.mixed_7c):
            x = mixed(x)
        return self.fc(self.dropout(ops.mean(x, axis=(2, 3)))), aux

    def loss(self, x, targets):
        """Cross entropy of the logits, plus 0.4 x that of the aux logits when there are any."""
        logits, aux = self(x)
        targets = as_tensor(logits.runtime, targets, logits.shape[-1], "targets")
        loss = ops.cross_entropy(logits, targets)
        if aux is None:
            return loss
        return ops.add(loss, ops.mul(ops.cross_entropy(aux, targets), 0.4))


def inception_v3(rt, num_classes=1000, **options):
    """Inception-V3 with auxiliary logits (27,161,264 parameters at 1000 classes)."""
    return InceptionV3(rt, num_classes=num_classes, **options)

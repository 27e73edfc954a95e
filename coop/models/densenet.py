"""DenseNet (Huang et al. 2017) in torchvision's layout: a 7x7/2 convolution, BatchNorm, ReLU
and 3x3/2 max pool (padded by 1) stem; dense blocks whose layers each see the concatenation of
every earlier feature map (BN, ReLU, 1x1 conv to bn_size * growth, BN, ReLU, 3x3 conv to
growth); transitions (BN, ReLU, 1x1 conv halving the channels, 2x2 average pool); a final BN,
ReLU, global average pool and Linear classifier. Convolutions have no bias.

Each layer concatenates its inputs afresh, as torchvision does with memory_efficient=False:
the concatenations are storages of their own, which is why DenseNet's activations grow
quadratically with the block's depth.
"""
import numpy

from coop import ops
from coop.models._classifier import Classifier
from coop.nn import BatchNorm2d, Conv2d, Linear, Sequential
from coop.nn.module import Module, generator, runtime_of


def _norm_relu_conv(rt, c_in, c_out, k, rng, dtype):
    return [BatchNorm2d(rt, c_in, dtype=dtype), Conv2d(rt, c_in, c_out, k, padding=k // 2,
                                                       bias=False, rng=rng, dtype=dtype)]


class DenseLayer(Module):
    """(BN, ReLU, 1x1 conv, BN, ReLU, 3x3 conv) of the concatenated inputs: growth channels."""

    def __init__(self, rt, c_in, growth, bn_size, rng, dtype):
        super().__init__()
        width = bn_size * growth
        self.body = Sequential(*_norm_relu_conv(rt, c_in, width, 1, rng, dtype),
                               *_norm_relu_conv(rt, width, growth, 3, rng, dtype))

    def forward(self, features):
        x = ops.concatenate(features, axis=1) if len(features) > 1 else features[0]
        for norm, conv in zip(self.body[::2], self.body[1::2]):
            x = conv(ops.relu(norm(x)))
        return x


class DenseBlock(Module):
    """n DenseLayers; the output concatenates the input and every layer's new features."""

    def __init__(self, rt, n, c_in, growth, bn_size, rng, dtype):
        super().__init__()
        self.layers = Sequential(*(DenseLayer(rt, c_in + i * growth, growth, bn_size, rng, dtype)
                                   for i in range(n)))

    def forward(self, x):
        features = [x]
        for layer in self.layers:
            features.append(layer(features))
        return ops.concatenate(features, axis=1)


class Transition(Module):
    """BN, ReLU, 1x1 convolution to c_out channels, 2x2/2 average pool."""

    def __init__(self, rt, c_in, c_out, rng, dtype):
        super().__init__()
        self.norm, self.conv = _norm_relu_conv(rt, c_in, c_out, 1, rng, dtype)

    def forward(self, x):
        return ops.avg_pool2d(self.conv(ops.relu(self.norm(x))), 2)


class DenseNet(Classifier):
    """forward(x (N, C, H, W)) -> logits (N, num_classes)."""

    def __init__(self, rt, growth=32, blocks=(6, 12, 24, 16), init_features=64, bn_size=4,
                 compression=0.5, num_classes=1000, in_channels=3, rng=None,
                 dtype=numpy.float32):
        super().__init__()
        rt, rng = runtime_of(rt), generator(rng)
        self.stem = Sequential(Conv2d(rt, in_channels, init_features, 7, stride=2, padding=3,
                                      bias=False, rng=rng, dtype=dtype),
                               BatchNorm2d(rt, init_features, dtype=dtype))
        stages, c = [], init_features
        for i, n in enumerate(blocks):
            stages.append(DenseBlock(rt, n, c, growth, bn_size, rng, dtype))
            c += n * growth
            if i < len(blocks) - 1:
                stages.append(Transition(rt, c, int(c * compression), rng, dtype))
                c = int(c * compression)
        self.stages = Sequential(*stages)
        self.norm = BatchNorm2d(rt, c, dtype=dtype)
        self.fc = Linear(rt, c, num_classes, rng=rng, dtype=dtype)

    def forward(self, x):
        x = ops.max_pool2d(ops.relu(self.stem(x)), 3, 2, padding=1)
        x = ops.relu(self.norm(self.stages(x)))
        return self.fc(ops.mean(x, axis=(2, 3)))


def densenet121(rt, num_classes=1000, **options):
    """DenseNet-121: growth 32, blocks (6, 12, 24, 16) (7,978,856 parameters at 1000 classes)."""
    return DenseNet(rt, 32, (6, 12, 24, 16), 64, num_classes=num_classes, **options)

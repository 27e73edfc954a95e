"""ResNet (He et al. 2016) of basic or bottleneck blocks, at any depth and width.

Convolutions have no bias and are followed by BatchNorm2d; a block's shortcut is a 1x1
convolution and BatchNorm when its shape changes. The bottleneck strides in its 3x3
convolution (torchvision's "v1.5"). Stems: "imagenet" (7x7/2 convolution, 3x3/2 max pool
padded by 1, as torchvision: 224x224 inputs reach the stages at 56x56) or "small" (a 3x3/1
convolution, no pool: CIFAR-sized inputs). The head is a global average pool and a Linear
classifier.
"""
import numpy

from coop import ops
from coop.models._classifier import Classifier
from coop.nn import BatchNorm2d, Conv2d, Linear, Sequential
from coop.nn.module import Module, generator, runtime_of


class _Block(Module):
    """A residual block: relu(body(x) + shortcut(x))."""

    def _convs(self, rt, specs, rng, dtype):
        """Conv2d + BatchNorm2d pairs from (in, out, k, stride) specs."""
        layers = []
        for c_in, c_out, k, stride in specs:
            layers += [Conv2d(rt, c_in, c_out, k, stride=stride, padding=k // 2, bias=False,
                              rng=rng, dtype=dtype), BatchNorm2d(rt, c_out, dtype=dtype)]
        return layers

    def _shortcut(self, rt, c_in, c_out, stride, rng, dtype):
        if stride == 1 and c_in == c_out:
            return None
        return Sequential(*self._convs(rt, [(c_in, c_out, 1, stride)], rng, dtype))

    def forward(self, x):
        out = x
        for i, (conv, norm) in enumerate(zip(self.body[::2], self.body[1::2])):
            out = norm(conv(ops.relu(out) if i else out))
        skip = x if self.shortcut is None else self.shortcut(x)
        return ops.relu(ops.add(out, skip))


class BasicBlock(_Block):
    """Two 3x3 convolutions; out channels = width."""

    expansion = 1

    def __init__(self, rt, c_in, width, stride, rng, dtype):
        super().__init__()
        c_out = width * self.expansion
        self.body = Sequential(*self._convs(rt, [(c_in, width, 3, stride), (width, c_out, 3, 1)],
                                            rng, dtype))
        self.shortcut = self._shortcut(rt, c_in, c_out, stride, rng, dtype)


class Bottleneck(_Block):
    """1x1 down to width, 3x3 (strided), 1x1 up to 4 * width."""

    expansion = 4

    def __init__(self, rt, c_in, width, stride, rng, dtype):
        super().__init__()
        c_out = width * self.expansion
        self.body = Sequential(*self._convs(
            rt, [(c_in, width, 1, 1), (width, width, 3, stride), (width, c_out, 1, 1)], rng, dtype))
        self.shortcut = self._shortcut(rt, c_in, c_out, stride, rng, dtype)


BLOCKS = {"basic": BasicBlock, "bottleneck": Bottleneck}


class ResNet(Classifier):
    """layers: blocks per stage (4 stages of widths width, 2w, 4w, 8w; stages after the first
    stride 2). forward(x (N, C, H, W)) -> logits (N, num_classes)."""

    def __init__(self, rt, layers=(2, 2, 2, 2), block="basic", width=64, num_classes=1000,
                 in_channels=3, stem="imagenet", rng=None, dtype=numpy.float32):
        super().__init__()
        if block not in BLOCKS or stem not in ("imagenet", "small"):
            raise ValueError(f"block must be one of {sorted(BLOCKS)} and stem 'imagenet' or "
                             f"'small', got {block!r} and {stem!r}")
        rt, rng = runtime_of(rt), generator(rng)
        cls = BLOCKS[block]
        self.stem_pool = stem == "imagenet"
        k, stride = (7, 2) if self.stem_pool else (3, 1)
        self.stem = Sequential(Conv2d(rt, in_channels, width, k, stride=stride, padding=k // 2,
                                      bias=False, rng=rng, dtype=dtype),
                               BatchNorm2d(rt, width, dtype=dtype))
        stages, c_in = [], width
        for i, n in enumerate(layers):
            blocks = []
            for j in range(n):
                blocks.append(cls(rt, c_in, width << i, 2 if i and not j else 1, rng, dtype))
                c_in = (width << i) * cls.expansion
            stages.append(Sequential(*blocks))
        self.stages = Sequential(*stages)
        self.fc = Linear(rt, c_in, num_classes, rng=rng, dtype=dtype)

    def forward(self, x):
        x = ops.relu(self.stem(x))
        if self.stem_pool:
            x = ops.max_pool2d(x, 3, 2, padding=1)
        x = ops.mean(self.stages(x), axis=(2, 3))
        return self.fc(x)


def resnet18(rt, num_classes=1000, **options):
    """ResNet-18: basic blocks [2, 2, 2, 2] (11,689,512 parameters at 1000 classes)."""
    return ResNet(rt, [2, 2, 2, 2], "basic", num_classes=num_classes, **options)


def resnet50(rt, num_classes=1000, **options):
    """ResNet-50: bottleneck blocks [3, 4, 6, 3] (25,557,032 parameters at 1000 classes)."""
    return ResNet(rt, [3, 4, 6, 3], "bottleneck", num_classes=num_classes, **options)


def resnet152(rt, num_classes=1000, **options):
    """ResNet-152: bottleneck blocks [3, 8, 36, 3] (60,192,808 parameters at 1000 classes)."""
    return ResNet(rt, [3, 8, 36, 3], "bottleneck", num_classes=num_classes, **options)

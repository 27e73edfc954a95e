"""The evaluation set of the Coop paper (Zhang et al., "Coop: Memory is not a Commodity",
NeurIPS 2023): nine models at the paper's batch sizes, each run for one training step
(forward, loss, backward, SGD with momentum or AdamW: OPTIMIZERS), or several in a row, on a
simulation backend, where parameters and activations are (shape, dtype) specs and op costs
come from the runtime's cost model.

The models are the same coop.nn code as real training; fp32 throughout.
"""
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy

from coop.backends.sim import SimBackend
from coop.models.bert import bert_large
from coop.models.bilstm import bilstm
from coop.models.densenet import densenet121
from coop.models.gpt import GPT
from coop.models.inception import inception_v3
from coop.models.resnet import resnet50, resnet152
from coop.models.swin import swin_t
from coop.models.unet import unet
from coop.optim import SGD, AdamW
from coop.runtime import Runtime

FLOAT = "float32"
LABEL = "int64"


@dataclass(frozen=True)
class PaperModel:
    """One model of the evaluation: build(rt) gives a Module whose ``loss(*inputs)`` is the
    training loss; inputs holds (shape of one example, dtype) per loss argument, the batch
    dimension left out."""

    build: Callable
    batch: int       # the paper's batch size
    inputs: tuple

    @property
    def input_shape(self):
        """The shape of one example's first input: an image (C, H, W), token ids (T,)."""
        return self.inputs[0][0]

    def make_inputs(self, rt, batch=None):
        """The loss arguments as runtime constants: specs of (batch, *shape), dtype."""
        batch = self.batch if batch is None else batch
        return [rt.tensor(((batch, *shape), numpy.dtype(dtype))) for shape, dtype in self.inputs]


def _image(size, channels=3):
    return (((channels, size, size), FLOAT), ((), LABEL))


def _gpt2(rt):
    """GPT-2 small (124,439,808 parameters; 1,024 positions, used 512 at a time here)."""
    return GPT(rt, 50257, 1024, 12, 12, 768, dropout=0.1)


PAPER_MODELS = OrderedDict([
    ("resnet50", PaperModel(resnet50, 115, _image(224))),
    ("resnet152", PaperModel(resnet152, 55, _image(224))),
    ("inception_v3", PaperModel(inception_v3, 96, _image(299))),
    ("unet", PaperModel(unet, 5, (((3, 460, 608), FLOAT), ((460, 608), LABEL)))),
    ("bert_large", PaperModel(bert_large, 4, (((512,), LABEL),) * 3)),   # ids, types, labels
    ("swin_t", PaperModel(swin_t, 40, _image(224))),
    ("bilstm", PaperModel(bilstm, 2048, (((128, 100), FLOAT), ((), LABEL)))),  # (T, D) batch first
    ("densenet121", PaperModel(densenet121, 70, _image(224))),
    ("gpt2", PaperModel(_gpt2, 8, (((512,), LABEL),) * 2)),              # ids, next-token ids
])

#: the step's optimizer by name: its state (one tensor per parameter for sgd's momentum, two for
#: adamw's moments) is made with it, before the step, so a trace holds it as constants
OPTIMIZERS = {
    "sgd": lambda params: SGD(params, lr=0.1, momentum=0.9),
    "adamw": lambda params: AdamW(params, lr=1e-4),
}
#: ... and the same optimizers updating each parameter inside the backward pass, as soon as its
#: gradient is complete (Optimizer.backward_step): the same update, one gradient held at a time
IN_BACKWARD = {f"{name}-in-backward": name for name in OPTIMIZERS}
OPTIMIZERS.update({name: OPTIMIZERS[base] for name, base in IN_BACKWARD.items()})


def training_step(rt, name, batch=None, optimizer="sgd", steps=1):
    """Build model `name` on rt (a Runtime over a SimBackend), make its inputs, then run one
    step (forward, loss, backward, optimizer) from rt.mark_start(); returns rt.stats().
    batch overrides the paper's; optimizer is "sgd" (momentum 0.9) or "adamw", or either
    with "-in-backward" (each parameter updated inside the backward pass, once its gradient is
    complete: Optimizer.backward_step). steps > 1 runs that many steps, one after the other,
    on the same inputs, the gradients dropped between them (Optimizer.zero_grad), as a
    training loop's later steps (benchmarks/later_steps.py); the last step's stay, as one
    step's do."""
    if rt.xp is not None:
        raise ValueError("training_step runs on a simulation backend (coop.SimBackend): its "
                         "inputs are (shape, dtype) specs")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {sorted(OPTIMIZERS)}, got {optimizer!r}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an int >= 1, got {steps!r}")
    spec = PAPER_MODELS[name]
    model = spec.build(rt)
    opt = OPTIMIZERS[optimizer](model.parameters())
    inputs = spec.make_inputs(rt, batch)
    rt.mark_start()
    for k in range(steps):
        if k > 0:
            opt.zero_grad()       # as a training loop does between steps (in-backward: done)
        loss = model.loss(*inputs)
        if optimizer in IN_BACKWARD:
            opt.backward_step(loss)
            del loss
        else:
            loss.backward()
            del loss
            opt.step()
    return rt.stats()


def num_parameters(name):
    """Model `name`'s parameter count, built on a simulation backend (nothing allocated)."""
    return PAPER_MODELS[name].build(Runtime(SimBackend("1TiB"))).num_parameters()


def record_trace(name, path, batch=None, optimizer="sgd", device="a100-80gb", alignment=512,
                 steps=1):
    """Record one training step of model `name` (unlimited budget, simulation backend, op
    costs from `device`'s roofline) as a coop trace at path; returns the run's stats. The
    parameters and inputs come before the trace's `start`: they become its constants. steps:
    that many steps (training_step)."""
    rt = Runtime(SimBackend(1 << 50, alignment=alignment), cost=device)
    with rt.record(path):
        return training_step(rt, name, batch=batch, optimizer=optimizer, steps=steps)

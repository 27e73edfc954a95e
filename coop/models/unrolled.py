"""An unrolled-GAN-like training step, written as a coop trace (docs/trace-format.md).

Unrolled GANs (Metz et al., 2017) update the discriminator for a few steps inside the
generator's step and back-propagate the generator's loss through those updates. With PyTorch-
style optimizers the updates are in-place kernels (``mul_``, ``add_``) on the discriminator's
weights, inside the unrolled loop, while the loop's activations, computed from each step's
weights, stay alive for the outer backward. Recomputing an activation then needs the weights'
old values: the program that makes in-place rules matter. The trace is generated, not recorded
(the loop's shape is all that matters); op costs come from a roofline DeviceSpec, in
nanoseconds, and the trace names it (``cost_model``), as recorded traces do.
"""
from coop.engine.cost import DEVICES
from coop.trace import TraceWriter

__all__ = ["unrolled_gan_trace"]

F32 = 4


def unrolled_gan_trace(path, unroll=5, layers=3, width=512, batch=64, device="a100-80gb"):
    """Write one generator step with `unroll` unrolled discriminator steps to path.

    The discriminator is `layers` tanh(x @ W) layers of width x width weights, cloned before
    the loop (the clones are what the loop updates). Each unrolled step runs its forward on the generated batch (activations kept for the outer backward),
    its backward (weight gradients), then per weight ``mul_`` (weight decay) and ``add_``
    (the gradient step) in place. The outer backward reads every step's activations, last
    step first, then the generator's weight is updated in place. Returns path."""
    spec = DEVICES[device]
    w = TraceWriter(path, alignment=512, cost_model=spec.name)
    sid = iter(range(1 << 30))
    act = batch * width * F32
    weight = width * width * F32

    def cost(flops, nbytes):
        return spec.cost_ns(flops, nbytes)

    def call(name, inputs, size, c, cls):
        s = next(sid)
        w.call(name, inputs, [(s, size, -1, None)], c, cls)
        return s

    mm_cost = cost(2 * batch * width * width, 2 * act + weight)
    wgrad_cost = cost(2 * batch * width * width, 2 * act + weight)
    ew = cost(batch * width, 2 * act)           # an elementwise op on activations
    ew_w = cost(width * width, 2 * weight)      # mul_ on a weight
    add_w = cost(2 * width * width, 3 * weight)  # add_ of a gradient to a weight

    z = next(sid)
    w.constant(z, act)
    g = next(sid)
    w.constant(g, weight)
    ds = []
    for _ in range(layers):
        ds.append(next(sid))
        w.constant(ds[-1], weight)
    w.start()
    fake = call("matmul", [z, g], act, mm_cost, "expensive")
    # the unrolled steps update a copy of the discriminator's weights (the real ones stay)
    ds = [call("clone", [d], weight, cost(0, 2 * weight), "cheap") for d in ds]
    kept = []                                   # every step's activations, for the outer backward
    for _ in range(unroll):
        h, acts = fake, []
        for d in ds:
            pre = call("matmul", [h, d], act, mm_cost, "expensive")
            h = call("tanh", [pre], act, ew, "cheap")
            w.release(pre)
            acts.append(h)
        delta = call("sub", [h], act, ew, "cheap")
        grads = []
        for i in reversed(range(layers)):
            below = acts[i - 1] if i else fake
            grads.append(call("matmul_wgrad", [below, delta], weight, wgrad_cost, "expensive"))
            if i:
                back = call("matmul", [delta, ds[i]], act, mm_cost, "expensive")
                w.release(delta)
                delta = call("tanh_backward", [back, acts[i - 1]], act, ew, "cheap")
                w.release(back)
        w.release(delta)
        for d, gd in zip(ds, reversed(grads)):
            w.mutate("mul_", [d], 0, ew_w, "cheap")
            w.mutate("add_", [d, gd], 0, add_w, "cheap")
            w.release(gd)
        kept.append(acts)
    # the outer backward: through every unrolled step, last first
    grad = call("sub", [kept[-1][-1]], act, ew, "cheap")
    for acts in reversed(kept):
        for i in reversed(range(layers)):
            nxt = call("tanh_backward", [grad, acts[i]], act, ew, "cheap")
            w.release(grad)
            grad = call("matmul", [nxt, ds[i]], act, mm_cost, "expensive")
            w.release(nxt)
            w.release(acts[i])
    ggrad = call("matmul_wgrad", [z, grad], weight, wgrad_cost, "expensive")
    w.release(grad)
    w.mutate("add_", [g, ggrad], 0, add_w, "cheap")
    w.release(ggrad)
    w.release(fake)
    for d in ds:
        w.release(d)
    w.close()
    return path

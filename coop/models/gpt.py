"""GPT (GPT-2's layout): token and learned position embeddings, dropout, n pre-LN transformer
blocks, a final LayerNorm and a language-model head tied to the token embedding (as GPT-2,
whose published sizes count it once). Weights are N(0, 0.02), biases zero.
"""
import numpy

from coop import ops
from coop.nn import Dropout, Embedding, LayerNorm, Linear, Sequential, TransformerBlock
from coop.nn.module import Module, as_tensor, generator, runtime_of
from coop.nn.transformer import causal_mask


class GPT(Module):
    """forward(idx (B, T) token ids, an int array or Tensor) -> logits (B, T, vocab).
    tie_weights=False gives the head a weight of its own (d_model, vocab), no bias."""

    def __init__(self, rt, vocab, block_size, n_layer, n_head, d_model, dropout=0.0, rng=None,
                 dtype=numpy.float32, tie_weights=True, init_std=0.02):
        super().__init__()
        rt, rng = runtime_of(rt), generator(rng)
        self.block_size = block_size
        self.wte = Embedding(rt, vocab, d_model, rng=rng, dtype=dtype, init_std=init_std)
        self.wpe = Embedding(rt, block_size, d_model, rng=rng, dtype=dtype, init_std=init_std)
        self.drop = Dropout(dropout)
        self.blocks = Sequential(*(TransformerBlock(rt, d_model, n_head, dropout, rng=rng,
                                                    dtype=dtype, init_std=init_std)
                                   for _ in range(n_layer)))
        self.ln_f = LayerNorm(rt, d_model, dtype=dtype)
        self.lm_head = None if tie_weights else Linear(rt, d_model, vocab, bias=False, rng=rng,
                                                       dtype=dtype, init_std=init_std)
        self._positions = {}   # T -> constant arange(T): made once per length
        causal_mask(rt, block_size, dtype)   # with the parameters, as GPT-2's buffer

    def positions(self, length):
        """The position ids 0..length-1 as a constant tensor, made once per length."""
        if length not in self._positions:
            self._positions[length] = as_tensor(self.wpe.weight.runtime, numpy.arange(length))
        return self._positions[length]

    def forward(self, idx):
        idx = as_tensor(self.wte.weight.runtime, idx, self.wte.num_embeddings, "token ids")
        if len(idx.shape) != 2:
            raise ValueError(f"GPT takes token ids of shape (batch, time), got shape "
                             f"{tuple(idx.shape)}; for one sequence pass ids[None]")
        length = idx.shape[1]
        if length > self.block_size:
            raise ValueError(f"sequence of {length} tokens, block size is {self.block_size}")
        x = self.drop(ops.add(self.wte(idx), self.wpe(self.positions(length))))
        x = self.ln_f(self.blocks(x))
        if self.lm_head is not None:
            return self.lm_head(x)
        return ops.matmul(x, ops.transpose(self.wte.weight))

    def loss(self, idx, targets):
        """Mean next-token cross entropy of forward(idx) against targets (B, T)."""
        logits = self(idx)
        targets = as_tensor(logits.runtime, targets, logits.shape[-1], "targets")
        return ops.cross_entropy(ops.reshape(logits, (-1, logits.shape[-1])),
                                 ops.reshape(targets, (-1,)))

"""BERT (Devlin et al. 2019) as Hugging Face's BertForMaskedLM: word, position and token-type
embeddings with LayerNorm, post-LN encoder layers (bidirectional multi-head attention with
separate query/key/value projections, GELU feed-forward), and the masked-LM head (dense, GELU,
LayerNorm, decoder tied to the word embeddings plus a bias of its own).

GELU is coop's tanh approximation (BERT's is erf's: same shapes and costs). There is no pooler
(BertForMaskedLM has none): ``bert_large`` has 335,174,458 parameters, the published
bert-large-uncased count 335,141,888 (embeddings, encoder and pooler) less the pooler's
1,049,600 plus the head's 1,082,170 (dense 1,049,600, LayerNorm 2,048, decoder bias 30,522).
"""
import numpy

from coop import ops
from coop.models._attention import attend, merge_heads, split_heads
from coop.nn import GELU, Dropout, Embedding, LayerNorm, Linear, Sequential
from coop.nn.module import (
    Module,
    as_tensor,
    constant,
    generator,
    make_parameter,
    runtime_of,
)


class BertLayer(Module):
    """x = LN(x + attention(x)); x = LN(x + FFN(x)), each sub-layer's output dropped out."""

    def __init__(self, rt, d_model, n_heads, d_ff, dropout, eps, rng, dtype):
        super().__init__()
        linear = {"rng": rng, "dtype": dtype, "init_std": 0.02}
        self.n_heads = n_heads
        self.query = Linear(rt, d_model, d_model, **linear)
        self.key = Linear(rt, d_model, d_model, **linear)
        self.value = Linear(rt, d_model, d_model, **linear)
        self.attn_dropout = Dropout(dropout)
        self.attn_out = Linear(rt, d_model, d_model, **linear)
        self.attn_norm = LayerNorm(rt, d_model, eps=eps, dtype=dtype)
        self.ffn = Sequential(Linear(rt, d_model, d_ff, **linear), GELU(),
                              Linear(rt, d_ff, d_model, **linear))
        self.ffn_norm = LayerNorm(rt, d_model, eps=eps, dtype=dtype)
        self.dropout = Dropout(dropout)

    def forward(self, x):
        q, k, v = (split_heads(f(x), self.n_heads) for f in (self.query, self.key, self.value))
        context = merge_heads(attend(q, k, v, dropout=self.attn_dropout))
        x = self.attn_norm(ops.add(x, self.dropout(self.attn_out(context))))
        return self.ffn_norm(ops.add(x, self.dropout(self.ffn(x))))


class BERT(Module):
    """forward(input_ids (B, T), token_type_ids (B, T)) -> hidden states (B, T, d_model);
    ``mlm_logits`` adds the masked-LM head -> (B, T, vocab). Weights N(0, 0.02), biases 0."""

    def __init__(self, rt, vocab=30522, max_positions=512, type_vocab=2, n_layer=12, n_head=12,
                 d_model=768, d_ff=3072, dropout=0.1, eps=1e-12, rng=None, dtype=numpy.float32):
        super().__init__()
        rt, rng = runtime_of(rt), generator(rng)
        embed = {"rng": rng, "dtype": dtype, "init_std": 0.02}
        self.word_embeddings = Embedding(rt, vocab, d_model, **embed)
        self.position_embeddings = Embedding(rt, max_positions, d_model, **embed)
        self.token_type_embeddings = Embedding(rt, type_vocab, d_model, **embed)
        self.embed_norm = LayerNorm(rt, d_model, eps=eps, dtype=dtype)
        self.embed_dropout = Dropout(dropout)
        self.layers = Sequential(*(BertLayer(rt, d_model, n_head, d_ff, dropout, eps, rng, dtype)
                                   for _ in range(n_layer)))
        self.head_dense = Linear(rt, d_model, d_model, rng=rng, dtype=dtype, init_std=0.02)
        self.head_norm = LayerNorm(rt, d_model, eps=eps, dtype=dtype)
        self.decoder_bias = make_parameter(rt, (vocab,), dtype, constant(0.0))
        # made before any step, so a training step's inputs are all built before it starts
        self.position_ids = as_tensor(rt, numpy.arange(max_positions))

    def forward(self, input_ids, token_type_ids):
        rt = self.word_embeddings.weight.runtime
        input_ids = as_tensor(rt, input_ids, self.word_embeddings.num_embeddings, "token ids")
        token_type_ids = as_tensor(rt, token_type_ids, self.token_type_embeddings.num_embeddings,
                                   "token type ids")
        length = input_ids.shape[1]
        if length > self.position_ids.shape[0]:
            raise ValueError(f"sequence of {length} tokens, at most {self.position_ids.shape[0]}")
        positions = self.position_embeddings(ops.getitem(self.position_ids, slice(0, length)))
        x = ops.add(ops.add(self.word_embeddings(input_ids), positions),
                    self.token_type_embeddings(token_type_ids))
        return self.layers(self.embed_dropout(self.embed_norm(x)))

    def mlm_logits(self, input_ids, token_type_ids):
        """The masked-language-model head's logits over the vocabulary, per token."""
        h = self.head_norm(ops.gelu(self.head_dense(self(input_ids, token_type_ids))))
        return ops.add(ops.matmul(h, ops.transpose(self.word_embeddings.weight)),
                       self.decoder_bias)

    def loss(self, input_ids, token_type_ids, labels):
        """Mean masked-LM cross entropy over every position against labels (B, T): the head
        runs on all positions, as BertForMaskedLM's does (it ignores the unmasked ones by label,
        which changes no size)."""
        logits = self.mlm_logits(input_ids, token_type_ids)
        labels = as_tensor(logits.runtime, labels, logits.shape[-1], "labels")
        return ops.cross_entropy(ops.reshape(logits, (-1, logits.shape[-1])),
                                 ops.reshape(labels, (-1,)))


def bert_large(rt, **options):
    """BERT-Large: 24 layers, d 1024, 16 heads, FFN 4096 (335,174,458 parameters with the
    masked-LM head; see the module docstring for the published count)."""
    return BERT(rt, n_layer=24, n_head=16, d_model=1024, d_ff=4096, **options)

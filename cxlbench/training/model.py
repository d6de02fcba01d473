"""A Llama-architecture decoder in plain PyTorch, readable top to bottom.

    tokens -> embedding -> n_layers × [x + Attention(RMSNorm(x)); x + FeedForward(RMSNorm(x))]
           -> RMSNorm -> output projection -> logits

Attention is grouped-query (n_kv_heads ≤ n_heads) with rotary position
embeddings, computed by scaled_dot_product_attention with a causal mask; the
feed-forward is SwiGLU. The layout follows torchtitan's llama3 model, so that
parameter names, shapes and the FLOPs count mean the same as there.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from cxlbench.training.configs import ModelConfig


class RMSNorm(nn.Module):
    """x / rms(x) · weight, the mean of squares computed in fp32 whatever x's dtype."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def rope_tables(head_dim: int, seq_len: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotation angles, (seq_len, head_dim/2) in fp32.
    Pair i of a head (elements 2i, 2i+1) turns by position · theta^(-2i/head_dim)."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each (even, odd) pair of x (batch, seq, heads, head_dim) by its angle:
    the real form of Llama's complex multiplication, computed in fp32."""
    seq = x.shape[1]
    cos, sin = cos[:seq, None, :], sin[:seq, None, :]          # broadcast over heads
    pairs = x.float().unflatten(-1, (-1, 2))
    even, odd = pairs[..., 0], pairs[..., 1]
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
    return rotated.flatten(-2).type_as(x)


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """(batch, seq, kv_heads, head_dim) -> (batch, seq, kv_heads·n_rep, head_dim):
    each kv head serves n_rep consecutive query heads."""
    if n_rep == 1:
        return x
    b, s, kv, d = x.shape
    return x[:, :, :, None, :].expand(b, s, kv, n_rep, d).reshape(b, s, kv * n_rep, d)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.wq = nn.Linear(cfg.dim, cfg.n_heads * cfg.head_dim, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.wo = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, self.n_heads, self.head_dim)
        k = self.wk(x).view(b, s, self.n_kv_heads, self.head_dim)
        v = self.wv(x).view(b, s, self.n_kv_heads, self.head_dim)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        n_rep = self.n_heads // self.n_kv_heads
        k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)
        # SDPA wants (batch, heads, seq, head_dim)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                             v.transpose(1, 2), is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) · w3 x)."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, layer_id: int, cfg: ModelConfig):
        super().__init__()
        self.layer_id = layer_id
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.feed_forward = FeedForward(cfg.dim, cfg.ffn_hidden)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    """Tokens (batch, seq) -> logits (batch, seq, vocab).

    activation_checkpointing recomputes each block in backward instead of keeping
    its activations; only the block inputs are saved. `reentrant_checkpoint` picks
    the reentrant implementation, whose saved inputs pass through
    torch.autograd.graph.saved_tensors_hooks (how the engine moves activation
    checkpoints to a host tier); the default non-reentrant one keeps them in place.
    """

    def __init__(self, cfg: ModelConfig, max_seq_len: int = 2048):
        super().__init__()
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(TransformerBlock(i, cfg) for i in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        cos, sin = rope_tables(cfg.head_dim, max_seq_len, cfg.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.activation_checkpointing = False
        self.reentrant_checkpoint = False
        self.init_weights()

    @torch.no_grad()
    def init_weights(self) -> None:
        """Normal(0, init_std) everywhere; the two projections that write into the
        residual stream (wo, w2) scaled down with depth, as torchtitan does. With
        the output projection at init_std the logits start near zero, so the loss
        at init is close to log(vocab)."""
        std = self.cfg.init_std
        nn.init.normal_(self.tok_embeddings.weight, std=std)
        for layer in self.layers:
            depth_std = std / math.sqrt(2 * (layer.layer_id + 1))
            for lin in (layer.attention.wq, layer.attention.wk, layer.attention.wv,
                        layer.feed_forward.w1, layer.feed_forward.w3):
                nn.init.normal_(lin.weight, std=std)
            for lin in (layer.attention.wo, layer.feed_forward.w2):
                nn.init.normal_(lin.weight, std=depth_std)
        nn.init.normal_(self.output.weight, std=std)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.shape[1] > self.rope_cos.shape[0]:
            raise ValueError(f"sequence {tokens.shape[1]} longer than the rope tables "
                             f"({self.rope_cos.shape[0]}); build the model with a larger max_seq_len")
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            if self.activation_checkpointing and torch.is_grad_enabled():
                h = checkpoint(layer, h, self.rope_cos, self.rope_sin,
                               use_reentrant=self.reentrant_checkpoint)
            else:
                h = layer(h, self.rope_cos, self.rope_sin)
        return self.output(self.norm(h))


def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy in nats, computed in fp32."""
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))

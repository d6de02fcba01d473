"""Model and training configurations as dataclasses (torchtitan's style).

Shapes follow Llama 3: `1b` is Llama 3.2 1B, `3b` Llama 3.2 3B, `8b` Llama
3.1 8B and `70b` Llama 3.1 70B (embeddings untied, as torchtitan trains them).
`70b` is there for the step-time model and the placement advisor (`cxlbench
advise`): no single GPU or 2-core VM trains it, and find_max never reaches it
on one (it stops at the first config that does not fit or would outrun its
case). `tiny` trains on a 2-core CPU in seconds; `small` is a few million parameters, enough for the CPU
optimizer and the NVMe path to move real bytes.
"""
from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class ModelConfig:
    name: str
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    vocab_size: int
    ffn_hidden: int            # SwiGLU hidden width (w1, w3: dim -> ffn_hidden; w2 back)
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    init_std: float = 0.02

    def __post_init__(self):
        if self.dim % self.n_heads:
            raise ValueError(f"{self.name}: dim {self.dim} not divisible by {self.n_heads} heads")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"{self.name}: {self.n_heads} heads not a multiple of "
                             f"{self.n_kv_heads} kv heads")

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    def num_params(self, embeddings: bool = True) -> int:
        """Parameters of model.Transformer, counted from the shapes (tests check it
        against the module). embeddings=False leaves out the token embedding only,
        as torchtitan does for its FLOPs count (the output projection is a matmul)."""
        d, kv = self.dim, self.n_kv_heads * self.head_dim
        attention = d * d + 2 * d * kv + d * d          # wq, wk, wv, wo
        ffn = 3 * d * self.ffn_hidden                   # w1, w2, w3
        block = attention + ffn + 2 * d                 # + two RMSNorm weights
        n = self.n_layers * block + d + d * self.vocab_size    # + final norm, output
        return n + (self.vocab_size * d if embeddings else 0)

    def flops_per_token(self, seq_len: int) -> int:
        """Training FLOPs per token: 6·N(non-embedding) + 12·L·d·S (torchtitan, PaLM).
        The attention term counts the full S×S score matrix, causal mask or not."""
        return 6 * self.num_params(embeddings=False) + 12 * self.n_layers * self.dim * seq_len


@dataclass(frozen=True)
class TrainConfig:
    """One training run: batch shape, optimizer, step counts and where things live."""
    batch: int
    seq_len: int
    lr: float = 3e-3
    betas: tuple[float, float] = (0.9, 0.95)
    weight_decay: float = 0.1
    eps: float = 1e-8
    warmup_steps: int = 3      # steps run before timing (allocations, autotuning, page faults)
    steps: int = 20            # steady steps timed
    seed: int = 0
    activation_checkpointing: bool = False
    chunk_params: int = 1 << 22   # optimizer chunk: elements per chunk (host and NVMe paths)
    # the offload engine's delayed parameter update (ZeRO-Offload's DPU): after
    # dpu_warmup_steps ordinary steps, step i's host update runs beside step i+1's
    # forward and backward, which use parameters one update stale
    dpu: bool = False
    dpu_warmup_steps: int = 2


MODELS: dict[str, ModelConfig] = {m.name: m for m in [
    ModelConfig("tiny", dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=256,
                ffn_hidden=192),
    ModelConfig("small", dim=256, n_layers=4, n_heads=8, n_kv_heads=4, vocab_size=2048,
                ffn_hidden=704),
    ModelConfig("1b", dim=2048, n_layers=16, n_heads=32, n_kv_heads=8, vocab_size=128256,
                ffn_hidden=8192, rope_theta=500000.0),
    ModelConfig("3b", dim=3072, n_layers=28, n_heads=24, n_kv_heads=8, vocab_size=128256,
                ffn_hidden=8192, rope_theta=500000.0),
    ModelConfig("8b", dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, vocab_size=128256,
                ffn_hidden=14336, rope_theta=500000.0),
    ModelConfig("70b", dim=8192, n_layers=80, n_heads=64, n_kv_heads=8, vocab_size=128256,
                ffn_hidden=28672, rope_theta=500000.0),
]}

# The batch shape each model runs at unless a suite says otherwise.
TRAIN_DEFAULTS: dict[str, TrainConfig] = {
    "tiny": TrainConfig(batch=8, seq_len=128, lr=3e-3, chunk_params=1 << 14),
    "small": TrainConfig(batch=8, seq_len=256, lr=1e-3, chunk_params=1 << 20),
    "1b": TrainConfig(batch=4, seq_len=2048, lr=3e-4),
    "3b": TrainConfig(batch=2, seq_len=2048, lr=3e-4),
    "8b": TrainConfig(batch=1, seq_len=2048, lr=3e-4),
    "70b": TrainConfig(batch=1, seq_len=2048, lr=1.5e-4),
}


def model_config(name: str) -> ModelConfig:
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model config {name!r}; known: {', '.join(MODELS)}") from None


def train_config(name: str, **overrides) -> TrainConfig:
    """The defaults for model `name`, with the given fields replaced (None = keep)."""
    base = TRAIN_DEFAULTS.get(name, TRAIN_DEFAULTS["tiny"])
    return replace(base, **{k: v for k, v in overrides.items() if v is not None})

"""Synthetic token batches with a fixed seed and structure a model can learn.

The tokens are a Markov chain: every token has `branching` fixed successors,
drawn with fixed, skewed probabilities. A model that has learned the table
predicts the next token with the chain's entropy (about 1.2 nats for the
default four successors), far below the log(vocab) it starts at, so a run whose
loss does not fall is a run that does not train. Batches are generated before
timing; generating them is no part of a step.
"""
from __future__ import annotations

import math

import torch

SUCCESSOR_PROBS = (0.5, 0.25, 0.15, 0.1)


class MarkovTokens:
    def __init__(self, vocab_size: int, seed: int = 0, probs=SUCCESSOR_PROBS):
        self.vocab_size = vocab_size
        self.seed = seed
        g = torch.Generator().manual_seed(seed)
        self.probs = torch.tensor(probs, dtype=torch.float64)
        self.probs /= self.probs.sum()
        # successors[t, j]: the j-th possible next token after t (a repeat among a
        # token's successors only merges two of its branches: ~k²/2V of them)
        self.successors = torch.randint(vocab_size, (vocab_size, len(probs)), generator=g)

    @property
    def entropy(self) -> float:
        """The best achievable loss in nats (the first token of each row aside)."""
        return -sum(p * math.log(p) for p in self.probs.tolist())

    def batch(self, index: int, batch: int, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Batch number `index`: (inputs, labels), each (batch, seq_len) int64, labels
        the inputs shifted by one. The same index gives the same batch on any machine."""
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + index + 1)
        choice = torch.multinomial(self.probs, batch * seq_len, replacement=True,
                                   generator=g).view(batch, seq_len)
        tokens = torch.empty(batch, seq_len + 1, dtype=torch.int64)
        tokens[:, 0] = torch.randint(self.vocab_size, (batch,), generator=g)
        for t in range(seq_len):
            tokens[:, t + 1] = self.successors[tokens[:, t], choice[:, t]]
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def batches(self, n: int, batch: int, seq_len: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [self.batch(i, batch, seq_len) for i in range(n)]

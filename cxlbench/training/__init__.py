"""End-to-end Llama-style training with model state on each memory tier.

model (the decoder), configs (tiny … 8b), data (synthetic learnable tokens),
placement (host tensors on a node, verified), optimizer (chunked CPU AdamW),
nvme_optimizer (AdamW state in files), engine (offload / no-offload / FSDP2),
stepmodel (what a step should cost), probes (the rates it needs), session (one
measurement end to end). The benchmark family is cxlbench.benchmarks.training.
"""

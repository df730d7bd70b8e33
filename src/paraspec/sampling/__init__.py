"""Sampling parameters, logits processors (pure functions) and the per-request sampler."""

"""Logits processors: pure functions on one row of logits (fp32 [vocab])."""

from __future__ import annotations

import torch


def apply_penalties(
    logits: torch.Tensor,
    seen: torch.Tensor,
    output_counts: torch.Tensor,
    repetition: float,
    presence: float,
    frequency: float,
) -> torch.Tensor:
    """seen: [vocab] bool, tokens of the prompt or output so far; output_counts: [vocab] fp32,
    occurrences in the output so far. Repetition (HF/MindIE): divide positive logits, multiply
    negative ones. Presence/frequency (OpenAI): subtract, over output tokens only."""
    if repetition != 1.0:
        penalised = torch.where(logits > 0, logits / repetition, logits * repetition)
        logits = torch.where(seen, penalised, logits)
    if presence != 0.0 or frequency != 0.0:
        logits = logits - frequency * output_counts - presence * (output_counts > 0).float()
    return logits


def filtered_probs(
    logits: torch.Tensor, temperature: float, top_k: int, top_p: float, min_p: float
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Probabilities after temperature, top-k, top-p and min-p. Returns (probs, token_ids):
    token_ids is None when probs covers the whole vocabulary in id order, else the ids of the
    kept tokens (sorted by descending probability)."""
    x = logits / temperature
    ids = None
    if top_k > 0 and top_k < x.shape[-1]:
        x, ids = torch.topk(x, top_k)  # sorted, descending
    if top_p < 1.0:
        if ids is None:
            x, ids = torch.sort(x, descending=True)
        probs = torch.softmax(x, -1)
        # keep the smallest prefix whose mass reaches top_p (the first token always stays)
        keep = (probs.cumsum(-1) - probs) < top_p
        keep[0] = True  # also when top_p rounds to 0 in fp32 (1e-46): a filter never empties
        x = x[keep]
        ids = ids[keep]
    probs = torch.softmax(x, -1)
    if min_p > 0.0:
        probs = torch.where(probs >= min_p * probs.max(), probs, torch.zeros_like(probs))
        probs = probs / probs.sum()
    return probs, ids

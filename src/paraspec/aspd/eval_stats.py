"""What `paraspec aspd eval` reports with its figures: bootstrap intervals over prompts, and the
word overlap an answer has with a reference answer.

The intervals resample prompts (not tokens): a prompt's answers are what varies between
evaluations, and its tokens are not independent of one another. Ratios are of sums over the
resampled prompts (total time over total tokens), as the point figure is.
"""

from __future__ import annotations

import random
import re
from typing import Callable, Sequence

LEVEL = 0.90
ITERS = 1000

_WORD = re.compile(r"\w+")


def bootstrap(
    stat: Callable[[Sequence[int]], float],
    n: int,
    iters: int = ITERS,
    level: float = LEVEL,
    seed: int = 0,
) -> list[float]:
    """[low, high] of `stat` over `iters` resamplings (with replacement) of the n prompt indices."""
    if n == 0:
        return [float("nan"), float("nan")]
    rng = random.Random(seed)
    vals = sorted(stat([rng.randrange(n) for _ in range(n)]) for _ in range(iters))
    lo = vals[int((1 - level) / 2 * (iters - 1))]
    hi = vals[int((1 + level) / 2 * (iters - 1))]
    return [round(lo, 4), round(hi, 4)]


def mean_ci(values: Sequence[float], **kw) -> dict:
    values = list(values)
    if not values:
        return {"mean": None, "ci90": None, "n": 0}
    mean = sum(values) / len(values)
    ci = bootstrap(lambda idx: sum(values[i] for i in idx) / len(idx), len(values), **kw)
    return {"mean": round(mean, 4), "ci90": ci, "n": len(values)}


def ratio_ci(num: Sequence[float], den: Sequence[float], **kw) -> dict:
    """sum(num) / sum(den) over paired prompts, with its interval."""
    num, den = list(num), list(den)
    if not num or sum(den) <= 0:
        return {"ratio": None, "ci90": None, "n": len(num)}
    ci = bootstrap(
        lambda idx: sum(num[i] for i in idx) / max(1e-12, sum(den[i] for i in idx)), len(num), **kw
    )
    return {"ratio": round(sum(num) / sum(den), 4), "ci90": ci, "n": len(num)}


def speedup_ci(
    base_s: Sequence[float],
    base_tokens: Sequence[int],
    new_s: Sequence[float],
    new_tokens: Sequence[int],
    **kw,
) -> dict:
    """(base seconds per token) / (new seconds per token), over paired prompts: a throughput ratio,
    fair where the two write answers of different length."""
    b_s, b_t, n_s, n_t = list(base_s), list(base_tokens), list(new_s), list(new_tokens)
    if not b_s or not sum(n_s) or not sum(b_t):
        return {"ratio": None, "ci90": None, "n": len(b_s)}

    def stat(idx):
        per_base = sum(b_s[i] for i in idx) / max(1, sum(b_t[i] for i in idx))
        per_new = sum(n_s[i] for i in idx) / max(1, sum(n_t[i] for i in idx))
        return per_base / max(1e-12, per_new)

    return {
        "ratio": round(stat(range(len(b_s))), 4),
        "ci90": bootstrap(stat, len(b_s), **kw),
        "n": len(b_s),
    }


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def rouge_l(candidate: str, reference: str) -> float:
    """ROUGE-L F1 on lower-cased words: longest common subsequence against the reference."""
    a, b = words(candidate), words(reference)
    if not a or not b:
        return float(a == b)
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    lcs = prev[-1]
    if lcs == 0:
        return 0.0
    p, r = lcs / len(a), lcs / len(b)
    return 2 * p * r / (p + r)


def degenerate(text: str, n: int = 6, times: int = 3) -> bool:
    """A loop: some n-word run occurs `times` or more (what a broken fine-tune writes)."""
    w = words(text)
    seen: dict[tuple, int] = {}
    for i in range(len(w) - n + 1):
        k = tuple(w[i : i + n])
        seen[k] = seen.get(k, 0) + 1
        if seen[k] >= times:
            return True
    return False

"""`paraspec generate --json`: a request that ran at 1.00 tokens/step says why, step by step, and
--compare-ar runs plain decoding in the same engine (the same tokens, the speedup)."""

import json
import os
import subprocess
import sys

import pytest

from kernel_paths import RUNNABLE
from paraspec.decoding.contract.stats import NO_DRAFT_REASONS, ROWS_TOO_DEAR
from tiny_models import write_gguf

DEAR = '{"1": 1, "2": 2, "4": 4, "8": 8, "16": 16}'  # every row a whole step: no draft can pay


@pytest.mark.skipif(
    not any(k.module is not None for k in RUNNABLE if k.name != "torch"),
    reason="no compiled kernels here: GGUF rows run padded, and up to 4 rows are free",
)
def test_a_request_at_one_token_per_step_says_why(tiny_model_dir, tmp_path):
    # GGUF blocks run unpadded rows, so the pinned curve is the one the policy prices by
    model = write_gguf(tiny_model_dir("llama"), tmp_path / "tiny-q8.gguf", "Q8_0")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "paraspec.cli",
            "generate",
            "--model",
            str(model),
            "--json",
            "--plugin",
            "memory_decoding",
            "--max-new-tokens",
            "24",
            "--ignore-eos",
            "--compare-ar",
            "abc abc abc abc abc abc abc abc",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PARASPEC_FORWARD_COST": DEAR},
    )
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    s = out["stats"]
    assert s["mean_accepted_tokens_per_step"] == 1.0 and s["draft_tokens"] == 0
    why = s["no_draft_steps"]
    # every step says why
    assert set(why) <= set(NO_DRAFT_REASONS) and sum(why.values()) == s["decode_steps"]
    assert why.get(ROWS_TOO_DEAR, 0) > 0  # the text repeats: candidates, priced too dear
    assert (
        out["ar"]["same_tokens"] is True and out["ar"]["stats"]["decode_steps"] == s["decode_steps"]
    )
    assert out["ar"]["speedup_over_ar"] > 0

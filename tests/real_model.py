"""The real Qwen2.5-Coder-0.5B-Instruct Q4_K_M GGUF (`paraspec fetch`, catalog.py) for the tests that
need real weights: its path, or a skip naming `make models` where it is not fetched. Under CI=true an
absent file fails the test instead: CI fetches it, so a skip there would hide a broken fetch."""

from pathlib import Path

import pytest

from kernel_paths import on_ci
from paraspec import catalog

REAL = "qwen2.5-coder-0.5b"


def real_model_path() -> Path:
    if catalog.is_fetched(REAL):
        return catalog.cached_path(REAL)
    why = f"{REAL} is not fetched ({catalog.ARTIFACTS[REAL].path}); run `make models`"
    if on_ci():
        pytest.fail(f"CI=true: {why} before the tests (`paraspec fetch {REAL}`)", pytrace=False)
    pytest.skip(why)

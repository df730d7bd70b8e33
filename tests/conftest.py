import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from tiny_models import make_tiny_model  # noqa: E402


def pytest_configure(config):
    """Under CI=true a kernel module this CPU can run must have built (kernel_paths.ci_unbuilt):
    the run stops at once with one line naming it and the build command. Under xdist, each
    worker's share of the cores."""
    import kernel_paths

    if kernel_paths.on_ci() and (line := kernel_paths.ci_unbuilt()):
        raise pytest.UsageError(line)
    # `make test` runs the files over pytest-xdist workers, one per core: each worker's torch then
    # takes its share of the cores instead of every worker all of them (oversubscribed, slower)
    if workers := os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(workers)))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A factory: tiny_model_dir(arch, **config) -> folder of a random model of that arch."""
    cache = {}

    def make(arch: str = "llama", **kwargs) -> Path:
        key = (arch, repr(sorted(kwargs.items())))
        if key not in cache:
            cache[key] = make_tiny_model(tmp_path_factory.mktemp(f"tiny-{arch}"), arch, **kwargs)
        return cache[key]

    return make


# The bundled model (SmolLM2-135M GGUF), one engine per numerics for the whole run: loading one is
# seconds, and on an AVX2 core the fp32 and bf16 ones are the slowest engines of the suite.
@pytest.fixture(scope="session")
def bundled_llm_default():
    """This CPU's default numerics (gguf on the compiled kernels; else kernels.default_numerics)."""
    from paraspec import LLM

    return LLM()


@pytest.fixture(scope="session")
def bundled_llm_fp32():
    from paraspec import LLM

    return LLM(dtype="float32")


@pytest.fixture(scope="session")
def bundled_llm_bf16():
    from paraspec import LLM

    return LLM(dtype="bfloat16")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(scope="session", autouse=True)
def _draft_every_step():
    """Engines in the tests' process ask their drafter every step: the draft gate (decoding/policy/gate.py)
    skips looks by this machine's timings, and exactness tests must verify a draft tree on every
    step, the same ones on every run (servers the tests start inherit it). tests/decoding/test_gate.py
    turns the gate on per engine. Session-scoped: module-scoped engines are built before any
    function-scoped fixture runs."""
    from paraspec.engine import DRAFT_GATE_ENV

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(DRAFT_GATE_ENV, "0")
        yield

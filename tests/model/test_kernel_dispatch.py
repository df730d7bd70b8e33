"""Kernel dispatch (paraspec.model.kernels): a compiled module is imported only on a CPU that has
its instructions, PARASPEC_KERNELS forces a path, a path that cannot run falls back with one log
line, and greedy parallel decoding equals AR with the compiled kernels off, in a fresh process,
and on an emulated AVX2-only CPU (qemu-user, where installed)."""

import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from ci_needs import require
from paraspec.errors import ConfigError
from paraspec.model import kernels

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def fresh(monkeypatch):
    """kernels' caches emptied before and after, so a test can change what the CPU 'has'."""
    cached = (kernels._load, kernels.cpu_features, kernels.default)
    for fn in cached:
        fn.cache_clear()
    yield monkeypatch
    for fn in cached:
        fn.cache_clear()


def _pair(n: kernels.Numerics) -> tuple:
    return n.dtype, n.quantization


def test_runnable_ends_with_torch_and_is_best_first():
    paths = kernels.runnable()
    assert paths[-1] is kernels.TORCH
    order = [kernels.PATHS.index(k.name) for k in paths]
    assert order == sorted(order)
    for k in paths[:-1]:
        assert (
            k.module.ISA == k.name
            and k.module.cpu_supported()
            and k.w8a8_variant in k.module.w8a8_variants()
        )


def test_choose_names_and_errors(fresh):
    assert kernels.choose("torch") is kernels.TORCH
    assert kernels.choose("auto") == kernels.runnable()[0]
    for bad in ("avx3", "torch:x", "auto:avx2"):
        with pytest.raises(ConfigError, match="not a kernel path"):
            kernels.choose(bad)
    fresh.setenv(kernels.ENV, "nonsense")
    with pytest.raises(ConfigError, match="PARASPEC_KERNELS='nonsense'"):
        kernels.choose()
    fresh.setenv(kernels.ENV, "torch")
    assert kernels.default() is kernels.TORCH


def test_a_cpu_without_the_isa_never_imports_its_module(fresh, caplog):
    """What an AVX2-only CPU sees: avx512 is refused before any import, and asking for it falls
    back to the next path with one warning naming what is missing."""
    fresh.setattr(kernels, "cpu_features", lambda: frozenset({"avx2", "fma", "f16c"}))
    imported = []
    real_import = kernels.importlib.import_module
    fresh.setattr(
        kernels.importlib, "import_module", lambda name: imported.append(name) or real_import(name)
    )
    with caplog.at_level(logging.WARNING, logger="paraspec.kernels"):
        picked = kernels.choose("avx512")
    assert "paraspec.model._kernels_avx512" not in imported
    assert kernels.why_not("avx512") == "this CPU lacks avx512_vnni avx512bw avx512f avx512vl"
    assert picked.name in ("avx2", "torch")
    assert (
        len(caplog.records) == 1 and "cannot run here" in caplog.text and "using the" in caplog.text
    )


def test_no_x86_kernels_on_other_architectures(fresh):
    fresh.setattr(kernels.platform, "machine", lambda: "aarch64")
    assert kernels.runnable() == [kernels.TORCH]
    assert "not x86-64" in kernels.why_not("avx2")


def test_default_numerics_follow_the_kernels(fresh):
    fake = kernels.Kernels("avx2", module=object(), w8a8_variant="avx2")
    assert _pair(kernels.default_numerics(fake)) == ("bfloat16", "w8a8")  # compiled: int8 weights
    assert _pair(kernels.default_numerics(kernels.TORCH)) == ("bfloat16", None)
    # an explicit choice keeps its meaning
    assert _pair(kernels.resolve_numerics("float32", "auto", fake)) == ("float32", None)
    assert _pair(kernels.resolve_numerics("auto", "none", fake)) == ("bfloat16", None)
    assert _pair(kernels.resolve_numerics("auto", "w8a8", kernels.TORCH)) == ("bfloat16", "w8a8")


def _script(model_dir: str) -> str:
    """Greedy parallel decoding (memory_decoding and random draft trees) vs AR on a tiny model."""
    return textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {os.path.join(ROOT, "tests")!r})
        from drafters import RandomTreeDrafter
        from paraspec import LLM, SamplingParams
        from paraspec.model import kernels
        llm = LLM({model_dir!r}, dtype="float32")
        params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
        prompts = ["abcabcabcabc", "hello hello hello", "1, 2, 3, 4, 5,"]
        ar = [o.token_ids for o in llm.generate(prompts, params)]
        md = [o.token_ids for o in llm.generate(prompts, params, plugin_params={{"plugin_type": "memory_decoding"}})]
        llm.engine.default_drafter = RandomTreeDrafter(llm.model.args.vocab_size, 8, seed=1)
        rnd = [o.token_ids for o in llm.generate(prompts, params)]
        w8 = LLM({model_dir!r}, quantization="w8a8")
        w8_ar = [o.token_ids for o in w8.generate(prompts, params)]
        w8_md = [o.token_ids for o in w8.generate(prompts, params, plugin_params={{"plugin_type": "memory_decoding"}})]
        print(json.dumps({{"kernels": llm.kernels.label, "default": kernels.default().label,
                           "modules": sorted(m for m in sys.modules if m.startswith("paraspec.model._kernels")),
                           "md": md == ar, "random": rnd == ar, "w8a8": w8_md == w8_ar, "n": len(ar[0])}}))
    """)


def _run(cmd: list[str], env: dict, timeout: float) -> dict:
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_kernels_off_in_a_fresh_process(tiny_model_dir):
    """PARASPEC_KERNELS=torch: no compiled module is even imported, and parallel decoding stays exact."""
    env = {**os.environ, kernels.ENV: "torch"}
    r = _run([sys.executable, "-c", _script(str(tiny_model_dir("llama")))], env, 300)
    assert r["kernels"] == r["default"] == "torch" and r["modules"] == []
    assert r["md"] and r["random"] and r["w8a8"] and r["n"] == 24


QEMU = shutil.which("qemu-x86_64")


@pytest.mark.skipif(not kernels.is_x86(), reason="emulates an x86-64 CPU")
@pytest.mark.parametrize("cpu,want", [("EPYC-Rome", "avx2"), ("Westmere", "torch")])
def test_emulated_cpu_without_avx512(tiny_model_dir, cpu, want):
    """The machine that crashed: an AMD EPYC with AVX2 and no AVX-512 (qemu's EPYC-Rome reports
    that through CPUID), and a pre-AVX CPU. Importing paraspec there must not touch AVX-512 code
    (qemu would kill the process with SIGILL), the best path it can run is chosen, and greedy
    parallel decoding equals AR on it."""
    require(QEMU is not None, "qemu-user (qemu-x86_64)", "apt-get install qemu-user")
    if want != "torch" and kernels.why_not(want) == "not built":
        pytest.skip(f"the {want} kernels are not built here")
    # the emulated CPU decides alone: no forced path, no ISA caps (an AVX2 cap would SIGILL on Westmere)
    caps = {kernels.ENV, "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS"}
    env = {k: v for k, v in os.environ.items() if k not in caps}
    r = _run(
        [QEMU, "-cpu", cpu, sys.executable, "-c", _script(str(tiny_model_dir("llama")))], env, 600
    )
    assert r["kernels"] == r["default"] == (want if want == "torch" else r["kernels"])
    assert r["kernels"].split(":")[0] == want
    assert "paraspec.model._kernels_avx512" not in r["modules"]
    assert r["md"] and r["random"] and r["w8a8"] and r["n"] == 24

"""The CI check of tests/kernel_paths.py: under CI=true every kernel module must have built, and one
this CPU has the instructions for must run, or the run stops naming it (a compile error is no green
run of the torch paths alone); locally, or on a CPU without the instructions, its tests just skip."""

import os
import subprocess
import sys
import textwrap

import pytest

from kernel_paths import BUILD, ci_unbuilt, on_ci

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AVX2_ONLY = frozenset({"avx", "avx2", "fma", "f16c"})
AVX512 = AVX2_ONLY | {"avx512f", "avx512bw", "avx512vl", "avx512_vnni"}


def _check(whys: dict, features=AVX2_ONLY, x86=True, files=None):
    files = files or {"avx512": "", "avx2": ""}
    return ci_unbuilt(
        why_not=whys.__getitem__,
        cpu_features=lambda: features,
        is_x86=lambda: x86,
        not_built=files.__getitem__,
    )


@pytest.mark.parametrize(
    "why",
    [
        "not built",
        "a stale build (VERSION 19, want 20)",
        "built against torch 2.12.0, this is torch 2.13.0",
        "does not load (undefined symbol: _ZN3c10)",
    ],
)
def test_a_module_this_cpu_can_run_must_load(why):
    line = _check({"avx512": "this CPU lacks avx512f", "avx2": why})
    assert line is not None and "\n" not in line
    assert (
        f"paraspec.model._kernels_avx2 ({why})" in line
        and BUILD in line
        and "_kernels_avx512" not in line
    )
    both = _check({"avx512": "not built", "avx2": "not built"}, AVX512)
    assert "_kernels_avx512 (not built)" in both and "_kernels_avx2 (not built)" in both


@pytest.mark.parametrize("why", ["not built", "built against torch 2.12.0, this is torch 2.13.0"])
def test_a_module_this_cpu_cannot_run_must_still_build(why):
    """An AVX-512 compile error on an AVX2 runner: its tests skip for the CPU, so the build itself
    must be what fails the run."""
    line = _check(
        {"avx512": "this CPU lacks avx512f", "avx2": ""}, files={"avx512": why, "avx2": ""}
    )
    assert line is not None and "\n" not in line
    assert (
        f"paraspec.model._kernels_avx512 ({why})" in line
        and BUILD in line
        and "_kernels_avx2" not in line
    )
    none = _check(
        {"avx512": "this CPU lacks avx2", "avx2": "this CPU lacks avx2"},
        frozenset(),
        files={"avx512": why, "avx2": why},
    )
    assert "_kernels_avx512" in none and "_kernels_avx2" in none


def test_no_line_when_the_cpu_cannot_run_it_or_it_runs():
    assert _check({"avx512": "", "avx2": ""}, AVX512) is None
    assert _check({"avx512": "this CPU lacks avx512f", "avx2": ""}) is None
    assert (
        _check({"avx512": "this CPU lacks avx512f", "avx2": "this CPU lacks avx2"}, frozenset())
        is None
    )
    assert _check({"avx512": "its own CPUID check refuses this CPU", "avx2": ""}, AVX512) is None
    assert (
        _check({"avx512": "aarch64 is not x86-64", "avx2": "aarch64 is not x86-64"}, x86=False)
        is None
    )


def test_on_ci():
    assert on_ci({"CI": "true"}) and on_ci({"CI": "1"}) and on_ci({"CI": "TRUE"})
    assert not on_ci({}) and not on_ci({"CI": ""}) and not on_ci({"CI": "false"})


def test_this_machine_passes_the_check_on_ci():
    """What the hook sees here: on CI it must be nothing (the run would have stopped)."""
    line = ci_unbuilt()
    if on_ci():
        assert line is None
    elif line:
        pytest.skip(f"a CI run here would stop: {line}")


SCRIPT = textwrap.dedent("""
    import sys
    import pytest
    from paraspec.model import kernels
    real = kernels._load
    kernels._load = lambda isa: (None, "not built") if isa == "avx2" else real(isa)   # a compile that failed
    kernels.cpu_features = lambda: frozenset({"avx", "avx2", "fma", "f16c"})            # an AVX2-only CPU
    kernels.is_x86 = lambda: True
    sys.exit(int(pytest.main(["-q", "-p", "no:cacheprovider", "--collect-only", "tests/sampling"])))
""")


@pytest.mark.parametrize("ci", ["true", ""])
def test_the_conftest_hook_fails_a_ci_run_with_one_line(ci):
    env = {**os.environ, "CI": ci}
    r = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = r.stdout + r.stderr
    if ci:
        assert r.returncode == pytest.ExitCode.USAGE_ERROR, out
        errors = [ln for ln in out.splitlines() if "_kernels_avx2" in ln]
        assert errors == [
            f"ERROR: CI=true: paraspec.model._kernels_avx2 (not built): every kernel module "
            f"must build (and those this CPU has the instructions for must run), or its "
            f"tests would skip; build it: {BUILD}"
        ], out
    else:
        assert r.returncode == 0 and "_kernels_avx2" not in out, out

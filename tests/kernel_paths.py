"""The kernel paths this machine can execute, as pytest params: the exactness tests run on each.

An AVX-512 machine runs the avx512, avx2 (each W8A8 inner loop its CPU has) and torch paths; an
AVX2 one avx2 and torch; other CPUs torch. A path that cannot run here shows as a skip with why.

A skip is right for a CPU without the instructions, never for a module that did not build: under
CI=true, ci_unbuilt() names every module that is missing, and every one this CPU could run that does
not run (conftest.py fails the run on it), so a compile error cannot pass as a green run of the
torch paths alone.
"""

import os
import sys
from pathlib import Path

import pytest

from paraspec.model import kernels

RUNNABLE = kernels.runnable()


def _skip(name: str) -> pytest.MarkDecorator:
    return pytest.mark.skip(reason=f"the {name} kernels do not run here: {kernels.why_not(name)}")


def per_isa() -> list:
    """One param per ISA (avx512, avx2, torch) with its best W8A8 variant: for the attention
    kernel and whole-model tests."""
    out = []
    for name in kernels.PATHS:
        k = next((k for k in RUNNABLE if k.name == name), None)
        out.append(pytest.param(k, id=name, marks=() if k else _skip(name)))
    return out


def per_variant() -> list:
    """Every runnable (ISA, W8A8 inner loop), torch included: for the W8A8 linear tests."""
    names = {k.name for k in RUNNABLE}
    return [pytest.param(k, id=k.label) for k in RUNNABLE] + [
        pytest.param(None, id=n, marks=_skip(n)) for n in kernels.ISAS if n not in names
    ]


ROOT = Path(__file__).resolve().parent.parent
_py = Path(sys.executable)
# the command that builds the modules in place, with this interpreter (its compiler error shows without -q)
BUILD = (
    f"{_py.relative_to(ROOT) if _py.is_relative_to(ROOT) else _py} src/paraspec/model/csrc/build.py"
)


def on_ci(env=os.environ) -> bool:
    return env.get("CI", "").strip().lower() in ("true", "1", "yes")


def not_built(isa: str) -> str:
    """Why the ISA's module file is missing or unusable, "" if it is there, without importing it:
    for a module this CPU cannot run (importing it could already execute its instructions)."""
    import importlib.util

    if importlib.util.find_spec(f"paraspec.model._kernels_{isa}") is None:
        return "not built"
    built_for = kernels._built_for(isa)
    if built_for and kernels._minor(built_for) != kernels._minor(kernels.torch.__version__):
        return f"built against torch {built_for}, this is torch {kernels.torch.__version__}"
    return ""


def ci_unbuilt(why_not=None, cpu_features=None, is_x86=None, not_built=not_built) -> str | None:
    """One line naming each kernel module csrc/build.py builds on this platform that is not there,
    with the command that builds it; None when all are. A module this CPU has the instructions for
    (kernels.REQUIRES) must also run (not stale, not another torch's, no import error); one it
    cannot run must at least have built, so an AVX-512 compile error fails an AVX2 runner too.
    For CI: locally a skip is enough. (The arguments stand in for kernels' own, for the tests.)"""
    why_not, cpu_features, is_x86 = (
        why_not or kernels.why_not,
        cpu_features or kernels.cpu_features,
        is_x86 or kernels.is_x86,
    )
    if not is_x86():
        return None
    have = cpu_features()
    bad = []
    for isa in kernels.ISAS:
        if kernels.REQUIRES[isa] <= have:
            why = why_not(isa)
            # the module's own word: cannot
            if why and why != "its own CPUID check refuses this CPU":
                bad.append((isa, why))
        elif why := not_built(isa):
            bad.append((isa, why))
    if not bad:
        return None
    names = ", ".join(f"paraspec.model._kernels_{isa} ({why})" for isa, why in bad)
    return (
        f"CI=true: {names}: every kernel module must build (and those this CPU has the "
        f"instructions for must run), or its tests would skip; build it: {BUILD}"
    )

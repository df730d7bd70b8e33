"""The kernel paths this machine can execute, as pytest params: the exactness tests run on each.

An AVX-512 machine runs the avx512, avx2 (each W8A8 inner loop its CPU has) and torch paths; an
AVX2 one avx2 and torch; other CPUs torch. A path that cannot run here shows as a skip with why.

A skip is right for a CPU without the instructions, never for a module that did not build: under
CI=true, ci_unbuilt() names every module this CPU could run that is missing (conftest.py fails the
run on it), so a compile error cannot pass as a green run of the torch paths alone.
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
    return ([pytest.param(k, id=k.label) for k in RUNNABLE]
            + [pytest.param(None, id=n, marks=_skip(n)) for n in kernels.ISAS if n not in names])


ROOT = Path(__file__).resolve().parent.parent
_py = Path(sys.executable)
# the command that builds the modules in place, with this interpreter (its compiler error shows without -q)
BUILD = f"{_py.relative_to(ROOT) if _py.is_relative_to(ROOT) else _py} src/paraspec/model/csrc/build.py"


def on_ci(env=os.environ) -> bool:
    return env.get("CI", "").strip().lower() in ("true", "1", "yes")


def ci_unbuilt(why_not=None, cpu_features=None, is_x86=None) -> str | None:
    """One line naming each kernel module this CPU has the instructions for (kernels.REQUIRES) that
    does not run here (not built, a stale or another torch's build, an import error), with the
    command that builds it; None when every such module runs. For CI: locally a skip is enough.
    (The arguments stand in for kernels' own, for the tests.)"""
    why_not, cpu_features, is_x86 = why_not or kernels.why_not, cpu_features or kernels.cpu_features, \
        is_x86 or kernels.is_x86
    if not is_x86():
        return None
    have = cpu_features()
    bad = [(isa, why) for isa in kernels.ISAS
           if kernels.REQUIRES[isa] <= have and (why := why_not(isa))
           and why != "its own CPUID check refuses this CPU"]     # the module's own word: this CPU cannot
    if not bad:
        return None
    names = ", ".join(f"paraspec.model._kernels_{isa} ({why})" for isa, why in bad)
    return (f"CI=true: {names} does not run here though this CPU has its instructions, so every "
            f"compiled-path test would skip; build it: {BUILD}")

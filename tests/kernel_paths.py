"""The kernel paths this machine can execute, as pytest params: the exactness tests run on each.

An AVX-512 machine runs the avx512, avx2 (each W8A8 inner loop its CPU has) and torch paths; an
AVX2 one avx2 and torch; other CPUs torch. A path that cannot run here shows as a skip with why.
"""
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

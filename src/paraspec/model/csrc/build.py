"""Build the CPU kernels next to their Python callers: W8A8 linear (paraspec.model._w8a8, used by
quant.py) and decode/verify attention (paraspec.model._attention, used by transformer.py).

    python src/paraspec/model/csrc/build.py [-q]   # in place, from any directory (~40 s)

A setup.py can reuse `extension()` so that `pip install .` builds it:

    ext_modules=[extension()], cmdclass={"build_ext": BuildExtension}

Nothing is compiled at import time: quant.py and transformer.py fall back to pure-torch paths when
a module is missing or the CPU lacks the instructions it was built for.
"""
from __future__ import annotations

import os
import sys

from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 4))

# -fopenmp: at::parallel_for compiles to `omp parallel`; libgomp.so.1 resolves to the copy torch
# already loaded (same soname), so there is one thread pool. -ffp-contract=off: no FMA in the
# epilogue, which keeps it bit-identical to the torch fallback.
CFLAGS = ["-O3", "-g0", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vnni", "-fopenmp",
          "-ffp-contract=off",
          "-Wno-uninitialized", "-Wno-maybe-uninitialized"]  # GCC 12 false positives in its own intrinsics


def extension() -> CppExtension:
    """The extension, with its source relative to the repository root (setuptools wants that)."""
    return CppExtension("paraspec.model._w8a8", ["src/paraspec/model/csrc/w8a8.cpp"],
                        extra_compile_args=CFLAGS, extra_link_args=["-fopenmp"])


def attention_extension() -> CppExtension:
    """The decode/verify attention kernel (csrc/attention.cpp; AVX-512F)."""
    return CppExtension("paraspec.model._attention", ["src/paraspec/model/csrc/attention.cpp"],
                        extra_compile_args=CFLAGS, extra_link_args=["-fopenmp"])


if __name__ == "__main__":
    from setuptools import setup

    os.chdir(ROOT)  # relative paths in extension() and --inplace resolve from here
    setup(name="paraspec-kernels", ext_modules=[extension(), attention_extension()], package_dir={"": "src"},
          cmdclass={"build_ext": BuildExtension},
          script_args=[*sys.argv[1:], "build_ext", "--inplace", "--build-temp", "build/w8a8"])

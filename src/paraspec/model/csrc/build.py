"""Build the CPU kernels next to their Python callers, one extension module per x86 instruction
set, each holding the decode/verify attention and the W8A8 linear (csrc/kernels.cpp):

    paraspec.model._kernels_avx512   AVX-512F/BW/VL + AVX512-VNNI
    paraspec.model._kernels_avx2     AVX2 + FMA (and an AVX-VNNI W8A8 loop, used where CPUID has it)

    python src/paraspec/model/csrc/build.py [-q]   # in place, from any directory (~40 s, both at once)

Both are built on any x86-64 machine, whatever its own CPU: the sources are compiled with
baseline flags and only their kernels are compiled for the ISA (#pragma GCC target), so either
module can be imported anywhere and says itself whether this CPU runs it (cpu_supported()).
Each module builds on its own: one that fails prints one line and the others stay; the script
exits 0 either way, since the torch paths run without them. On other architectures (ARM64) it
builds nothing. Nothing is compiled at import time.

A setup.py can reuse `extensions()` so that `pip install .` builds them:

    ext_modules=extensions(), cmdclass={"build_ext": BuildExtension}
"""
from __future__ import annotations

import glob
import os
import platform
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 4))
CSRC = "src/paraspec/model/csrc"
ISAS = ("avx512", "avx2")
# what runs when a module is missing (on a CPU that could run it)
INSTEAD = {"avx512": "AVX-512 CPUs run _kernels_avx2 or the torch paths instead",
           "avx2": "AVX2 CPUs run the torch paths instead"}

# -fopenmp: at::parallel_for compiles to `omp parallel`; libgomp.so.1 resolves to the copy torch
# already loaded (same soname), so there is one thread pool. -ffp-contract=off: no FMA in the
# W8A8 epilogue, which keeps it bit-identical to quant.py's torch path. No -m flags: see above.
CFLAGS = ["-O3", "-g0", "-fopenmp", "-ffp-contract=off",
          "-Wno-uninitialized", "-Wno-maybe-uninitialized"]  # GCC 12 false positives in its own intrinsics


def is_x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64")


def extension(isa: str):
    """One ISA's module, with its source relative to the repository root (setuptools wants that)."""
    from torch.utils.cpp_extension import CppExtension
    return CppExtension(f"paraspec.model._kernels_{isa}", [f"{CSRC}/kernels.cpp"],
                        extra_compile_args=[*CFLAGS, f"-DPARASPEC_{isa.upper()}"], extra_link_args=["-fopenmp"],
                        depends=sorted(glob.glob(f"{CSRC}/*.h")))


def extensions() -> list:
    return [extension(isa) for isa in ISAS] if is_x86() else []


def build_one(isa: str, quiet: bool) -> None:
    """setuptools build of one module, in place (run in a child process of main)."""
    from setuptools import setup
    from torch.utils.cpp_extension import BuildExtension
    setup(name=f"paraspec-kernels-{isa}", ext_modules=[extension(isa)], package_dir={"": "src"},
          cmdclass={"build_ext": BuildExtension},
          script_args=[*(["-q"] if quiet else []), "build_ext", "--inplace", "--build-temp", f"build/kernels_{isa}"])


def short_reason(output: str) -> str:
    """The compiler's first error, without its directory, cut short (else the output's last line)."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error:" in ln] or [ln for ln in lines if "rror" in ln]
    line = errors[0] if errors else lines[-1] if lines else "no output"
    line = re.sub(r"^\S*/", "", line)  # /path/to/kernels.cpp:2:2: error: ... -> kernels.cpp:2:2: ...
    return line if len(line) <= 160 else line[:157] + "..."


def main(argv: list[str]) -> int:
    quiet = "-q" in argv
    os.chdir(ROOT)  # relative paths in extension() and --inplace resolve from here
    if not is_x86():
        print(f"paraspec: no CPU kernels for {platform.machine()} (they are x86-64 only); the torch paths run")
        return 0
    for stale in glob.glob("src/paraspec/model/_attention*.so") + glob.glob("src/paraspec/model/_w8a8*.so"):
        os.remove(stale)  # modules of older builds, replaced by _kernels_<isa>

    def run(isa: str) -> tuple[str, subprocess.CompletedProcess]:  # each module in its own process
        cmd = [sys.executable, os.path.abspath(__file__), "--one", isa, *(["-q"] if quiet else [])]
        return isa, subprocess.run(cmd, capture_output=True, text=True)

    with ThreadPoolExecutor(len(ISAS)) as pool:  # both at once: one compile per core
        for isa, res in pool.map(run, ISAS):
            if not quiet:
                sys.stdout.write(res.stdout + res.stderr)
            if res.returncode:
                for old in glob.glob(f"src/paraspec/model/_kernels_{isa}.*"):
                    os.remove(old)  # an older build of other sources must not stand in for it
                print(f"paraspec: _kernels_{isa} not built ({short_reason(res.stderr + res.stdout)}); {INSTEAD[isa]}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--one"]:
        os.chdir(ROOT)
        build_one(sys.argv[2], "-q" in sys.argv)
    else:
        sys.exit(main(sys.argv[1:]))

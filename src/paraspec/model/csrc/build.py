"""Build the CPU kernels, one extension module per x86 instruction set, each holding the
decode/verify attention and the W8A8 and GGUF linears (csrc/kernels.cpp):

    paraspec.model._kernels_avx512   AVX-512F/BW/VL + AVX512-VNNI
    paraspec.model._kernels_avx2     AVX2 + FMA (and an AVX-VNNI W8A8 loop, used where CPUID has it)

    python src/paraspec/model/csrc/build.py [-q]   # in place, from any directory (~40 s, both at once)
    PARASPEC_BUILD_KERNELS=avx2 python ...          # only these ISAs (a comma list; "none": none)

`pip install .` and `pip wheel .` build the same modules the same way: setup.py's build_ext calls
build() with its build directory (and in place for an editable install).

Both are built on any x86-64 machine, whatever its own CPU: the sources are compiled with
baseline flags and only their kernels are compiled for the ISA (#pragma GCC target), so either
module can be imported anywhere and says itself whether this CPU runs it (cpu_supported()).
Each module builds in its own process: one that fails prints one line and the others stay; the
script exits 0 either way, since the torch paths run without them. On other architectures (ARM64)
it builds nothing. Nothing is compiled at import time.

Next to each module a file _kernels_<isa>.torch holds the torch version it was compiled against:
torch's C++ ABI changes between minor releases, so kernels.py imports a module only under the
torch it was built for (a wheel built against one torch, installed beside another, runs the torch
paths and says why).
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import os
import platform
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 4))
CSRC = "src/paraspec/model/csrc"
SOURCE = f"{CSRC}/kernels.cpp"
ISAS = ("avx512", "avx2")
ENV = "PARASPEC_BUILD_KERNELS"
# what runs when a module is missing (on a CPU that could run it)
INSTEAD = {
    "avx512": "AVX-512 CPUs run _kernels_avx2 or the torch paths instead",
    "avx2": "AVX2 CPUs run the torch paths instead",
}

# -fopenmp: at::parallel_for compiles to `omp parallel`; libgomp.so.1 resolves to the copy torch
# already loaded (same soname), so there is one thread pool. -ffp-contract=off: no FMA in the
# W8A8 epilogue, which keeps it bit-identical to quant.py's torch path. No -m flags: see above.
# false positives in the compiler's own intrinsics headers
CFLAGS = [
    "-O3",
    "-g0",
    "-fopenmp",
    "-ffp-contract=off",
    "-Wno-uninitialized",
    "-Wno-maybe-uninitialized",
]


def is_x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64")


def module_name(isa: str) -> str:
    return f"paraspec.model._kernels_{isa}"


def extension(isa: str):
    """One ISA's module, with its source relative to the repository root (setuptools wants that)."""
    from torch.utils.cpp_extension import CppExtension

    return CppExtension(
        module_name(isa),
        [SOURCE],
        extra_compile_args=[*CFLAGS, f"-DPARASPEC_{isa.upper()}"],
        extra_link_args=["-fopenmp"],
        depends=sorted(glob.glob(f"{CSRC}/*.h")),
    )


def extensions() -> list:
    return [extension(isa) for isa in selected()]


def selected() -> list[str]:
    """The ISAs to build: all of them on x86-64 (none elsewhere), or those $PARASPEC_BUILD_KERNELS names."""
    if not is_x86():
        return []
    asked = os.environ.get(ENV, "").strip().lower()
    if not asked or asked == "all":
        return list(ISAS)
    names = [n.strip() for n in asked.split(",") if n.strip() and n.strip() != "none"]
    for n in names:
        if n not in ISAS:
            print(f"paraspec: {ENV} names {n!r}, not an ISA ({', '.join(ISAS)}); skipped")
    return [isa for isa in ISAS if isa in names]


def build_one(isa: str, quiet: bool, build_lib: str | None, build_temp: str) -> None:
    """setuptools build of one module, in place or into build_lib (run in a child process of build)."""
    import torch
    from setuptools import setup
    from torch.utils.cpp_extension import BuildExtension

    # in place: through a build_lib of its own, so setuptools' build/lib (what a wheel packs) gets none of it
    where = (
        ["--build-lib", build_lib]
        if build_lib
        else ["--inplace", "--build-lib", os.path.join(build_temp, "lib")]
    )
    setup(
        name=f"paraspec-kernels-{isa}",
        ext_modules=[extension(isa)],
        package_dir={"": "src"},
        cmdclass={"build_ext": BuildExtension},
        script_args=[*(["-q"] if quiet else []), "build_ext", *where, "--build-temp", build_temp],
    )
    model_dir = os.path.join(build_lib, "paraspec", "model") if build_lib else "src/paraspec/model"
    with open(os.path.join(model_dir, f"_kernels_{isa}.torch"), "w") as f:
        f.write(torch.__version__ + "\n")


def short_reason(output: str) -> str:
    """The compiler's first error, without its directory, cut short (else the output's last line)."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error:" in ln] or [ln for ln in lines if "rror" in ln]
    line = errors[0] if errors else lines[-1] if lines else "no output"
    # /path/to/kernels.cpp:2:2: error: ... -> kernels.cpp:2:2: ...
    line = re.sub(r"^\S*/", "", line)
    return line if len(line) <= 160 else line[:157] + "..."


def build(
    quiet: bool = False, build_lib: str | None = None, build_temp: str = "build"
) -> list[str]:
    """Build the selected modules, each in its own process, all at once; in place (src/paraspec/model)
    or into build_lib. Returns the ISAs built; each one that fails prints one line."""
    os.chdir(ROOT)  # relative paths in extension() and --inplace resolve from here
    if not is_x86():
        print(
            f"paraspec: no CPU kernels for {platform.machine()} (they are x86-64 only); the torch paths run"
        )
        return []
    isas = selected()
    dest = os.path.join(build_lib, "paraspec", "model") if build_lib else "src/paraspec/model"
    if build_lib:  # a build directory's earlier modules must not go into this wheel unbuilt
        for old in glob.glob(f"{dest}/_kernels_*"):
            os.remove(old)
    if not isas:
        print(
            f"paraspec: no CPU kernels built ({ENV}={os.environ.get(ENV, '')}); the torch paths run"
        )
        return []
    if importlib.util.find_spec("torch") is None:
        print(
            "paraspec: CPU kernels not built (torch is not importable at build time); the torch paths run"
        )
        return []
    if not build_lib:
        for stale in glob.glob(f"{dest}/_attention*.so") + glob.glob(f"{dest}/_w8a8*.so"):
            os.remove(stale)  # modules of older builds, replaced by _kernels_<isa>

    def run(isa: str) -> tuple[str, float, subprocess.CompletedProcess]:
        cmd = [
            sys.executable,
            os.path.abspath(__file__),
            "--one",
            isa,
            "--build-temp",
            os.path.join(build_temp, f"kernels_{isa}"),
            *(["--build-lib", build_lib] if build_lib else []),
            *(["-q"] if quiet else []),
        ]
        t0 = time.perf_counter()
        res = subprocess.run(cmd, capture_output=True, text=True)
        return isa, time.perf_counter() - t0, res

    built = []
    with ThreadPoolExecutor(min(len(isas), os.cpu_count() or 1)) as pool:  # one compile per core
        for isa, seconds, res in pool.map(run, isas):
            if not quiet:
                sys.stdout.write(res.stdout + res.stderr)
            if res.returncode:
                for old in glob.glob(f"{dest}/_kernels_{isa}.*"):
                    os.remove(old)  # an older build of other sources must not stand in for it
                print(
                    f"paraspec: _kernels_{isa} not built ({short_reason(res.stderr + res.stdout)}); {INSTEAD[isa]}"
                )
            else:
                built.append(isa)
                if not quiet:
                    print(f"paraspec: built _kernels_{isa} ({seconds:.0f} s)")
    sys.stdout.flush()
    return built


def main(argv: list[str]) -> int:
    build(quiet="-q" in argv)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--one"]:
        p = argparse.ArgumentParser()
        p.add_argument("--one", choices=ISAS)
        p.add_argument("--build-lib")
        p.add_argument("--build-temp", default="build")
        p.add_argument("-q", action="store_true")
        a = p.parse_args()
        os.chdir(ROOT)
        build_one(a.one, a.q, a.build_lib, a.build_temp)
    else:
        sys.exit(main(sys.argv[1:]))

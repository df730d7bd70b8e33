"""The CPU kernels as extension modules of `pip install .` / `pip wheel .` (the rest is pyproject.toml).

One module per x86 ISA (src/paraspec/model/csrc/build.py), compiled against the torch of the
build environment, each in its own process, all at once. A module that cannot compile prints one
line and the install goes on: the torch paths run without it. On other architectures nothing is
compiled. PARASPEC_BUILD_KERNELS=avx2 (a comma list, or "none") builds fewer.
"""
import importlib.util
import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

_spec = importlib.util.spec_from_file_location(
    "paraspec_kernels_build", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                           "src", "paraspec", "model", "csrc", "build.py"))
kernels_build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kernels_build)


class BuildKernels(build_ext):
    """build.py builds each module with torch's BuildExtension in a child process (a failure there
    cannot stop this one); setuptools then copies them into the source tree for an editable
    install, and skips the ones that failed (they are optional)."""

    def build_extensions(self) -> None:
        kernels_build.build(quiet=not self.verbose, build_lib=os.path.abspath(self.build_lib),
                            build_temp=os.path.abspath(self.build_temp))

    def copy_extensions_to_source(self) -> None:
        super().copy_extensions_to_source()   # the modules built; then the torch version each was built for
        build_py = self.get_finalized_command("build_py")
        for ext in self.extensions:
            inplace_file, regular_file = self._get_inplace_equivalent(build_py, ext)
            stamp = lambda path: os.path.join(os.path.dirname(path), ext.name.rsplit(".", 1)[-1] + ".torch")
            if os.path.exists(regular_file) and os.path.exists(stamp(regular_file)):
                self.copy_file(stamp(regular_file), stamp(inplace_file), level=self.verbose)


# Placeholders naming the modules (the real Extension objects are made by build.py, where torch is
# imported): they make the wheel platform-specific and tell setuptools what to copy in place.
ext_modules = [Extension(kernels_build.module_name(isa), [kernels_build.SOURCE], optional=True)
               for isa in kernels_build.selected()]

setup(ext_modules=ext_modules, cmdclass={"build_ext": BuildKernels})

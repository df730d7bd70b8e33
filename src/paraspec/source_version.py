"""The git commit this checkout of paraspec runs from, for what its outputs record (bench results,
trained adapters): HEAD, "+dirty" when the tree has changes; None outside a checkout (a wheel)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def git_commit(pathspec: str | None = None, untracked: bool = False) -> str | None:
    """pathspec: only changes under it (relative to the checkout) make it dirty; untracked: new
    files count as changes too."""
    here = Path(__file__).resolve()
    root = next((p for p in here.parents if (p / ".git").exists()), None)
    if root is None:
        return None
    try:

        def git(*a: str) -> str:
            return subprocess.run(
                ["git", "-C", str(root), *a], capture_output=True, text=True, timeout=10
            ).stdout.strip()

        head = git("rev-parse", "HEAD")
        status = ["status", "--porcelain", f"--untracked-files={'normal' if untracked else 'no'}"]
        dirty = git(*status, *(["--", pathspec] if pathspec else []))
        return head + ("+dirty" if dirty else "") if head else None
    except (OSError, subprocess.SubprocessError):
        return None

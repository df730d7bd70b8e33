"""Loading: GGUF and HF folders give the same model; bad files give one-line errors."""

import json
import shutil

import pytest
import torch

from paraspec.errors import ModelLoadError
from paraspec.model.loader import load_model
from paraspec.model.tokenizer import Tokenizer
from paraspec.model.transformer import SeqInput, Transformer
from tiny_models import write_gguf


def _logits(path, ids):
    lm = load_model(path, torch.float32)
    m = Transformer(lm.args, lm.weights, torch.float32)
    return m.forward(ids, torch.arange(len(ids)), [SeqInput(m.new_cache(64), len(ids))])


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_gguf_equals_hf_folder(tiny_model_dir, tmp_path, arch):
    hf = tiny_model_dir(arch)
    gg = write_gguf(hf, tmp_path / "m.gguf")
    ids = torch.randint(0, 259, (20,))
    assert torch.allclose(_logits(gg, ids), _logits(hf, ids), atol=1e-5)
    t_gguf = Tokenizer.from_source(load_model(gg, torch.float32).tokenizer_source)
    t_hf = Tokenizer.from_source(load_model(hf, torch.float32).tokenizer_source)
    text = "héllo wörld <|im_start|>user\n12 + 3"
    assert t_gguf.encode(text) == t_hf.encode(text)
    assert t_gguf.eos_token_ids == t_hf.eos_token_ids
    msgs = [{"role": "user", "content": "hi"}]
    assert t_gguf.encode_chat(msgs) == t_hf.encode_chat(msgs)


def test_q8_0_gguf_loads_close_to_fp32(tiny_model_dir, tmp_path):
    hf = tiny_model_dir("llama")
    ids = torch.randint(0, 259, (16,))
    q8 = _logits(write_gguf(hf, tmp_path / "q8.gguf", "Q8_0"), ids)
    assert (q8 - _logits(hf, ids)).abs().max() < 0.1


def _one_line_error(path, match):
    with pytest.raises(ModelLoadError, match=match) as e:
        load_model(path, torch.float32)
    assert "\n" not in str(e.value)


def test_missing_path(tmp_path):
    _one_line_error(tmp_path / "nope.gguf", "does not exist")


def test_corrupt_gguf(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 64)
    _one_line_error(bad, "cannot read")


def test_truncated_gguf(tiny_model_dir, tmp_path):
    gg = write_gguf(tiny_model_dir("llama"), tmp_path / "m.gguf")
    data = gg.read_bytes()
    gg.write_bytes(data[: len(data) // 2])
    _one_line_error(gg, "is cut short")


def test_unsupported_architecture_gguf(tiny_model_dir, tmp_path):
    gg = write_gguf(tiny_model_dir("llama"), tmp_path / "m.gguf", arch_name="falcon")
    _one_line_error(gg, "unsupported architecture 'falcon'")


def test_unsupported_architecture_hf(tiny_model_dir, tmp_path):
    d = tmp_path / "m"
    shutil.copytree(tiny_model_dir("llama"), d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["model_type"] = "gpt2"
    (d / "config.json").write_text(json.dumps(cfg))
    _one_line_error(d, "unsupported architecture 'gpt2'")


def test_unsupported_quantisation_type(tiny_model_dir, tmp_path):
    gg = write_gguf(tiny_model_dir("llama"), tmp_path / "m.gguf", "I8")
    _one_line_error(gg, "quantisation type I8")


def test_folder_without_weights(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    _one_line_error(tmp_path, "safetensors")


def test_corrupt_config_json(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    _one_line_error(tmp_path, "config.json")


def test_corrupt_safetensors(tiny_model_dir, tmp_path):
    d = tmp_path / "m"
    shutil.copytree(tiny_model_dir("llama"), d)
    f = next(d.glob("*.safetensors"))
    f.write_bytes(f.read_bytes()[:100])
    _one_line_error(d, "corrupt")

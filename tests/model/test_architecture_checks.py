"""What paraspec's forward cannot compute is refused at load, in one line, for generation (LLM(path),
`paraspec generate --model`), not run as another network: HF config keys (sliding windows, partial
RoPE, other RoPE types, activations, experts, soft-capping, mlp_bias), GGUF fields (RoPE scaling other
than none/linear, experts, sliding windows, soft-capping) and tensors the loader does not read.
What it can compute still loads: Qwen2-style configs that carry sliding_window with
use_sliding_window false, and GGUF linear RoPE scaling, which now applies (logits == the HF folder
with rope_type linear)."""

import json
import re
import shutil

import numpy as np
import pytest
import torch

from paraspec import LLM
from paraspec.cli import main
from paraspec.errors import ModelLoadError
from paraspec.model.gguf_file import read_gguf
from paraspec.model.loader import load_model
from paraspec.model.transformer import SeqInput, Transformer
from tiny_models import write_gguf


def _edited(src, out, **config):
    """A copy of the HF folder src whose config.json has `config` (None: the key removed)."""
    out = shutil.copytree(src, out)
    cfg = json.loads((out / "config.json").read_text())
    for k, v in config.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (out / "config.json").write_text(json.dumps(cfg))
    return out


def _with_tensor(src, out, name: str):
    """A copy of the HF folder src whose weights also hold tensor `name`."""
    from safetensors.torch import load_file, save_file

    out = shutil.copytree(src, out)
    sd = load_file(str(out / "model.safetensors"))
    save_file(
        {**sd, name: torch.zeros(4)}, str(out / "model.safetensors"), metadata={"format": "pt"}
    )
    return out


def _gguf_with(src, out, fields: dict | None = None, tensors: dict | None = None):
    """A copy of the F32 GGUF src with extra (or replaced) metadata `fields` (str / float / int values)
    and extra F32 `tensors`."""
    import gguf

    reader = read_gguf(src)
    fields = dict(fields or {})
    w = gguf.GGUFWriter(str(out), reader.fields["general.architecture"])
    for key, value in reader.fields.items():
        if key not in ("general.architecture", *fields):
            w.add_key_value(key, value, *reader.types[key])
    for key, value in fields.items():
        {str: w.add_string, float: w.add_float32, int: w.add_uint32}[type(value)](key, value)
    for t in reader.tensors.values():
        w.add_tensor(t.name, np.array(t.data, dtype=np.float32))
    for name, a in (tensors or {}).items():
        w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def _one_line(path, match: str) -> None:
    """LLM(path) and `paraspec generate --model path` both refuse in one line naming `match`."""
    with pytest.raises(ModelLoadError, match=re.escape(match)) as e:
        LLM(str(path), dtype="float32")
    msg = str(e.value)
    assert "\n" not in msg and "cannot represent" in msg and "use a model without it" in msg, msg


def _cli_one_line(path, match: str, capsys) -> None:
    capsys.readouterr()
    assert main(["generate", "hi", "--model", str(path), "--max-new-tokens", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and match in err, err


HF_REFUSED = {  # arch, config.json edits -> what the error names
    "gelu": ("llama", dict(hidden_act="gelu"), "hidden_act 'gelu'"),
    "partial-rope": ("llama", dict(partial_rotary_factor=0.5), "partial_rotary_factor 0.5"),
    "partial-rope-in-rope-parameters": (
        "llama",
        dict(
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 10000.0,
                "partial_rotary_factor": 0.25,
            }
        ),
        "partial_rotary_factor 0.25",
    ),
    "yarn": (
        "qwen2",
        dict(rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256}),
        "rope type 'yarn'",
    ),
    "dynamic": (
        "llama",
        dict(rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}),
        "rope type 'dynamic'",
    ),
    "layer-types": (
        "qwen2",
        dict(
            layer_types=["full_attention", "sliding_attention"],
            use_sliding_window=True,
            sliding_window=16,
        ),
        "sliding-window attention on 1 of 2 layers (layer_types)",
    ),
    "use-sliding-window": (
        "qwen3",
        dict(layer_types=None, use_sliding_window=True, sliding_window=16, max_window_layers=0),
        "sliding-window attention on 2 of 2 layers",
    ),
    "experts": ("qwen2", dict(num_experts=4), "num_experts = 4 (a mixture of experts)"),
    "local-experts": ("llama", dict(num_local_experts=8), "num_local_experts = 8"),
    "softcap": ("llama", dict(final_logit_softcapping=30.0), "final_logit_softcapping = 30.0"),
    "mlp-bias": ("llama", dict(mlp_bias=True), "mlp_bias"),
}


@pytest.mark.parametrize("case", list(HF_REFUSED))
def test_hf_config_paraspec_cannot_run_is_refused_in_one_line(tiny_model_dir, tmp_path, case):
    arch, edits, match = HF_REFUSED[case]
    path = _edited(tiny_model_dir(arch), tmp_path / "m", **edits)
    _one_line(path, match)


@pytest.mark.parametrize(
    "name",
    [
        "model.layers.1.self_attn.sinks",
        "model.layers.2.mlp.up_proj.weight",
        "model.mtp.norm.weight",
    ],
)
def test_hf_tensor_the_loader_does_not_read_is_refused(tiny_model_dir, tmp_path, name):
    path = _with_tensor(tiny_model_dir(), tmp_path / "m", name)
    _one_line(path, f"tensor '{name}' that paraspec's loader does not read")


def test_generate_command_refuses_in_one_line(tiny_model_dir, tmp_path, capsys):
    path = _edited(tiny_model_dir("qwen2"), tmp_path / "m", layer_types=["sliding_attention"] * 2)
    _cli_one_line(path, "sliding-window attention", capsys)


@pytest.mark.parametrize(
    "edits",
    [
        dict(
            use_sliding_window=False, sliding_window=4096, max_window_layers=28, layer_types=None
        ),  # Qwen2.5's
        dict(use_sliding_window=False, sliding_window=32768, max_window_layers=1, layer_types=None),
        dict(
            use_sliding_window=True, sliding_window=16, max_window_layers=2, layer_types=None
        ),  # no layer slides
        dict(
            use_sliding_window=False, sliding_window=None, layer_types=["full_attention"] * 2
        ),  # transformers 5's
        dict(
            rope_scaling=None,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            partial_rotary_factor=None,
        ),
    ],
    ids=["qwen2.5", "window-unused", "max-window-layers", "layer-types-full", "rope-default"],
)
def test_qwen2_configs_with_unused_windows_still_load(tiny_model_dir, tmp_path, edits):
    hf = tiny_model_dir("qwen2")
    path = _edited(hf, tmp_path / "m", **edits)
    ids = torch.randint(0, 259, (12,))
    assert torch.equal(_logits(path, ids), _logits(hf, ids))


GGUF_REFUSED = {  # the tiny model's arch, extra fields / tensors -> what the error names
    "yarn": (
        "qwen2",
        {"qwen2.rope.scaling.type": "yarn", "qwen2.rope.scaling.factor": 4.0},
        None,
        "qwen2.rope.scaling.type 'yarn'",
    ),
    "longrope": (
        "llama",
        {"llama.rope.scaling.type": "longrope"},
        None,
        "llama.rope.scaling.type 'longrope'",
    ),
    "experts": (
        "qwen2",
        {"qwen2.expert_count": 4, "qwen2.expert_used_count": 2},
        None,
        "qwen2.expert_count = 4",
    ),
    "sliding-window": (
        "llama",
        {"llama.attention.sliding_window": 16},
        None,
        "llama.attention.sliding_window = 16",
    ),
    "softcap": (
        "llama",
        {"llama.final_logit_softcapping": 30.0},
        None,
        "llama.final_logit_softcapping = 30.0",
    ),
    "unread-tensor": (
        "llama",
        None,
        {"blk.0.attn_sinks.weight": np.zeros(4, np.float32)},
        "tensor 'blk.0.attn_sinks.weight' that paraspec's loader does not read",
    ),
    "extra-layer": (
        "qwen2",
        None,
        {"blk.2.attn_norm.weight": np.ones(64, np.float32)},
        "tensor 'blk.2.attn_norm.weight' that paraspec's loader does not read",
    ),
    "ffn-bias": (
        "llama",
        None,
        {"blk.0.ffn_up.bias": np.zeros(128, np.float32)},
        "feed-forward biases",
    ),
}


@pytest.mark.parametrize("case", list(GGUF_REFUSED))
def test_gguf_fields_paraspec_cannot_run_are_refused_in_one_line(tiny_model_dir, tmp_path, case):
    arch, fields, tensors, match = GGUF_REFUSED[case]
    path = _gguf_with(
        write_gguf(tiny_model_dir(arch), tmp_path / "src.gguf"),
        tmp_path / "m.gguf",
        fields,
        tensors,
    )
    _one_line(path, match)


def test_gguf_refusal_through_the_generate_command(tiny_model_dir, tmp_path, capsys):
    src = write_gguf(tiny_model_dir("llama"), tmp_path / "src.gguf")
    path = _gguf_with(src, tmp_path / "m.gguf", {"llama.rope.scaling.type": "yarn"})
    _cli_one_line(path, "llama.rope.scaling.type 'yarn'", capsys)


def _logits(path, ids):
    lm = load_model(path, torch.float32)
    m = Transformer(lm.args, lm.weights, torch.float32)
    return m.forward(ids, torch.arange(len(ids)), [SeqInput(m.new_cache(64), len(ids))])


@pytest.mark.parametrize(
    "fields",
    [
        {"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": 4.0},
        {"llama.rope.scaling.factor": 4.0},  # no type: llama.cpp's default, linear
        {"llama.rope.scale_linear": 4.0},  # the older key
    ],
    ids=["linear", "factor-only", "scale-linear"],
)
def test_gguf_linear_rope_scaling_runs_as_the_hf_model(tiny_model_dir, tmp_path, fields):
    hf = tiny_model_dir(
        "llama", rope_parameters={"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0}
    )
    plain = write_gguf(hf, tmp_path / "plain.gguf")  # write_gguf writes no scaling keys
    scaled = _gguf_with(plain, tmp_path / "scaled.gguf", fields)
    ids = torch.randint(0, 259, (40,))
    want = _logits(hf, ids)
    assert torch.allclose(_logits(scaled, ids), want, atol=1e-5)
    assert not torch.allclose(_logits(plain, ids), want, atol=1e-3)  # the scaling matters here


def test_gguf_scaling_type_none_or_factor_one_is_no_scaling(tiny_model_dir, tmp_path):
    hf = tiny_model_dir("llama")
    plain = write_gguf(hf, tmp_path / "plain.gguf")
    ids = torch.randint(0, 259, (40,))
    for i, fields in enumerate(
        [
            {"llama.rope.scaling.type": "none", "llama.rope.scaling.factor": 4.0},
            {"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": 1.0},
        ]
    ):
        path = _gguf_with(plain, tmp_path / f"{i}.gguf", fields)
        assert load_model(path, torch.float32).args.rope_scaling is None
        assert torch.equal(_logits(path, ids), _logits(plain, ids))

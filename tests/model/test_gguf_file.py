"""gguf_file.read_gguf reads what the gguf package's GGUFReader reads (every value type, string
arrays with multi-byte text, plain and block tensors, custom alignment) without its
per-string numpy views, and a LoadedModel keeps the file's metadata and tensor names, so that
check_trainable needs no second read of the file."""

import shutil
import struct

import numpy as np
import pytest
import torch

from paraspec.aspd.trainable import check_trainable
from paraspec.model.ggml_kquants import QUANTIZERS
from paraspec.model.gguf_file import read_gguf
from paraspec.model.loader import load_model
from tiny_models import write_gguf


def _reference(path):
    import gguf

    r = gguf.GGUFReader(str(path))
    fields = {k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.")}
    return fields, r.tensors


def _reference_types(path):
    import gguf

    r = gguf.GGUFReader(str(path))
    return {
        k: (f.types[0], f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None)
        for k, f in r.fields.items()
        if not k.startswith("GGUF.")
    }


def _write_every_kind(path, alignment: int | None = None):
    import gguf

    T = gguf.GGUFValueType
    w = gguf.GGUFWriter(str(path), "llama")
    if alignment is not None:
        w.add_custom_alignment(alignment)
    w.add_string("s.text", "héllo 日本語 🦙")
    w.add_string("s.empty", "")
    for kind, value in (
        (T.UINT8, 250),
        (T.INT8, -7),
        (T.UINT16, 65000),
        (T.INT16, -30000),
        (T.UINT32, 2**31 + 5),
        (T.INT32, -(2**31)),
        (T.UINT64, 2**63 + 1),
        (T.INT64, -(2**62)),
        (T.FLOAT32, 0.1),
        (T.FLOAT64, 0.1),
        (T.BOOL, True),
    ):
        w.add_key_value(f"scalar.{kind.name}", value, kind)
    rng = np.random.default_rng(0)
    tokens = ["", " ", "Ġthe", "日本", "🦙x", "\n\t", "a" * 300] + [f"tok{i}" for i in range(2000)]
    w.add_array("a.tokens", tokens)
    w.add_array("a.empty", [])
    w.add_key_value("a.int32", rng.integers(-5, 5, 1000).tolist(), T.ARRAY, sub_type=T.INT32)
    w.add_key_value(
        "a.float32",
        rng.standard_normal(50).astype(np.float32).tolist(),
        T.ARRAY,
        sub_type=T.FLOAT32,
    )
    w.add_key_value("a.bool", [True, False, True], T.ARRAY, sub_type=T.BOOL)
    w.add_key_value("a.uint64", [1, 2**64 - 1], T.ARRAY, sub_type=T.UINT64)
    a = rng.standard_normal((8, 64)).astype(np.float32)
    w.add_tensor("f32", a)
    w.add_tensor("f16", a.astype(np.float16))
    w.add_tensor("one_d", a[0])
    w.add_tensor("three_d", rng.standard_normal((2, 3, 32)).astype(np.float32))
    w.add_tensor(
        "q8_0",
        gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0),
        raw_dtype=gguf.GGMLQuantizationType.Q8_0,
    )
    w.add_tensor(
        "q4_1",
        gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q4_1),
        raw_dtype=gguf.GGMLQuantizationType.Q4_1,
    )
    w.add_tensor(
        "q4_k",
        QUANTIZERS["Q4_K"](rng.standard_normal((2, 256)).astype(np.float32)),
        raw_dtype=gguf.GGMLQuantizationType.Q4_K,
    )
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _assert_same(path):
    fields, tensors = _reference(path)
    got = read_gguf(path)
    assert list(got.fields) == list(fields)
    for key, want in fields.items():
        assert got.fields[key] == want and type(got.fields[key]) is type(want), key
        if isinstance(want, list) and want:
            assert [type(v) for v in got.fields[key]] == [type(v) for v in want], key
    # what GGUFWriter.add_key_value needs to copy a field
    assert got.types == _reference_types(path)
    assert list(got.tensors) == [t.name for t in tensors]
    for t in tensors:
        mine = got.tensors[t.name]
        assert mine.tensor_type == t.tensor_type and mine.shape == tuple(int(d) for d in t.shape)
        assert mine.data.dtype == t.data.dtype and mine.data.shape == t.data.shape, t.name
        assert np.array_equal(mine.data, t.data), t.name
        assert not mine.data.flags.writeable  # views of the read-only mapping


@pytest.mark.parametrize("alignment", [None, 64])
def test_every_value_and_tensor_kind_reads_as_gguf_reader_reads_it(tmp_path, alignment):
    _assert_same(_write_every_kind(tmp_path / "m.gguf", alignment))


@pytest.mark.parametrize("quant", ["F32", "F16", "Q8_0"])
def test_a_tiny_model_file_reads_as_gguf_reader_reads_it(tiny_model_dir, tmp_path, quant):
    _assert_same(write_gguf(tiny_model_dir("qwen2"), tmp_path / "m.gguf", quant))


def test_bad_files_raise(tmp_path):
    good = _write_every_kind(tmp_path / "m.gguf").read_bytes()
    for i, data in enumerate(
        [b"", b"GGUF", b"XXXX" + good[4:], good[:200], good[:4] + b"\x07" + good[5:]]
    ):
        (tmp_path / f"{i}.gguf").write_bytes(data)
        with pytest.raises((ValueError, KeyError, struct.error)):
            read_gguf(tmp_path / f"{i}.gguf")


def test_loaded_model_keeps_metadata_and_tensor_names_so_check_trainable_reads_no_file(
    tiny_model_dir, tmp_path
):
    path = write_gguf(tiny_model_dir("qwen2"), tmp_path / "m.gguf")
    fields, tensors = _reference(path)
    loaded = load_model(path, torch.float32)
    assert loaded.metadata == fields and loaded.tensor_names == tuple(t.name for t in tensors)
    assert loaded.tokenizer_source["tokens"] is loaded.metadata["tokenizer.ggml.tokens"]
    path.unlink()  # the checks run on what the LoadedModel kept
    check_trainable(loaded)

    hf = shutil.copytree(tiny_model_dir("qwen3"), tmp_path / "hf")
    loaded = load_model(hf, torch.float32)
    assert loaded.metadata["model_type"] == "qwen3" and "model.norm.weight" in loaded.tensor_names
    shutil.rmtree(hf)
    check_trainable(loaded)

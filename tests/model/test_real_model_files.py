"""Bad model files made from the real 0.5B GGUF: a copy cut short and a copy of its metadata under
an architecture paraspec does not run. Each is one line naming the file and the fix, from LLM(...)
and from `paraspec generate` (exit 2, no traceback)."""

import gguf
import numpy as np
import pytest

from paraspec import LLM
from paraspec.cli import main
from paraspec.errors import ModelLoadError
from paraspec.model.gguf_file import read_gguf
from real_model import REAL, real_model_path

CUT = 10_000_000  # bytes kept: the header and vocabulary whole, the first tensors not


def _refused(path, needles: list[str], capsys) -> None:
    with pytest.raises(ModelLoadError) as e:
        LLM(str(path))
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg and all(n in msg for n in needles), msg
    capsys.readouterr()
    assert main(["generate", "hi", "--model", str(path), "--max-new-tokens", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and all(n in err for n in needles), err


def _cut_copy(out, src=None):
    with open(src or real_model_path(), "rb") as f:
        out.write_bytes(f.read(CUT))
    return out


def test_a_truncated_copy_is_one_line_saying_it_is_cut_short(tmp_path, capsys):
    path = _cut_copy(tmp_path / "model.gguf")
    _refused(
        path,
        [
            "is cut short",
            f"it has {CUT:,} bytes",
            "tensor 'output.weight' ends at byte",
            "download or copy the whole file again",
        ],
        capsys,
    )


def test_a_truncated_fetched_model_names_the_fetch_command(tmp_path, monkeypatch, capsys):
    """The cut file under the cache's own name: the fix is fetching it again (fetch re-checks its
    size and sha256 and replaces it)."""
    from paraspec import catalog

    src = real_model_path()
    monkeypatch.setenv("PARASPEC_CACHE", str(tmp_path))
    cached = catalog.ARTIFACTS[REAL].path
    cached.parent.mkdir(parents=True)
    _cut_copy(cached, src)
    _refused(cached, ["is cut short", f"paraspec fetch {REAL}` to fetch it again"], capsys)
    with pytest.raises(ModelLoadError, match="is cut short"):
        LLM(REAL)


def test_an_architecture_paraspec_does_not_run_is_one_line(tmp_path, capsys):
    """The real file's metadata (its vocabulary, chat template, shapes) under general.architecture
    'gemma3', its qwen2.* keys renamed as such a file names them, and one of its tensors."""
    src = read_gguf(real_model_path())
    path = tmp_path / "gemma.gguf"
    w = gguf.GGUFWriter(str(path), "gemma3")
    for key, value in src.fields.items():
        if key != "general.architecture" and not key.startswith("GGUF."):
            w.add_key_value(key.replace("qwen2.", "gemma3.", 1), value, *src.types[key])
    w.add_tensor("output_norm.weight", np.array(src.tensors["output_norm.weight"].data))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    _refused(
        path,
        [
            "unsupported architecture 'gemma3'",
            "paraspec runs llama, qwen2, qwen3 models",
            "use a model of one of those",
        ],
        capsys,
    )

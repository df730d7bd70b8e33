"""`paraspec generate` in-process: prompt sources, JSON output, and memory kept in --trie-file."""

from __future__ import annotations

import argparse
import json

import pytest

from paraspec import generate
from paraspec.decoding.memory.memory_file import read_memory_file
from paraspec.errors import ParaspecError


def gen_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    generate.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["generate", *argv])


def test_the_prompt_comes_from_the_argument_or_a_file_not_both(tmp_path, tiny_model_dir, capsys):
    model = str(tiny_model_dir("llama"))
    with pytest.raises(ParaspecError, match="exactly one"):
        generate.generate_main(gen_args("--model", model, "--prompt-file", "x", "hi"))
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("hello world")
    assert (
        generate.generate_main(
            gen_args(
                "--model",
                model,
                "--prompt-file",
                str(prompt),
                "--json",
                "--max-new-tokens",
                "4",
                "--dtype",
                "float32",
            )
        )
        == 0
    )
    from_file = json.loads(capsys.readouterr().out)
    generate.generate_main(
        gen_args(
            "--model", model, "--json", "--max-new-tokens", "4", "--dtype", "float32", "hello world"
        )
    )
    assert json.loads(capsys.readouterr().out)["token_ids"] == from_file["token_ids"]


def test_fp16_kv_cache_from_the_flag_and_a_clear_error_otherwise(tiny_model_dir, capsys):
    from paraspec import LLM
    from paraspec.errors import ConfigError

    model = str(tiny_model_dir("llama"))
    assert (
        generate.generate_main(
            gen_args(
                "--model",
                model,
                "--json",
                "--max-new-tokens",
                "4",
                "--dtype",
                "float32",
                "--kv-cache-dtype",
                "fp16",
                "hello world",
            )
        )
        == 0
    )
    assert len(json.loads(capsys.readouterr().out)["token_ids"]) == 4
    with pytest.raises(ConfigError, match="kv_cache_dtype='bf16' is not supported; use 'fp32'"):
        LLM(model, dtype="float32", kv_cache_dtype="bf16")


@pytest.mark.parametrize("plugin", ["memory_decoding", "hybrid"])
def test_trie_file_is_saved_after_and_loaded_before(tmp_path, tiny_model_dir, capsys, plugin):
    trie = tmp_path / "memory.trie"
    argv = (
        "--model",
        str(tiny_model_dir("llama")),
        "--dtype",
        "float32",
        "--plugin",
        plugin,
        "--trie-file",
        str(trie),
        "--max-new-tokens",
        "8",
        "--json",
        "abc abc abc",
    )
    assert generate.generate_main(gen_args(*argv)) == 0 and trie.stat().st_size > 0
    first = json.loads(capsys.readouterr().out)
    assert generate.generate_main(gen_args(*argv)) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["token_ids"] == first["token_ids"]  # lossless, memory or not
    # the answer was in memory: fewer forward passes the second time
    assert second["stats"]["decode_steps"] < first["stats"]["decode_steps"]
    # one memory file: the trie, and for the hybrid its past outputs (the answer and a separator)
    outputs = read_memory_file(trie).outputs
    assert (
        len(outputs) == (len(first["token_ids"]) + 1) * 2
        if plugin == "hybrid"
        else not len(outputs)
    )


def test_without_memory_no_trie_file_is_written(tmp_path, tiny_model_dir, capsys):
    trie = tmp_path / "memory.trie"
    assert (
        generate.generate_main(
            gen_args(
                "--model",
                str(tiny_model_dir("llama")),
                "--dtype",
                "float32",
                "--trie-file",
                str(trie),
                "--max-new-tokens",
                "2",
                "hi",
            )
        )
        == 0
    )
    assert not trie.exists()
    out = capsys.readouterr()
    assert out.out.endswith("\n") and "tokens/step]" in out.err

"""CLI: user errors are one line on stderr with exit code 2 (no traceback)."""

import subprocess
import sys

import pytest


def _cli(*args, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "paraspec.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize(
    "args,needle",
    [
        (["generate", "--model", "/no/such/model.gguf", "hi"], "does not exist"),
        (["generate", "--temperature", "-1", "hi"], "temperature"),
        (["generate", "--top-p", "0", "hi"], "top_p"),
        (["generate"], "PROMPT"),
        (["generate", "--prompt-file", "/no/such/file", "hi"], "exactly one"),
        (["generate", "--prompt-file", "/no/such/file"], "cannot read"),
        (["generate", "--plugin-params", "{bad json", "hi"], "plugin_params is not valid JSON"),
        (["generate", "--plugin-params", '{"plugin_type": "magic"}', "hi"], "plugin_type"),
        (["generate", "--decoding-length", "4", "hi"], "--plugin"),
        (["generate", "--quantization", "int3", "hi"], "quantization"),
        (["generate", "--threads", "-1", "hi"], "num_threads=-1 is invalid"),
    ],
)
def test_user_errors_exit_2_with_one_line(args, needle, capsys):
    # in this process (cli.main, as `python -m paraspec.cli` runs it: an exception other than a
    # user error would fail the test as it would print a traceback); the next test runs the
    # command itself
    from paraspec import cli

    try:
        code = cli.main(list(args))
    except SystemExit as e:  # argparse's own errors
        code = e.code
    err = capsys.readouterr().err
    assert code == 2
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) <= 2 and needle in err, err  # argparse adds a usage line


def test_a_user_error_from_the_command_itself_is_one_line_and_exit_2():
    run = _cli("generate", "--model", "/no/such/model.gguf", "hi")
    assert run.returncode == 2 and "does not exist" in run.stderr, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "Traceback" not in run.stderr


@pytest.mark.parametrize("plugin", [[], ["--plugin", "memory_decoding"]])
def test_a_bad_pinned_cost_curve_is_one_line_with_or_without_a_drafter(tiny_model_dir, plugin):
    """PARASPEC_FORWARD_COST is read when the engine starts, drafter or not (a request picking its
    own plugin later must not be the first to meet the bad value)."""
    import os

    env = {**os.environ, "PARASPEC_FORWARD_COST": "[1]"}
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "paraspec.cli",
            "generate",
            "--model",
            str(tiny_model_dir("llama")),
            *plugin,
            "--max-new-tokens",
            "2",
            "hi",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert (
        run.returncode == 2
        and "PARASPEC_FORWARD_COST" in run.stderr
        and "Traceback" not in run.stderr
    ), run.stderr


def test_tiny_model_generation_json(tiny_model_dir):
    import json

    run = _cli(
        "generate",
        "--model",
        str(tiny_model_dir("llama")),
        "--json",
        "--max-new-tokens",
        "5",
        "hello",
    )
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert len(out["token_ids"]) == out["stats"]["generated_tokens"] <= 5


def test_help_lists_every_sub_command_without_loading_torch():
    code = (
        "import sys; from paraspec.cli import build_parser; build_parser().format_help(); "
        "print('torch' in sys.modules, 'fastapi' in sys.modules)"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.split() == ["False", "False"], run.stderr
    help_text = _cli("--help").stdout
    assert "{generate,serve,bench,info,aspd,fetch,draft-head}" in help_text

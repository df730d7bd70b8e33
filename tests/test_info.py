"""paraspec info: the CPU's features, the kernel of each op, the default numerics, t(k)/t(1)."""

import json

from paraspec import cli
from paraspec.model import kernels


def test_json_report_names_features_kernels_and_default_numerics(capsys):
    assert cli.main(["info", "--no-cost", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["kernels"] == kernels.default().label
    assert set(r["features"]) <= set(kernels.SHOWN)
    assert {
        "decode/verify attention",
        "decode/verify linear",
        "w8a8 linear",
        "gguf linear",
        "prompt linear",
        "gguf prompt linear",
    } <= set(r["ops"])
    if kernels.default().module is not None:
        assert r["gguf_numerics"]["quantization"] == "gguf"
        from paraspec.model import ggml

        tall = ggml.prompt_rows(kernels.default(), 1)  # one pass: the GGUF default here
        assert ("any height" if tall >= ggml.NEVER else f"under {tall} rows") in r["ops"][
            "gguf prompt linear"
        ]
    n = kernels.default_numerics()
    assert (r["default_numerics"]["dtype"], r["default_numerics"]["quantization"]) == (
        n.dtype,
        n.quantization,
    )
    assert set(r["not_running"]) | {k.name for k in kernels.runnable()} >= set(kernels.ISAS)


def test_text_report_with_the_cost_curve_of_a_model(tiny_model_dir, capsys):
    assert cli.main(["info", "--model", str(tiny_model_dir("llama"))]) == 0
    out = capsys.readouterr().out
    assert "features" in out and "kernels" in out and "default" in out
    curve = next(line for line in out.splitlines() if line.startswith("t(k)/t(1)"))
    assert "1:1.00" in curve and "16:" in curve
    age = next(line for line in out.splitlines() if line.strip().startswith("curve"))
    assert (
        "probed" in age
        and "s ago" in age
        and "paired steps" in age
        and "/metrics paraspec_forward_cost" in age
    )


def test_a_pinned_curve_shows_as_pinned_and_its_implausible_readings(
    tiny_model_dir, capsys, monkeypatch
):
    # 16 rows: dearer than two 8s
    monkeypatch.setenv("PARASPEC_FORWARD_COST", '{"4": 1, "8": 1.1, "16": 14.8}')
    assert cli.main(["info", "--model", str(tiny_model_dir("llama"))]) == 0
    age = next(
        line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("curve")
    )
    assert "pinned by PARASPEC_FORWARD_COST" in age and "replaced at k = 16 (read 16:14.80)" in age


def test_w8a8_line_names_the_loop_that_runs_w8a8():
    """The amx variant's tiles run GGUF blocks only, its W8A8 calls the VNNI loop: the line says
    which loop runs, on every kernel path this CPU has."""
    from paraspec.info import cpu_report

    paths = [k for k in kernels.runnable() if k.module is not None]
    for k in paths:
        line = cpu_report(k)["ops"]["w8a8 linear"]
        if k.w8a8_variant == "amx":
            assert line.startswith(f"csrc w8a8, {k.name}:vnni512"), line
        else:
            assert line == f"csrc w8a8, {k.label}", line

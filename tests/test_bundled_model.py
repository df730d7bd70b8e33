"""The bundled default model (SmolLM2-135M-Instruct GGUF) against transformers, and the CLI on it."""

import json
import os
import subprocess
import sys

import pytest
import torch

from paraspec import SamplingParams

pytestmark = pytest.mark.slow

TEXTS = [
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
    "The capital of France is",
    "Ünïcödé, emoji 🚀, 日本語 and numbers 1234567890 with   spaces\ttabs\n\nnewlines",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
]


@pytest.fixture(scope="module")
def hf_reference():
    import transformers
    from paraspec.model.loader import default_model_path

    path = default_model_path()
    tok = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32
    )
    return tok, model.eval()


def test_tokenizer_and_chat_template_match_transformers(bundled_llm_fp32, hf_reference):
    hf_tok, _ = hf_reference
    tok = bundled_llm_fp32.tokenizer
    for text in TEXTS:
        assert tok.encode(text) == hf_tok(text).input_ids
        assert tok.decode(tok.encode(text), skip_special=False) == text
    msgs = [{"role": "user", "content": "Write a haiku about the sea."}]
    ref = hf_tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
    ref = ref["input_ids"] if isinstance(ref, dict) or hasattr(ref, "keys") else ref
    assert tok.encode_chat(msgs) == list(ref)


def test_fp32_greedy_24_tokens_identical_to_transformers(bundled_llm_fp32, hf_reference):
    """Code, and a chat-template prompt: 24 greedy tokens each (an fp32 step of both engines is
    the slow kind on an AVX2 core; e2e/test_lossless.py runs the long outputs, AR against drafts)."""
    hf_tok, model = hf_reference
    for text in (TEXTS[0], TEXTS[3]):
        ids = hf_tok(text, return_tensors="pt").input_ids
        with torch.no_grad():
            ref = model.generate(ids, max_new_tokens=24, do_sample=False)[
                0, ids.shape[1] :
            ].tolist()
        eos = sorted(bundled_llm_fp32.tokenizer.eos_token_ids)
        # up to and including EOS
        ref = ref[: min([ref.index(e) + 1 for e in eos if e in ref] + [len(ref)])]
        out = bundled_llm_fp32.generate(text, SamplingParams(temperature=0, max_tokens=24))[0]
        assert out.token_ids == ref and len(ref) >= 5


def test_cli_json_output_and_errors():
    env = dict(os.environ, OMP_NUM_THREADS="1")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "paraspec.cli",
            "generate",
            "--json",
            "--max-new-tokens",
            "8",
            "--chat",
            "Say hello",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert set(out) >= {"text", "token_ids", "finish_reason", "stats"}
    assert len(out["token_ids"]) == out["stats"]["generated_tokens"] <= 8
    for key in ("prompt_tokens", "decode_steps", "ttft_s", "decode_s", "tokens_per_s"):
        assert key in out["stats"]

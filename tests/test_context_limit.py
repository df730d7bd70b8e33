"""The model's context limit, on every kernel path (a tiny model whose context is CTX tokens): a
prompt that fills it is a one-line RequestError (a 400 from the server); a prompt near it with
max_tokens past it ends with finish_reason "length" and exactly plain decoding's tokens under
memory_decoding, lookahead and hybrid, and no verify pass writes past the cache or the context
(the draft is cut to the room left, and so is a lookahead window, which the draft budget does not
bound). A spy around the runner's verify checks every query before the real forward runs it."""

from __future__ import annotations

import pytest
import torch

from kernel_paths import per_isa
from live_server import LiveServer
from paraspec import LLM, SamplingParams
from paraspec.decoding.policy.cost import CostModel
from paraspec.decoding.drafters.lookahead import LookaheadDrafter, LookaheadParams
from paraspec.errors import RequestError
from paraspec.server import create_app, load_config

CTX = 256  # the model's context: one KEY_BUCKET, so the cache's capacity is the context
# a Jacobi window on every step, to the very end
PLUGINS = {
    "memory_decoding": {"plugin_type": "memory_decoding"},
    "lookahead": {"plugin_type": "lookahead", "level": 5, "window": 6},
    "hybrid": {"plugin_type": "hybrid"},
    "lookahead_window_always": None,
}
ROOM = [40, 9, 3, 1]  # context left after each prompt
PARAMS = SamplingParams(temperature=0, max_tokens=100, ignore_eos=True)  # past the limit


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir):
    return tiny_model_dir("llama", n_layers=2, hidden=64, max_position_embeddings=CTX)


@pytest.fixture(scope="module", params=per_isa())
def llm(request, model_dir):
    llm = LLM(str(model_dir), dtype="float32", kernels=request.param.label)
    llm.engine.pin_cost(CostModel())  # drafts sized by a fixed curve, not this machine's timings
    llm.ar = llm.generate(_prompts(llm.model.args.vocab_size), PARAMS)  # plain decoding, once
    return llm


def _prompts(vocab: int) -> list[list[int]]:
    """Repetitive prompts (their continuations get drafted) that leave ROOM tokens of context."""
    g = torch.Generator().manual_seed(0)
    motif = torch.randint(0, vocab - 2, (12,), generator=g).tolist()
    return [(motif * CTX)[: CTX - room] for room in ROOM]


class VerifySpy:
    """Runs the runner's verify, first checking that each query fits its cache and the context."""

    def __init__(self, runner):
        self.real, self.queries, self.windows = runner.verify, 0, 0

    def __call__(self, caches, queries):
        shapes = [(c.capacity, c.length) for c in caches]
        for (capacity, length), q in zip(shapes, queries):
            assert len(q.tokens) <= capacity - length, (len(q.tokens), capacity, length)
            assert max(q.positions) < CTX, (max(q.positions), length)
            self.queries += 1
            self.windows += bool(q.lookahead_rows)
        out = self.real(caches, queries)
        assert [(c.capacity, c.length) for c in caches] == shapes  # no cache grew
        return out


def _run(llm, prompts, params, plugin: str, monkeypatch) -> tuple[list, VerifySpy]:
    spy = VerifySpy(llm.runner)
    monkeypatch.setattr(llm.runner, "verify", spy)
    if PLUGINS[plugin] is not None:
        return llm.generate(prompts, params, plugin_params=PLUGINS[plugin]), spy
    window = LookaheadParams(level=5, window=6)
    saved, llm.engine.default_drafter = (
        llm.engine.default_drafter,
        LookaheadDrafter(window, llm.tokenizer.eos_token_ids, adaptive_window=False),
    )
    try:
        return llm.generate(prompts, params), spy
    finally:
        llm.engine.default_drafter = saved


def test_a_prompt_that_fills_the_context_is_one_line(llm):
    with pytest.raises(RequestError) as e:
        llm.generate([5] * CTX, SamplingParams(max_tokens=4))
    assert (
        "\n" not in str(e.value)
        and f"context is {CTX}" in str(e.value)
        and "shorten" in str(e.value)
    )
    out = llm.generate(
        [5] * (CTX - 1), SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    )[0]
    assert len(out.token_ids) == 1 and out.finish_reason == "length"


@pytest.mark.parametrize("plugin", PLUGINS)
def test_near_the_limit_drafts_end_with_length_and_plain_decodings_tokens(llm, plugin, monkeypatch):
    par, spy = _run(llm, _prompts(llm.model.args.vocab_size), PARAMS, plugin, monkeypatch)
    for a, b, room in zip(llm.ar, par, ROOM):
        assert b.token_ids == a.token_ids and len(a.token_ids) == room  # prompt + output = CTX
        assert a.finish_reason == b.finish_reason == "length"
    assert sum(b.stats["accepted_draft_tokens"] for b in par) > 0  # the drafts ran to the end
    assert spy.queries > 0
    if plugin == "lookahead_window_always":
        assert spy.windows > 0


def test_the_forward_cost_probe_fits_a_short_context(model_dir):
    """A drafter's engine times verify forwards at start-up (runner.forward_cost): on a model whose
    context is shorter than the probe's usual 256 tokens + 64 rows, its rows stay inside the context."""
    llm = LLM(str(model_dir), dtype="float32", plugin_params=PLUGINS["memory_decoding"])
    assert llm.runner.cost_probe is not None and not llm.runner.cost_probe.pinned
    assert max(llm.runner.cost_probe.sizes) <= CTX // 2


# ------------------------------------------------------------------------------------ the server


@pytest.fixture(scope="module")
def server(model_dir):
    config = load_config(None, model=str(model_dir), plugin_flags=True, plugin_params=None)
    # the model's: CTX
    config.model_deploy.max_seq_len, config.model_deploy.max_input_token_len = (
        1000,
        900,
    )
    llm = LLM(str(model_dir), dtype="float32")
    llm.engine.pin_cost(CostModel())
    with LiveServer(create_app(llm, config)) as s:
        yield s


def test_the_server_answers_a_prompt_at_the_limit_with_a_400(server):
    r = server.http.post("/v1/completions", json={"prompt": [5] * CTX, "max_tokens": 1})
    err = r.json()["error"]
    assert (
        r.status_code == 400
        and err["param"] == "prompt"
        and err["code"] == "context_length_exceeded"
    ), err
    assert "\n" not in err["message"] and str(CTX - 1) in err["message"], err
    r = server.http.post("/v1/completions", json={"prompt": [5] * (CTX - 9), "max_tokens": 10})
    err = r.json()["error"]
    assert r.status_code == 400 and err["param"] == "max_tokens" and str(CTX) in err["message"], err


@pytest.mark.parametrize("plugin", ["memory_decoding", "lookahead", "hybrid"])
def test_the_server_fills_the_context_with_plain_decodings_tokens(server, plugin):
    prompt = _prompts(server.app.state.serving_completion.vocab_size)[1]
    body = {"prompt": prompt, "max_tokens": CTX - len(prompt), "temperature": 0, "ignore_eos": True}
    ar = server.http.post(
        "/v1/completions", json={**body, "paraspec": {"plugin_params": "none"}}
    ).json()
    par = server.http.post(
        "/v1/completions", json={**body, "paraspec": {"plugin_params": PLUGINS[plugin]}}
    ).json()
    assert ar["choices"][0]["finish_reason"] == par["choices"][0]["finish_reason"] == "length", (
        ar,
        par,
    )
    assert par["choices"][0]["text"] == ar["choices"][0]["text"]
    assert (
        par["usage"]["completion_tokens"] == ar["usage"]["completion_tokens"] == CTX - len(prompt)
    )
    assert par["paraspec"]["accepted_draft_tokens"] > 0, par["paraspec"]
    assert ar["paraspec"]["draft_tokens"] == 0, ar["paraspec"]
    server.wait_idle()

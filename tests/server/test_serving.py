"""server/serving: what both endpoints share, without a model or a live server: errors as clients
see them, request limits, plugin overrides, stats, and merging several requests' streams."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from paraspec.errors import ConfigError, RequestError
from paraspec.sampling.params import SamplingParams
from paraspec.server.async_engine import (
    DEFAULT,
    Delta,
    EngineDeadError,
    RequestTimeoutError,
    ServerBusyError,
)
from paraspec.server.config import ServiceConfig
from paraspec.server.protocol import CompletionRequest
from paraspec.server.api_errors import APIError, error_for
from paraspec.server.serving import OpenAIServing
from paraspec.server.serving_outputs import ChoiceState, merge_streams, paraspec_stats, usage


@pytest.fixture
def serving() -> OpenAIServing:
    config = ServiceConfig()
    config.model_deploy.max_seq_len, config.model_deploy.max_input_token_len = 100, 60
    config.schedule.max_iter_times = 50
    # an EngineClient as far as plugin_spec looks
    engine = SimpleNamespace(default_plugin="memory_decoding")
    return OpenAIServing(
        engine, SimpleNamespace(), config, model_name="tiny", vocab_size=1000, model_max_len=4096
    )


def test_a_user_error_keeps_its_field_as_param():
    with pytest.raises(Exception) as e:
        SamplingParams(temperature=-1)
    error = error_for(e.value)
    assert (error.status, error.type, error.param) == (400, "invalid_request_error", "temperature")
    assert str(error) == str(e.value)
    # a message that looks like `name=value` is not read for a param: only the attribute counts
    assert error_for(RequestError("max_tokens=3 is odd")).param is None
    assert (
        error_for(ConfigError("bad", param="paraspec.plugin_params")).param
        == "paraspec.plugin_params"
    )


def test_server_side_errors_map_to_their_status():
    assert (
        error_for(RequestTimeoutError("late")).status,
        error_for(RequestTimeoutError("late")).code,
    ) == (504, "timeout")
    assert error_for(EngineDeadError("down")).status == 503
    busy = error_for(ServerBusyError("full"))
    assert (busy.status, busy.code) == (503, "server_busy")
    bug = error_for(RuntimeError("secret internals"))
    assert bug.status == 500 and "secret" not in str(bug) and bug.type == "internal_server_error"
    same = APIError("x", param="y")
    assert error_for(same) is same
    assert same.response().error.param == "y"


def test_prompt_checks(serving):
    assert serving.check_prompt([1, 2, 3], "prompt") == [1, 2, 3]
    for ids, words in (
        ([], "the prompt is empty"),
        ([1] * 61, "more than this server's limit of 60"),
        ([1, 1000], "token id 1000 is outside the vocabulary"),
    ):
        with pytest.raises(APIError, match=words) as e:
            serving.check_prompt(ids, "prompt")
        assert e.value.param == "prompt"
    serving.config.model_deploy.truncation = True  # MindIE's truncation keeps the end
    assert serving.check_prompt(list(range(70)), "prompt") == list(range(10, 70))


def test_max_tokens_within_limits(serving):
    assert serving.max_tokens(None, 10, 16) == 16
    assert serving.max_tokens(None, 10, None) == 50  # chat: the room left, capped by maxIterTimes
    assert serving.max_tokens(None, 90, None) == 10
    assert serving.max_tokens(0, 10, 16) == 0  # SamplingParams words this error
    with pytest.raises(APIError, match="above this server's limit of 50") as e:
        serving.max_tokens(51, 10, 16)
    assert e.value.param == "max_tokens"
    with pytest.raises(APIError, match="maximum context length is 100") as e:
        serving.max_tokens(20, 90, 16)
    assert e.value.code == "context_length_exceeded"


def test_plugin_overrides(serving):
    assert serving.plugin_spec(CompletionRequest(prompt="x")) == (DEFAULT, "memory_decoding")
    assert serving.plugin_spec(
        CompletionRequest(prompt="x", paraspec={"plugin_params": "none"})
    ) == (None, None)
    plugin, name = serving.plugin_spec(
        CompletionRequest(prompt="x", paraspec={"plugin_params": {"plugin_type": "la"}})
    )
    assert name == plugin.plugin_type == "lookahead"
    with pytest.raises(APIError) as e:
        serving.plugin_spec(
            CompletionRequest(prompt="x", paraspec={"plugin_params": {"plugin_type": "nope"}})
        )
    assert e.value.param == "paraspec.plugin_params" and str(e.value).startswith(
        "paraspec.plugin_params"
    )


def test_common_checks(serving):
    serving.check_common(CompletionRequest(prompt="x", model="tiny"))
    for req, param in (
        (CompletionRequest(prompt="x", model="gpt-4"), "model"),
        (CompletionRequest(prompt="x", logit_bias={"1": 2}), "logit_bias"),
        (CompletionRequest(prompt="x", stream_options={"include_usage": True}), "stream_options"),
    ):
        with pytest.raises(APIError) as e:
            serving.check_common(req)
        assert e.value.param == param


def test_choices_accumulate_deltas_and_stats_sum_them():
    a, b = ChoiceState(), ChoiceState()
    a.add(Delta(0, [1, 2], "ab", None))
    a.add(
        Delta(
            0,
            [3],
            "c",
            None,
            "stop",
            {
                "decode_steps": 2,
                "mean_accepted_tokens_per_step": 1.5,
                "draft_tokens": 4,
                "accepted_draft_tokens": 1,
            },
        )
    )
    b.add(
        Delta(
            1,
            [4],
            "d",
            None,
            "length",
            {
                "decode_steps": 2,
                "mean_accepted_tokens_per_step": 0.5,
                "draft_tokens": 0,
                "accepted_draft_tokens": 0,
            },
        )
    )
    assert ("".join(a.text), a.token_ids, a.finish_reason) == ("abc", [1, 2, 3], "stop")
    stats = paraspec_stats("memory_decoding", [a, b])
    assert stats["decode_steps"] == 4 and stats["mean_accepted_tokens_per_step"] == 1.0
    assert stats["acceptance_rate"] == 0.25 and len(stats["choices"]) == 2
    totals = usage([5, 7], [a, b])
    assert (totals.prompt_tokens, totals.completion_tokens, totals.total_tokens) == (12, 4, 16)


class FakeStream:
    def __init__(self, deltas, error: Exception | None = None):
        self.deltas, self.error = deltas, error

    async def __aiter__(self):
        for d in self.deltas:
            await asyncio.sleep(0)
            yield d
        if self.error is not None:
            raise self.error


def test_merge_streams_tags_each_delta_with_its_request():
    async def collect(streams):
        return [(i, d.text) async for i, d in merge_streams(streams)]

    one = [Delta(0, [1], "a", None), Delta(0, [2], "b", None)]
    two = [Delta(0, [3], "x", None)]
    merged = asyncio.run(collect([FakeStream(one), FakeStream(two)]))
    assert sorted(merged) == [(0, "a"), (0, "b"), (1, "x")]
    assert [t for i, t in merged if i == 0] == ["a", "b"]  # each request's own order kept
    assert asyncio.run(collect([FakeStream(one)])) == [(0, "a"), (0, "b")]
    with pytest.raises(RequestTimeoutError):
        asyncio.run(collect([FakeStream(one), FakeStream([], RequestTimeoutError("late"))]))

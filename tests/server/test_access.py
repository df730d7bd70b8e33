"""API key and allowed hosts, against a live server on 127.0.0.1 with the official openai client."""

from __future__ import annotations

import argparse

import httpx
import openai
import pytest

from live_server import LiveServer
from paraspec import LLM
from paraspec.errors import ConfigError
from paraspec.server import create_app, load_config
from paraspec.server.command import add_parser, config_from_args
from paraspec.server.security import AccessGuard, default_allowed_hosts, host_name

KEY = "sk-test-0123456789"


def _app(model_dir, **server):
    config = load_config(None, model=str(model_dir), plugin_flags=True, plugin_params=None)
    for k, v in server.items():
        setattr(config.server, k, v)
    return create_app(LLM(str(model_dir), dtype="float32"), config)


@pytest.fixture(scope="module")
def keyed(model_dir):
    with LiveServer(_app(model_dir, api_key=KEY), api_key=KEY) as s:
        yield s


def test_the_right_key_is_served(keyed):
    out = keyed.client.completions.create(
        model=keyed.client.models.list().data[0].id, prompt="hello", max_tokens=4, temperature=0
    )
    assert out.usage.completion_tokens == 4
    assert keyed.http.get("/metrics").status_code == 200


@pytest.mark.parametrize("key", ["wrong", KEY[:-1], KEY + "x", ""])
def test_a_wrong_or_missing_key_is_401_in_openai_shape(keyed, key):
    client = openai.OpenAI(
        base_url=keyed.url + "/v1", api_key=key or "none", max_retries=0, timeout=60
    )
    with pytest.raises(openai.AuthenticationError) as e:
        client.completions.create(model="x", prompt="hello", max_tokens=2)
    assert e.value.status_code == 401 and e.value.code == "invalid_api_key"
    for headers in (
        {},
        {"Authorization": f"Bearer {key or 'x'}"},
        {"Authorization": f"Basic {KEY}"},
        {"Authorization": KEY},
    ):
        r = httpx.get(keyed.url + "/v1/models", headers=headers)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert r.json()["error"]["type"] == "invalid_request_error"
        assert httpx.get(keyed.url + "/metrics", headers=headers).status_code == 401


def test_health_and_ready_stay_open(keyed):
    assert httpx.get(keyed.url + "/health").status_code == 200
    assert httpx.get(keyed.url + "/ready").status_code == 200


def test_metrics_open_and_no_key(model_dir):
    with LiveServer(_app(model_dir, api_key=KEY, metrics_open=True), api_key=KEY) as s:
        assert httpx.get(s.url + "/metrics").status_code == 200
        assert httpx.get(s.url + "/v1/models").status_code == 401
    with LiveServer(_app(model_dir)) as s:  # no key configured: everything open
        assert httpx.get(s.url + "/v1/models").status_code == 200


def test_a_foreign_host_header_is_refused(keyed):
    """DNS rebinding: a page on evil.example resolving to 127.0.0.1 sends its own name as Host."""
    ok = {"Authorization": f"Bearer {KEY}"}
    for host in ("localhost", "127.0.0.1:1234", "LOCALHOST:80", "[::1]:8000"):
        assert (
            httpx.get(keyed.url + "/v1/models", headers={**ok, "Host": host}).status_code == 200
        ), host
    for host in ("evil.example", "evil.example:80", "127.0.0.1.evil.example", ""):
        r = httpx.get(keyed.url + "/health", headers={**ok, "Host": host})
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_host", host


def test_host_parsing_and_defaults():
    assert host_name("[::1]:8000") == "::1" and host_name("Example.COM:80") == "example.com"
    assert host_name("::1") == "::1" and host_name("localhost") == "localhost"
    assert default_allowed_hosts("0.0.0.0") is None and default_allowed_hosts("::") is None
    assert "10.1.2.3" in default_allowed_hosts("10.1.2.3") and "localhost" in default_allowed_hosts(
        "10.1.2.3"
    )
    guard = AccessGuard(None, api_key=KEY)
    assert guard.needs_key("/v1/chat/completions") and guard.needs_key("/metrics")
    assert not guard.needs_key("/health") and not guard.needs_key("/")


def _serve_args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_parser(p.add_subparsers())
    return p.parse_args(["serve", *argv])


def test_key_from_flag_env_and_config(tmp_path, monkeypatch):
    cfg = tmp_path / "config.json"
    cfg.write_text(
        '{"ServerConfig": {"apiKey": "from-file", "allowedHosts": ["api.example.com"]}, '
        '"BackendConfig": {"ModelDeployConfig": {"ModelConfig": [{"modelWeightPath": "default"}]}}}'
    )
    monkeypatch.delenv("PARASPEC_API_KEY", raising=False)
    c = config_from_args(_serve_args("--config", str(cfg)))
    assert c.server.api_key == "from-file" and c.server.allowed_hosts == ["api.example.com"]
    monkeypatch.setenv("PARASPEC_API_KEY", "from-env")
    assert config_from_args(_serve_args("--config", str(cfg))).server.api_key == "from-env"
    c = config_from_args(
        _serve_args(
            "--config",
            str(cfg),
            "--api-key",
            "from-flag",
            "--allowed-hosts",
            "a,b",
            "--metrics-open",
        )
    )
    assert (c.server.api_key, c.server.allowed_hosts, c.server.metrics_open) == (
        "from-flag",
        ["a", "b"],
        True,
    )


@pytest.mark.parametrize(
    "server, field",
    [
        ({"apiKey": " padded "}, "apiKey"),
        ({"apiKey": ""}, "apiKey"),
        ({"apiKey": "tab\tkey"}, "apiKey"),
        ({"apiKey": 5}, "apiKey"),
        ({"allowedHosts": []}, "allowedHosts"),
        ({"allowedHosts": "localhost"}, "allowedHosts"),
    ],
)
def test_bad_access_settings_are_one_line_errors(tmp_path, server, field):
    import json

    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps(
            {
                "ServerConfig": server,
                "BackendConfig": {
                    "ModelDeployConfig": {"ModelConfig": [{"modelWeightPath": "default"}]}
                },
            }
        )
    )
    with pytest.raises(ConfigError, match=f"ServerConfig.{field}"):
        load_config(cfg)

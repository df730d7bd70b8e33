"""server/command: `paraspec serve`'s flags and how they override config.json (or the defaults)."""

from __future__ import annotations

import argparse
import json

import pytest

from paraspec.errors import ParaspecError
from paraspec.server import command


def serve_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    command.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["serve", *argv])


@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(
        json.dumps(
            {
                "ServerConfig": {"port": 2000},
                "BackendConfig": {
                    "ModelDeployConfig": {
                        "speculationGamma": 16,
                        "ModelConfig": [
                            {
                                "modelWeightPath": "default",
                                "modelName": "smol",
                                "plugin_params": '{"plugin_type": "la", "level": 3, "window": 2}',
                            }
                        ],
                    }
                },
            }
        )
    )
    return str(path)


def test_without_flags_or_file_memory_decoding_serves_on_localhost():
    args = serve_args()
    # --plugin not given: None, not "none"
    assert args.plugin is None and args.func is command.serve_main
    c = command.config_from_args(args)
    assert c.plugin.plugin_type == "memory_decoding" and (c.server.ip_address, c.server.port) == (
        "127.0.0.1",
        1025,
    )


@pytest.mark.parametrize(
    "argv", [["--plugin", "none"], ["--plugin-params", "none"], ["--plugin-params", " None "]]
)
def test_plain_decoding_on_request(argv, config_file):
    assert command.config_from_args(serve_args(*argv)).plugin is None
    assert command.config_from_args(serve_args("--config", config_file, *argv)).plugin is None


def test_the_file_decides_unless_flags_say_otherwise(config_file):
    c = command.config_from_args(serve_args("--config", config_file))
    assert (
        c.plugin.plugin_type == "lookahead" and c.plugin.params.level == 3 and c.server.port == 2000
    )
    # --model's default does not override
    assert c.model_deploy.model.model_weight_path == "default"
    c = command.config_from_args(
        serve_args(
            "--config",
            config_file,
            "--plugin",
            "memory_decoding",
            "--decoding-length",
            "8",
            "--port",
            "3000",
            "--host",
            "::1",
        )
    )
    assert c.plugin.plugin_type == "memory_decoding" and c.plugin.params.decoding_length == 8
    assert (c.server.ip_address, c.server.port) == ("::1", 3000)


def test_plugin_flags_without_a_plugin_are_a_user_error():
    with pytest.raises(ParaspecError, match="--decoding-length needs --plugin"):
        command.config_from_args(serve_args("--decoding-length", "8"))
    with pytest.raises(ParaspecError, match="either --plugin-params or --plugin"):
        command.config_from_args(serve_args("--plugin", "la", "--plugin-params", "{}"))


def test_speculation_gamma_is_checked_against_the_plugin():
    with pytest.raises(ParaspecError, match="speculationGamma"):
        command.config_from_args(
            serve_args("--plugin", "memory_decoding", "--speculation-gamma", "4")
        )

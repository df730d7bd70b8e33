"""config.json in MindIE Service's layout: what loads, what warns, and one clear message per problem."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from paraspec.cli import build_parser, main
from paraspec.server.command import config_from_args, serve_main
from paraspec.server.config import ServiceConfigError
from paraspec.server.config_loader import MAX_CONFIG_BYTES, load_config, parse_config

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "config.json"

# a MindIE 1.0 file as MindIE writes it (TLS, NPU and scheduler keys paraspec has no use for)
MINDIE = {
    "Version": "1.0.0",
    "LogConfig": {
        "logLevel": "Info",
        "logFileSize": 20,
        "logFileNum": 20,
        "logPath": "logs/mindservice.log",
    },
    "ServerConfig": {
        "ipAddress": "127.0.0.1",
        "managementIpAddress": "127.0.0.2",
        "port": 1025,
        "managementPort": 1026,
        "metricsPort": 1027,
        "allowAllZeroIpListening": False,
        "maxLinkNum": 1000,
        "httpsEnabled": False,
        "fullTextEnabled": False,
        "tlsCaPath": "security/ca/",
        "tlsCaFile": ["ca.pem"],
        "tlsCert": "security/certs/server.pem",
        "tlsPk": "security/keys/server.key.pem",
        "tlsPkPwd": "security/pass/key_pwd.txt",
        "tlsCrlPath": "security/certs/",
        "tlsCrlFiles": ["server_crl.pem"],
        "inferMode": "standard",
        "interCommTLSEnabled": False,
        "openAiSupport": "vllm",
        "tokenTimeout": 600,
        "e2eTimeout": 600,
    },
    "BackendConfig": {
        "backendName": "mindieservice_llm_engine",
        "modelInstanceNumber": 1,
        "npuDeviceIds": [[0]],
        "tokenizerProcessNumber": 8,
        "multiNodesInferEnabled": False,
        "multiNodesInferPort": 1120,
        "interNodeTLSEnabled": False,
        "ModelDeployConfig": {
            "maxSeqLen": 2560,
            "maxInputTokenLen": 2048,
            "truncation": 0,
            "speculationGamma": 16,
            "ModelConfig": [
                {
                    "modelInstanceType": "Standard",
                    "modelName": "smol",
                    "modelWeightPath": "default",
                    "worldSize": 1,
                    "cpuMemSize": 5,
                    "npuMemSize": -1,
                    "backendType": "atb",
                    "trustRemoteCode": False,
                    "plugin_params": '{"plugin_type":"memory_decoding","decoding_length":16,"dynamic_algo":true}',
                }
            ],
        },
        "ScheduleConfig": {
            "templateType": "Standard",
            "templateName": "Standard_LLM",
            "cacheBlockSize": 128,
            "maxPrefillBatchSize": 50,
            "maxPrefillTokens": 8192,
            "prefillTimeMsPerReq": 150,
            "prefillPolicyType": 0,
            "decodeTimeMsPerReq": 50,
            "decodePolicyType": 0,
            "maxBatchSize": 8,
            "maxIterTimes": 528,
            "maxPreemptCount": 0,
            "supportSelectBatch": False,
            "maxQueueDelayMicroseconds": 5000,
        },
    },
}


def edited(**paths) -> dict:
    """MINDIE with values replaced: edited(**{"BackendConfig.ScheduleConfig.maxBatchSize": 0})."""
    raw = copy.deepcopy(MINDIE)
    for path, value in paths.items():
        node = raw
        *parents, last = path.split(".")
        for p in parents:
            node = node[int(p)] if p.isdigit() else node[p]
        if value is _DELETE:
            del node[last]
        else:
            node[last] = value
    return raw


_DELETE = object()
MODEL = "BackendConfig.ModelDeployConfig.ModelConfig.0"


def problems(raw: dict) -> list[str]:
    with pytest.raises(ServiceConfigError) as e:
        parse_config(raw)
    assert "\n" not in str(e.value)
    return e.value.problems


def write(tmp_path: Path, content: str | bytes) -> Path:
    p = tmp_path / "config.json"
    p.write_bytes(content if isinstance(content, bytes) else content.encode())
    return p


# ------------------------------------------------------------------------------------ what loads


def test_example_config_loads_clean():
    c = load_config(EXAMPLE)
    assert (c.server.ip_address, c.server.port) == ("127.0.0.1", 1025)
    assert c.plugin.plugin_type == "memory_decoding" and c.model_deploy.speculation_gamma == 16
    assert c.model_deploy.model.model_weight_path == "default" and c.schedule.max_batch_size == 8
    assert c.warnings == []


def test_defaults_without_a_file_serve_memory_decoding_on_localhost():
    c = load_config(None)
    assert c.server.ip_address == "127.0.0.1"
    assert c.plugin is not None and c.plugin.plugin_type == "memory_decoding"
    assert c.model_deploy.model.model_weight_path == "default"


def test_a_mindie_file_carries_over_without_warnings(tmp_path):
    c = load_config(write(tmp_path, json.dumps(MINDIE, indent=4)))
    assert c.warnings == []
    assert c.model_deploy.model.model_name == "smol" and c.model_deploy.truncation is False
    assert c.plugin.params.dynamic_algo is True and c.schedule.max_iter_times == 528


def test_unknown_keys_warn_with_a_suggestion():
    raw = edited(**{"BackendConfig.ScheduleConfig.maxBatchsize": 4, "ServerConfig.colour": "blue"})
    c = parse_config(raw)
    assert any(
        "BackendConfig.ScheduleConfig.maxBatchsize" in w and "'maxBatchSize'" in w
        for w in c.warnings
    )
    assert any("ServerConfig.colour" in w for w in c.warnings)
    assert c.schedule.max_batch_size == 8  # the typo did not take effect, and said so


def test_unknown_plugin_key_warns():
    c = parse_config(
        edited(**{f"{MODEL}.plugin_params": '{"plugin_type": "memory_decoding", "speed": "max"}'})
    )
    assert any("speed" in w for w in c.warnings)


def test_overrides_from_the_command_line(tmp_path):
    c = load_config(
        write(tmp_path, json.dumps(MINDIE)),
        host="::1",
        port=8080,
        plugin_flags=True,
        plugin_params=None,
    )
    assert (c.server.ip_address, c.server.port, c.plugin) == ("::1", 8080, None)
    args = build_parser().parse_args(["serve", "--plugin-params", "none"])
    assert config_from_args(args).plugin is None
    args = build_parser().parse_args(["serve", "--plugin", "la", "--speculation-gamma", "30"])
    assert config_from_args(args).plugin.plugin_type == "lookahead"


# ------------------------------------------------------------------------------------ what is refused


def test_not_json_names_line_and_column(tmp_path):
    with pytest.raises(ServiceConfigError, match=r"not valid JSON: .* at line 3, column \d+"):
        load_config(
            write(tmp_path, '{\n  "ServerConfig": {"port": 1025}\n  "BackendConfig": {}\n}')
        )
    with pytest.raises(ServiceConfigError, match="JSON object"):
        load_config(write(tmp_path, "[1, 2]"))


def test_deep_nesting_is_one_line(tmp_path):
    with pytest.raises(ServiceConfigError, match="nests its JSON deeper"):
        load_config(write(tmp_path, '{"ServerConfig": ' + "[" * 100_000 + "]" * 100_000 + "}"))


@pytest.mark.parametrize(
    "text",
    ["{}", '{"ServerConfig": {"port": 1025}}', '{"BackendConfig": {"ModelDeployConfig": {}}}'],
)
def test_a_config_without_a_model_is_refused_unless_one_is_passed(tmp_path, text):
    path = write(tmp_path, text)
    with pytest.raises(
        ServiceConfigError, match=r"has no BackendConfig.ModelDeployConfig.ModelConfig.*--model"
    ):
        load_config(path)
    assert load_config(path, model="default").model_deploy.model.model_weight_path == "default"


def test_size_limits(tmp_path):
    with pytest.raises(ServiceConfigError, match="10 MB"):
        load_config(write(tmp_path, b" " * (MAX_CONFIG_BYTES + 1)))
    with pytest.raises(ServiceConfigError, match="0 bytes"):
        load_config(write(tmp_path, b""))
    with pytest.raises(ServiceConfigError, match="cannot read"):
        load_config(tmp_path / "absent.json")


@pytest.mark.parametrize(
    "gamma,plugin,need",
    [
        (8, '{"plugin_type": "memory_decoding", "decoding_length": 16}', "16"),
        (20, '{"plugin_type": "la", "level": 4, "window": 5, "guess_set_size": 5}', "30"),
    ],
)
def test_speculation_gamma_below_the_algorithms_need(gamma, plugin, need):
    (msg,) = problems(
        edited(
            **{
                "BackendConfig.ModelDeployConfig.speculationGamma": gamma,
                f"{MODEL}.plugin_params": plugin,
            }
        )
    )
    assert "BackendConfig.ModelDeployConfig.speculationGamma" in msg and need in msg


def test_a_bad_plugin_value_is_plugin_params_problem_even_with_speculation_gamma_set():
    # decoding_length=17 breaks plugin_params' own range: the problem is not speculationGamma's
    (msg,) = problems(
        edited(
            **{
                "BackendConfig.ModelDeployConfig.speculationGamma": 8,
                f"{MODEL}.plugin_params": '{"plugin_type": "memory_decoding", "decoding_length": 17}',
            }
        )
    )
    assert (
        msg.startswith(f"{MODEL.replace('.0', '[0]')}.plugin_params") and "decoding_length" in msg
    )


def test_max_iter_times_with_dynamic_algo():
    (msg,) = problems(edited(**{"BackendConfig.ScheduleConfig.maxIterTimes": 527}))
    assert "BackendConfig.ScheduleConfig.maxIterTimes=527" in msg and ">= " in msg and "528" in msg
    static = '{"plugin_type": "memory_decoding", "decoding_length": 16}'
    assert (
        parse_config(
            edited(
                **{
                    "BackendConfig.ScheduleConfig.maxIterTimes": 512,
                    f"{MODEL}.plugin_params": static,
                }
            )
        ).schedule.max_iter_times
        == 512
    )


@pytest.mark.parametrize(
    "plugin,words",
    [
        ('{"plugin_type": "medusa"}', "plugin_type='medusa' is unknown"),
        ('{"plugin_type": "memory_decoding,la"}', "several algorithms at once"),
        ('{"plugin_type": "memory_decoding", "decoding_length": 17}', "decoding_length"),
        ('{"plugin_type": "la", "level": 2}', "level"),
        ("{not json", "not valid JSON"),
    ],
)
def test_invalid_plugin_params(plugin, words):
    (msg,) = problems(
        edited(
            **{
                f"{MODEL}.plugin_params": plugin,
                "BackendConfig.ModelDeployConfig.speculationGamma": _DELETE,
            }
        )
    )
    assert msg.startswith(f"{MODEL.replace('.0', '[0]')}.plugin_params") and words in msg


def test_missing_weights():
    (msg,) = problems(edited(**{f"{MODEL}.modelWeightPath": "/no/such/model.gguf"}))
    assert (
        "modelWeightPath='/no/such/model.gguf' does not exist" in msg
        and "qwen2.5-coder-0.5b" in msg
    )


def test_a_fetched_models_name_is_a_weight_path(tmp_path, monkeypatch):
    """modelWeightPath takes the names --model takes: the file `paraspec fetch` keeps, or one line
    saying how to fetch it."""
    monkeypatch.setenv("PARASPEC_CACHE", str(tmp_path))
    (msg,) = problems(edited(**{f"{MODEL}.modelWeightPath": "qwen2.5-coder-0.5b"}))
    assert msg == (
        f"{MODEL.replace('.0', '[0]')}.modelWeightPath='qwen2.5-coder-0.5b' is not fetched; "
        "run `make models` or `paraspec fetch qwen2.5-coder-0.5b`"
    )
    from paraspec import catalog

    catalog.ARTIFACTS["qwen2.5-coder-0.5b"].path.parent.mkdir(parents=True, exist_ok=True)
    catalog.ARTIFACTS["qwen2.5-coder-0.5b"].path.write_bytes(b"")
    config = parse_config(edited(**{f"{MODEL}.modelWeightPath": "qwen2.5-coder-0.5b"}))
    # the loader resolves it
    assert config.model_deploy.model.model_weight_path == "qwen2.5-coder-0.5b"


def test_ranges_and_types_each_one_problem():
    raw = edited(
        **{
            "BackendConfig.ScheduleConfig.maxBatchSize": 0,
            "ServerConfig.port": "1025",
            "ServerConfig.maxLinkNum": True,
            "BackendConfig.ModelDeployConfig.maxInputTokenLen": 4000,
            "LogConfig.logLevel": "Loud",
            "BackendConfig.ScheduleConfig.prefillChunkSize": 8,
        }
    )
    found = problems(raw)
    assert len(found) == 6
    assert any(
        "prefillChunkSize=8 is out of range; use an integer from 16 to 8192" in p for p in found
    )
    assert any("maxBatchSize=0 is out of range; use an integer from 1 to 256" in p for p in found)
    assert any("ServerConfig.port='1025' is a JSON string; use a JSON integer" in p for p in found)
    assert any("ServerConfig.maxLinkNum=True is a JSON boolean" in p for p in found)
    assert any("maxInputTokenLen=4000 must be below maxSeqLen=2560" in p for p in found)
    assert any("LogConfig.logLevel='Loud'" in p for p in found)


def test_addresses():
    (msg,) = problems(edited(**{"ServerConfig.ipAddress": "0.0.0.0"}))
    assert "allowAllZeroIpListening" in msg
    ok = parse_config(
        edited(
            **{"ServerConfig.ipAddress": "0.0.0.0", "ServerConfig.allowAllZeroIpListening": True}
        )
    )
    assert ok.server.ip_address == "0.0.0.0"
    (msg,) = problems(edited(**{"ServerConfig.ipAddress": "my-host"}))
    assert "not an IPv4 or IPv6 address" in msg


def test_one_model_per_process():
    raw = edited()
    models = raw["BackendConfig"]["ModelDeployConfig"]["ModelConfig"]
    models.append(dict(models[0]))
    (msg,) = problems(raw)
    assert "2 entries" in msg


def test_serve_refuses_an_invalid_config_with_one_line(tmp_path, capsys):
    bad = write(
        tmp_path,
        json.dumps(
            edited(
                **{
                    "BackendConfig.ScheduleConfig.maxBatchSize": 999,
                    f"{MODEL}.modelWeightPath": "/absent",
                }
            )
        ),
    )
    assert serve_main(build_parser().parse_args(["serve", "--config", str(bad)])) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("paraspec: error:") and "maxBatchSize=999" in err[0]
    assert main(["serve", "--config", str(write(tmp_path, "{oops"))]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "line 1, column 2" in err[0]

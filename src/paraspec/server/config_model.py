"""config.json's one ModelConfig entry: its name, its weights (a path, "default" or a fetched
model) and its plugin_params, checked against speculationGamma and maxIterTimes."""

from __future__ import annotations

import warnings
from pathlib import Path

from .. import catalog
from ..config import parse_plugin_params
from ..errors import ConfigError
from . import mindie_keys
from .config import ModelConfig, ModelDeployConfig, ScheduleConfig
from .json_reader import Section

MODEL_PATH = "BackendConfig.ModelDeployConfig.ModelConfig"


def read_model_entry(deploy: Section, problems: list[str], notes: list[str]) -> ModelConfig:
    models = deploy.get("ModelConfig", list, [{}])
    if len(models) != 1:
        problems.append(
            f"{MODEL_PATH} has {len(models)} entries; paraspec serves one model per process, so "
            "keep exactly one"
        )
        if not models:
            return ModelConfig()
    m = Section(f"{MODEL_PATH}[0]", models[0], problems, notes)
    name = m.get("modelName", str, None)
    weights = m.get("modelWeightPath", str, "default")
    plugin_params = m.get("plugin_params", (str, dict), None)
    m.check_unknown(mindie_keys.MODEL)
    if name is not None and not name.strip():
        problems.append(
            f"{MODEL_PATH}[0].modelName is empty; give the name clients will pass as `model`, "
            "or leave it out to use the model's own name"
        )
    # a fetched model's name, as --model
    if weights in catalog.MODELS and not catalog.is_fetched(weights):
        problems.append(
            f"{MODEL_PATH}[0].modelWeightPath={weights!r} is not fetched; "
            f"{catalog.fetch_hint(weights)}"
        )
    elif weights not in ("default", *catalog.MODELS) and not Path(weights).expanduser().exists():
        problems.append(
            f"{MODEL_PATH}[0].modelWeightPath={weights!r} does not exist; give a .gguf file, a Hugging "
            f'Face model folder, "default" (the bundled SmolLM2-135M-Instruct) or {"/".join(catalog.MODELS)}'
        )
    return ModelConfig(name, weights, plugin_params)


def check_plugin(
    deploy: ModelDeployConfig, schedule: ScheduleConfig, problems: list[str], notes: list[str]
) -> None:
    """plugin_params against speculationGamma (each algorithm's own rule) and, with dynamic_algo,
    maxIterTimes >= the longest output the file allows + speculationGamma (MindIE's rule)."""
    model = deploy.model
    if model.plugin_params is None:
        return
    where = f"{MODEL_PATH}[0].plugin_params"
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.plugin = parse_plugin_params(model.plugin_params)
        notes += [f"{where}: {w.message}" for w in caught]
    except ConfigError as e:
        problems.append(f"{where}: " + str(e).removeprefix("plugin_params").lstrip(".: "))
        return
    if model.plugin is not None and deploy.speculation_gamma is not None:
        try:
            model.plugin.check_gamma(deploy.speculation_gamma)
        except ConfigError as e:  # plugin_params valid by themselves: the field at fault is gamma
            msg = str(e).replace("speculation_gamma", "speculationGamma")
            problems.append(f"BackendConfig.ModelDeployConfig.{msg}")
            return
    if model.plugin is None or not model.plugin.dynamic_algo:
        return
    gamma = (
        deploy.speculation_gamma
        if deploy.speculation_gamma is not None
        else model.plugin.speculation_need
    )
    max_output = deploy.max_seq_len - deploy.max_input_token_len
    if schedule.max_iter_times < max_output + gamma:
        problems.append(
            f"BackendConfig.ScheduleConfig.maxIterTimes={schedule.max_iter_times} is too small with dynamic_algo: "
            f"it must be >= the longest output (maxSeqLen - maxInputTokenLen = {max_output}) + speculationGamma "
            f"({gamma}) = {max_output + gamma}; raise maxIterTimes or lower maxSeqLen"
        )

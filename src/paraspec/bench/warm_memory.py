"""A warm memory for the bench's "+warm" systems: the model's own answers to a ShareGPT sample that
no bench set draws from, saved with LLM.save_memory.

    paraspec bench --build-warm-memory 64 --model qwen2.5-coder-1.5b      # then:
    paraspec bench --model qwen2.5-coder-1.5b --systems ar,hybrid,hybrid+warm --tasks mtbench,sharegpt

PIA's and SGLang's headline figures draft from a trie built from a corpus; this is that case,
measured beside the cold one (prompt + own outputs) and labelled. The corpus is the "warm" split
of ShareGPT (datasets.py: split by chat, so it never shares a conversation with the `sharegpt`
set's "eval" split), cut into prompts by the `sharegpt` set's own rules (workload_tasks.py, first
turns allowed), less any conversation that asks an MT-Bench question. The answers are decoded by
greedy hybrid on the engine's shared memory: greedy parallel decoding writes AR's exact tokens, so
the memory holds what the model itself says; hybrid fills both memories the bench's systems read
(the trie of memory_decoding and hybrid, the past outputs of hybrid) and drafts from them while
it goes, which is quicker than AR. Prompts are not saved (save_memory keeps outputs only).

The file goes to --warm-memory, by default ~/.cache/paraspec/warm/<model>-<n>.trie, with
<file>.json beside it: the model, the prompts' ids and chats, the cap (results.json copies it).
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

from .. import catalog
from ..errors import ConfigError
from .workload_tasks import seeded_sample, warm_corpus

WARM_PLUGIN = {"plugin_type": "hybrid"}
WARM_SEED = 0
WARM_BATCH = 8


def model_slug(model: str) -> str:
    name = Path(model).name.removesuffix(".gguf") or "model"
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name)


def warm_dir() -> Path:
    return catalog.cache_dir() / "warm"


def default_path(model: str, n: int) -> Path:
    return warm_dir() / f"{model_slug(model)}-{n}.trie"


def find_default(model: str) -> Path | None:
    """The warm memory built for `model` with the most prompts, if any was built."""
    found = []
    for p in warm_dir().glob(f"{model_slug(model)}-*.trie"):
        if m := re.fullmatch(re.escape(model_slug(model)) + r"-(\d+)\.trie", p.name):
            found.append((int(m[1]), p))
    return max(found)[1] if found else None


def provenance(path: str | Path) -> dict | None:
    """What <file>.json says of a warm memory (None for a file built elsewhere)."""
    side = Path(f"{path}.json")
    try:
        return json.loads(side.read_text()) if side.is_file() else None
    except (OSError, ValueError):
        return None


def warm_prompts(n: int, seed: int = WARM_SEED):
    """n prompts of the warm corpus, MT-Bench's questions kept out."""
    from ..datasets import mtbench_questions

    mt = {_norm(t) for q in mtbench_questions() for t in q.turns}
    corpus = [t for t in warm_corpus() if not any(_norm(m["content"]) in mt for m in t.messages)]
    if n < 1 or n > len(corpus):
        raise ConfigError(
            f"--build-warm-memory takes 1 to {len(corpus)} prompts (the warm corpus), got {n}",
            param="build_warm_memory",
        )
    return seeded_sample(corpus, n, seed)


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def build(
    llm,
    n: int,
    path: Path,
    model: str,
    max_new_tokens: int | None = None,
    seed: int = WARM_SEED,
    log=lambda msg: print(msg, file=sys.stderr),
) -> dict:
    """Answer n warm prompts with `llm` (greedy hybrid, its shared memory) and save the memory."""
    from ..sampling.params import SamplingParams

    tasks = warm_prompts(n, seed)
    generated, t0 = 0, time.perf_counter()
    # batches: one forward per step serves every request's rows, several times the tokens per
    # second of one request at a time on a CPU (the memory is built, not timed)
    for i in range(0, len(tasks), WARM_BATCH):
        batch = tasks[i : i + WARM_BATCH]
        params = [
            SamplingParams(
                temperature=0, max_tokens=min(t.max_new_tokens, max_new_tokens or t.max_new_tokens)
            )
            for t in batch
        ]
        outs = llm.generate(
            [t.prompt_ids(llm.tokenizer) for t in batch], params, plugin_params=WARM_PLUGIN
        )
        done = sum(len(o.outputs[0].token_ids) for o in outs)
        generated += done
        log(
            f"paraspec bench: warm memory: {i + len(batch)}/{n} ({done} tokens, {time.perf_counter() - t0:.0f} s)"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    llm.save_memory(str(path))
    info = {
        "model": model,
        "n": n,
        "split": "warm",
        "seed": seed,
        "decoding": "hybrid, greedy (= AR's tokens)",
        "max_new_tokens": max_new_tokens,
        "generated_tokens": generated,
        "chats": sorted({t.task_id.split("/")[1].rsplit("_", 1)[0] for t in tasks}),
        "prompts": [t.task_id for t in tasks],
    }
    Path(f"{path}.json").write_text(json.dumps(info, indent=1))
    return info


def build_main(plan) -> int:
    """`paraspec bench --build-warm-memory N`: build, save, print where."""
    from .. import LLM

    n = plan.build_warm_memory
    path = (
        Path(plan.warm_memory_file) if plan.warm_memory_file else default_path(plan.engine.model, n)
    )
    warm_prompts(n)  # a bad N or a missing data file fails before the load
    llm = LLM.from_engine_args(plan.engine)
    info = build(llm, n, path, plan.engine.model, plan.max_new_tokens)
    print(
        f"paraspec bench: warm memory of {info['n']} answers ({info['generated_tokens']} tokens) -> {path}"
    )
    return 0

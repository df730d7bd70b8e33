"""Plain answers to extract parallel structure from, all local (no downloads):
- "packages": installed distributions' long descriptions (their README, Markdown with lists and
  headed sections), as answers to "What is the Python package X and how is it used?";
- "model": the bundled model's own greedy answers to the bench's chat prompts (chat_tasks.py);
- "user": a JSONL file of {"prompt": ..., "answer": ...} lines (`user_answers`).
Each yields (id, question, answer) triples for extract.Pipeline.
"""
from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path

MAX_CHARS = 2400   # an answer is cut at the last line break before this (the paper's 8k-token cap, scaled)


def _cut(text: str, limit: int = MAX_CHARS) -> str:
    text = text.replace("\r\n", "\n").strip()
    if len(text) <= limit:
        return text
    return text[:text.rfind("\n", 0, limit)].rstrip()


def package_answers(limit: int | None = None) -> list[tuple[str, str, str]]:
    out, seen = [], set()
    for dist in sorted(metadata.distributions(), key=lambda d: (d.metadata.get("Name") or "").lower()):
        name = dist.metadata.get("Name")
        if not name or name.lower() in seen:
            continue
        body = dist.metadata.get_payload() or dist.metadata.get("Description") or ""
        ctype = (dist.metadata.get("Description-Content-Type") or "").lower()
        if "markdown" not in ctype or len(body) < 400:
            continue   # reStructuredText lists and headings do not follow the Markdown rules
        seen.add(name.lower())
        out.append((f"pkg/{name}", f"What is the Python package {name} and how is it used?", _cut(body)))
        if limit and len(out) >= limit:
            break
    return out


def model_answers(llm, limit: int = 16, max_tokens: int = 256) -> list[tuple[str, str, str]]:
    from ..bench.chat_tasks import chat
    from ..sampling.params import SamplingParams

    tasks = chat()[:limit]
    outs = llm.chat([t.messages for t in tasks], SamplingParams(temperature=0, max_tokens=max_tokens))
    return [(f"model/{t.task_id}", t.messages[-1]["content"], o.text.strip()) for t, o in zip(tasks, outs)]


def user_answers(path: str | Path) -> list[tuple[str, str, str]]:
    """(f"user/{line}", prompt, answer) for each non-blank line of a JSONL file; the answer is
    taken as written (no cut: the user chose it). A bad line is a one-line ConfigError naming
    the line and the field."""
    from ..errors import ConfigError

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"--user-data: {str(path)!r} is not a file; give a JSONL file of "
                          '{"prompt": ..., "answer": ...} lines', param="user_data")
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        where = f"--user-data {path}: line {n}"
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{where} is not JSON ({e.msg}); each line is "
                              '{"prompt": ..., "answer": ...}', param="user_data") from None
        if not isinstance(rec, dict):
            raise ConfigError(f"{where} is a JSON {type(rec).__name__}, not an object with "
                              '"prompt" and "answer"', param="user_data")
        for key in ("prompt", "answer"):
            if key not in rec:
                raise ConfigError(f"{where}: missing field {key!r}", param="user_data")
            if not isinstance(rec[key], str) or not rec[key].strip():
                raise ConfigError(f"{where}: field {key!r} must be a non-empty string", param="user_data")
        out.append((f"user/{n}", rec["prompt"], rec["answer"]))
    if not out:
        raise ConfigError(f"--user-data {path}: no lines; each line is " '{"prompt": ..., "answer": ...}',
                          param="user_data")
    return out

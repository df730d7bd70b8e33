"""Plain answers to extract parallel structure from, all local (no downloads):
- "packages": installed distributions' long descriptions (their README, Markdown with lists and
  headed sections), as answers to "What is the Python package X and how is it used?";
- "model": the bundled model's own greedy answers to the bench's chat prompts (chat_tasks.py).
Each yields (id, question, answer) triples for extract.Pipeline.
"""
from __future__ import annotations

from importlib import metadata

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

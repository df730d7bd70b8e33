"""Plain answers to extract parallel structure from, all local (no downloads):
- "packages": installed distributions' long descriptions (their README, Markdown with lists and
  headed sections), in pieces that fit the training length, as answers to "What is the Python
  package X and how is it used?" and questions about the section a piece starts with;
- "model": the bundled model's own greedy answers to the bench's chat prompts (chat_tasks.py);
- "user": a JSONL file of {"prompt": ..., "answer": ...} lines (`user_answers`).
Each yields (id, question, answer) triples for pipeline.Pipeline.
"""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path
from typing import Callable

from .extract import FENCE, HEADING

MAX_CHARS = (
    2400  # an answer is cut at the last line break before this (the paper's 8k-token cap, scaled)
)
MAX_CHUNKS = 8  # pieces per README, so that a few long READMEs do not make up most of the data
ANSWER_TOKENS = (
    256  # a README piece's budget: train's max_len (384) less the chat prompt and the markup
)


def _cut(text: str, limit: int = MAX_CHARS) -> str:
    text = text.replace("\r\n", "\n").strip()
    if len(text) <= limit:
        return text
    return text[: text.rfind("\n", 0, limit)].rstrip()


def _sections(text: str) -> list[list[str]]:
    """The text's lines, cut before each Markdown heading outside a code fence."""
    out: list[list[str]] = [[]]
    fenced = False
    for line in text.split("\n"):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and HEADING.match(line) and out[-1]:
            out.append([])
        out[-1].append(line)
    return out


def _chunks(text: str, count: Callable[[str], int], max_tokens: int) -> list[str]:
    """Consecutive sections packed into pieces of at most max_tokens (a longer section is cut at
    the last line that fits outside a code fence), so that an answer fits the training length.
    A piece's cost is its lines' counts plus one per line break (at least what a tokenizer makes
    of the joined text, since it merges across breaks; exact for `len`)."""
    out: list[str] = []
    cur: list[str] = []
    spent = -1
    for sec in _sections(text):
        costs = [count(ln) + 1 for ln in sec]
        while sum(costs) - 1 > max_tokens:  # cut a long section
            n, total = 0, -1
            while n < len(sec) and total + costs[n] <= max_tokens:
                total += costs[n]
                n += 1
            closed = [
                k for k in range(n, 0, -1) if sum(bool(FENCE.match(ln)) for ln in sec[:k]) % 2 == 0
            ]
            # a single line over the budget is a piece of its own
            n = max(1, closed[0] if closed else n)
            if cur:
                out.append("\n".join(cur))
                cur, spent = [], -1
            out.append("\n".join(sec[:n]))
            sec, costs = sec[n:], costs[n:]
        if cur and spent + sum(costs) > max_tokens:
            out.append("\n".join(cur))
            cur, spent = [], -1
        cur += sec
        spent += sum(costs)
    out.append("\n".join(cur))
    return [c.strip("\n") for c in out if c.strip()]


def package_answers(
    limit: int | None = None,
    count: Callable[[str], int] | None = None,
    max_tokens: int | None = ANSWER_TOKENS,
) -> list[tuple[str, str, str]]:
    """The README's first MAX_CHUNKS pieces of at most max_tokens tokens (`count`, default chars /
    4), cut at headings outside code fences, each its own answer: the first to "What is ...", the
    others to a question naming the section they start with. max_tokens=None: one answer per
    README, cut at MAX_CHARS (most then exceed the training length)."""
    out, seen = [], set()
    for dist in sorted(
        metadata.distributions(), key=lambda d: (d.metadata.get("Name") or "").lower()
    ):
        name = dist.metadata.get("Name")
        if not name or name.lower() in seen:
            continue
        body = dist.metadata.get_payload() or dist.metadata.get("Description") or ""
        ctype = (dist.metadata.get("Description-Content-Type") or "").lower()
        if "markdown" not in ctype or len(body) < 400:
            continue  # reStructuredText lists and headings do not follow the Markdown rules
        seen.add(name.lower())
        question = f"What is the Python package {name} and how is it used?"
        if max_tokens is None:
            out.append((f"pkg/{name}", question, _cut(body)))
        else:
            body = body.replace("\r\n", "\n").strip()
            for k, piece in enumerate(
                _chunks(body, count or (lambda s: len(s) // 4), max_tokens)[:MAX_CHUNKS]
            ):
                head = HEADING.match(piece.split("\n", 1)[0])
                q = (
                    question
                    if k == 0
                    else f"What does the {head.group(1).strip(' #*')!r} part of the Python "
                    f"package {name}'s documentation say?"
                    if head
                    else f"What more does the documentation of the Python package {name} say (part {k + 1})?"
                )
                out.append((f"pkg/{name}" + (f"#{k}" if k else ""), q, piece))
        if limit and len(out) >= limit:
            break
    return out


def model_answers(llm, limit: int = 16, max_tokens: int = 256) -> list[tuple[str, str, str]]:
    """The model's own greedy answers to up to `limit` bench chat prompts, leaving out those the
    evaluation uses (eval_prompts.chat_prompts) and answers that loop or hit `max_tokens`: the
    base model's behaviour as training data (self-distillation), which keeps a fine-tune close to
    it on ordinary requests and, as serial examples, teaches when not to branch."""
    from ..bench.chat_tasks import chat
    from ..sampling.params import SamplingParams
    from .eval_prompts import chat_prompts
    from .eval_stats import degenerate

    held = {e.prompt for e in chat_prompts()}
    tasks = [t for t in chat() if t.messages[-1]["content"] not in held][:limit]
    outs = llm.chat(
        [t.messages for t in tasks], SamplingParams(temperature=0, max_tokens=max_tokens)
    )
    return [
        (f"model/{t.task_id}", t.messages[-1]["content"], o.text.strip())
        for t, o in zip(tasks, outs)
        if o.outputs[0].finish_reason == "stop" and o.text.strip() and not degenerate(o.text)
    ]


def user_answers(path: str | Path, flag: str = "--user-data") -> list[tuple[str, str, str]]:
    """(f"user/{line}", prompt, answer) for each non-blank line of a JSONL file; the answer is
    taken as written (no cut: the user chose it). A bad line is a one-line ConfigError naming
    the line and the field."""
    from ..errors import ConfigError

    path = Path(path)
    if not path.is_file():
        raise ConfigError(
            f"{flag}: {str(path)!r} is not a file; give a JSONL file of "
            '{"prompt": ..., "answer": ...} lines',
            param="user_data",
        )
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        where = f"{flag} {path}: line {n}"
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise ConfigError(
                f'{where} is not JSON ({e.msg}); each line is {{"prompt": ..., "answer": ...}}',
                param="user_data",
            ) from None
        if not isinstance(rec, dict):
            raise ConfigError(
                f'{where} is a JSON {type(rec).__name__}, not an object with "prompt" and "answer"',
                param="user_data",
            )
        for key in ("prompt", "answer"):
            if key not in rec:
                raise ConfigError(f"{where}: missing field {key!r}", param="user_data")
            if not isinstance(rec[key], str) or not rec[key].strip():
                raise ConfigError(
                    f"{where}: field {key!r} must be a non-empty string", param="user_data"
                )
        out.append((f"user/{n}", rec["prompt"], rec["answer"]))
    if not out:
        raise ConfigError(
            f'{flag} {path}: no lines; each line is {{"prompt": ..., "answer": ...}}',
            param="user_data",
        )
    return out


def token_counter(llm):
    """Token counts with the bundled model's tokenizer (no weights loaded when there is no llm)."""
    if llm is not None:
        return lambda s: len(llm.tokenizer.encode(s))
    import torch

    from ..errors import ModelLoadError
    from ..model.loader import load_model
    from ..model.tokenizer import Tokenizer

    try:
        tok = Tokenizer.from_source(
            load_model("default", torch.float32, keep_quantized=True).tokenizer_source
        )
    except ModelLoadError:  # no bundled model: characters / 4, as pipeline.Pipeline's default
        return lambda s: len(s) // 4
    return lambda s: len(tok.encode(s))

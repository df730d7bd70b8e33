"""The ``chat`` task set: open chat and instruction prompts, the opening user turns of the English
dialogs in the `chatterbot-corpus` package (BSD-3-Clause); without it, "explain <topic>" for each
topic of the Python language reference."""

from __future__ import annotations

import re
from importlib import metadata, resources

from .task import PY, Task, user_turn

# Dialog files whose openers are questions or requests; greetings, banter and one-line trivia are left out.
_CHATTERBOT_FILES = (
    "ai",
    "coding",
    "computers",
    "history",
    "literature",
    "politics",
    "science",
    "tech_support",
)
# Of those openers, keep questions and requests (and "my X is broken" reports), but not remarks to the
# bot about itself ("are you sentient", "you are arrogant"): a chat model answers those in a line.
_ASKS = re.compile(
    r"^(what|who|why|how|when|where|which|is|are|do|does|did|can|could|will|would|should|"
    r"tell|explain|describe|write|make|build|name|list|give|my)\b|\?$",
    re.I,
)
_TO_THE_BOT = re.compile(
    r"^(?!(can|could) you (write|build|add|use|do|make|explain|tell|give|show|list)\b)"
    r".*\byou(r|rs|rself)?\b",
    re.I,
)


def chat() -> list[Task]:
    return _chat_from_chatterbot() or _chat_from_reference()


def _chat_from_chatterbot() -> list[Task]:
    try:
        import yaml

        root = resources.files("chatterbot_corpus") / "data" / "english"
        version = metadata.version("chatterbot-corpus")
    except (ImportError, metadata.PackageNotFoundError):
        return []
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    tasks = []
    for cat in _CHATTERBOT_FILES:
        f = root / f"{cat}.yml"
        if not f.is_file():
            continue
        seen: set[str] = set()
        for conv in (
            yaml.load(f.read_text(encoding="utf-8"), Loader=loader).get("conversations") or []
        ):
            # Only each dialog's opening user turn: later turns answer the corpus's own bot replies.
            q = conv[0].strip() if conv and isinstance(conv[0], str) else ""
            if (
                len(q.split()) < 3
                or not _ASKS.search(q)
                or _TO_THE_BOT.search(q)
                or q.casefold() in seen
            ):
                continue
            seen.add(q.casefold())
            tasks.append(
                Task(
                    "chat",
                    f"{cat}/{len(seen) - 1:03d}",
                    None,
                    user_turn(q),
                    256,
                    f"chatterbot-corpus {version}, english/{cat}.yml (BSD-3-Clause)",
                )
            )
    return tasks


def _chat_from_reference() -> list[Task]:
    """Fallback without chatterbot-corpus: "explain <topic>" for each language-reference topic title."""
    from pydoc_data.topics import topics

    tasks, seen = [], set()
    for key in sorted(topics):
        title = topics[key].split("\n", 1)[0].strip()
        if title.casefold() in seen:
            continue
        seen.add(title.casefold())
        title = "the" + title[3:] if title.startswith("The ") else title
        tasks.append(
            Task(
                "chat",
                f"reference/{key}",
                None,
                user_turn(f"Explain {title} in Python, with a short example."),
                256,
                f"Python {PY} language reference, title of topic {key!r} (PSF License)",
            )
        )
    return tasks

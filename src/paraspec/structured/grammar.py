"""Compiling a StructuredOutputsParams into a grammar matcher (llguidance, `paraspec[structured]`).

One LLTokenizer per tokenizer (its token trie takes ~0.5 s to build for a 49k vocabulary): the
server's request checks and the engine's matchers share it. Compiled grammars are kept by their
text (a few dozen, least recently used first out), so a schema checked by the server, or sent
again, is a copy of a matcher rather than a second compile.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import RequestError
from .params import StructuredOutputsParams

if TYPE_CHECKING:
    from ..model.tokenizer import Tokenizer

INSTALL = "pip install 'paraspec[structured]'"
CACHED_GRAMMARS = 64
# JSON the way models most often write it, one spelling only: every key and separator is then
# forced (drafted free); a schema's own "x-guidance" options override these
JSON_DEFAULTS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def _llguidance():
    try:
        import llguidance
    except ImportError:
        raise RequestError(
            f"structured outputs need the llguidance library, which is not installed; {INSTALL}",
            param="structured_outputs",
        ) from None
    return llguidance


def grammar_text(spec: StructuredOutputsParams) -> str:
    """The llguidance grammar for a spec (not yet checked against the tokenizer)."""
    llg = _llguidance()
    kind = spec.kind
    try:
        if kind in ("json", "json_object"):
            schema: Any = {"type": "object"} if kind == "json_object" else spec.json
            if isinstance(schema, str):
                schema = json.loads(schema)
            if not isinstance(schema, dict):
                raise ValueError("the schema must be a JSON object")
            return llg.LLMatcher.grammar_from_json_schema(
                schema, defaults={**JSON_DEFAULTS, "lenient": spec.lenient}
            )
        if kind == "regex":
            return llg.LLMatcher.grammar_from_regex(spec.regex)
        if kind == "choice":
            return llg.LLMatcher.grammar_from_lark(
                "start: " + " | ".join(json.dumps(c) for c in spec.choice)
            )
        text = spec.grammar
        if "::=" in text:  # GBNF (llama.cpp's grammars)
            text = llg.gbnf_to_lark.any_to_lark(text)
        return llg.LLMatcher.grammar_from_lark(text)
    except (ValueError, TypeError, RuntimeError) as e:
        raise RequestError(
            f"the {kind} could not be compiled: {_one_line(e)}", param="structured_outputs"
        ) from None


class GrammarCompiler:
    """Matchers for one tokenizer: compiled once per grammar text, copied per sequence."""

    def __init__(self, tokenizer: Tokenizer, vocab_size: int):
        llg = _llguidance()
        self.vocab_size = vocab_size
        self.eos_ids = sorted(tokenizer.eos_token_ids)
        self.lltok = llg.LLTokenizer(
            tokenizer.backend.to_str(), n_vocab=vocab_size, eos_token=self.eos_ids
        )
        self._templates: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()  # the server's thread and the engine's both compile

    def matcher(self, spec: StructuredOutputsParams):
        """A fresh matcher at the grammar's start; RequestError if it does not compile or admits nothing."""
        text = grammar_text(spec)
        with self._lock:
            template = self._templates.get(text)
            if template is None:
                template = self._compile(text, spec.kind)
                self._templates[text] = template
                while len(self._templates) > CACHED_GRAMMARS:
                    self._templates.popitem(last=False)
            self._templates.move_to_end(text)
            return template.deep_copy()

    def _compile(self, text: str, kind: str):
        llg = _llguidance()
        m = llg.LLMatcher(self.lltok, text, log_level=0)
        if m.is_error():
            raise RequestError(
                f"the {kind} could not be compiled: {_one_line(m.get_error())}",
                param="structured_outputs",
            )
        if not allowed(m, self.vocab_size).any() or m.is_error():  # the first mask finds no way on
            raise RequestError(
                f"the {kind} admits no output at all; relax it", param="structured_outputs"
            )
        return m


def allowed(matcher, vocab_size: int) -> np.ndarray:
    """[vocab] bool: the tokens the grammar allows next."""
    bits = np.unpackbits(
        np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8), bitorder="little"
    )
    return bits[:vocab_size].astype(bool)


_COMPILERS: "weakref.WeakKeyDictionary[Tokenizer, GrammarCompiler]" = weakref.WeakKeyDictionary()
_COMPILERS_LOCK = threading.Lock()


def compiler_for(tokenizer: Tokenizer, vocab_size: int) -> GrammarCompiler:
    """The tokenizer's compiler (a cache on the tokenizer's lifetime: built on the first structured request)."""
    with _COMPILERS_LOCK:
        c = _COMPILERS.get(tokenizer)
        if c is None or c.vocab_size != vocab_size:
            c = _COMPILERS[tokenizer] = GrammarCompiler(tokenizer, vocab_size)
        return c


def _one_line(e: object) -> str:
    text = " ".join(str(e).split())
    return text[:300] + ("..." if len(text) > 300 else "")

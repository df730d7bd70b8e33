"""ASPD training: the training forward equals paraspec's forward under the same mask and positions, LoRA
merges exactly, a few steps on a tiny random model reduce the loss, adapters save/export/load."""
import torch

from paraspec.aspd import synth, train
from paraspec.aspd.hf_folder import write_hf_folder
from paraspec.aspd.lora import LoRALinear, load_adapter, save_adapter
from paraspec.aspd.markup import add_markup_tokens
from paraspec.aspd.train_command import merged_weights
from paraspec.model.loader import load_model
from paraspec.model.tokenizer import Tokenizer
from paraspec.model.transformer import SeqInput, Transformer


def _tiny(tiny_model_dir, rank=4):
    m = load_model(tiny_model_dir(), torch.float32)
    tok = Tokenizer.from_source(m.tokenizer_source)
    n_base = m.weights["tok_embeddings"].shape[0]
    ids = add_markup_tokens(tok, m.weights, m)
    model = train.TrainModel(m.args, m.weights, n_base, rank=rank, alpha=2.0 * rank)
    return m, tok, ids, n_base, model


def test_encode_masks_forced_prefixes_and_uses_the_layout(tiny_model_dir):
    _, tok, ids, _, _ = _tiny(tiny_model_dir)
    ex = synth.generate(1, 2)[0]
    e = train.encode(ex, tok, ids)
    targets = [e.ids[r + 1] for r in e.loss_rows]
    assert ids.end_para not in targets and ids.branch not in targets
    assert ids.para in targets and ids.title in targets and ids.end_branch in targets
    assert not any(e.ids[r] == ids.end_branch for r in e.loss_rows)
    b = [i for i, t in enumerate(e.ids) if t == ids.branch]
    assert len({int(e.positions[i]) for i in b}) == 1          # Same-Seq: every branch starts at p + 1
    assert not e.visible[b[1], b[0]]                           # siblings never see each other
    # each branch as decode.py forces it (<|branch|>, title, ":") and then the BPE of " content"
    title = tok.encode(ex.blocks[0].branches[0].title)
    assert e.ids[b[0]:b[0] + len(title) + 2] == [ids.branch, *title, ids.colon_space[0]]
    end = e.ids.index(ids.end_branch, b[0])
    assert tok.decode(e.ids[b[0] + 1:end]) == ex.blocks[0].branches[0].title + ": " + ex.blocks[0].branches[0].content
    plain = train.encode(ex, tok, None)
    assert tok.decode(plain.ids[-len(plain.loss_rows):]).rstrip("<|im_end|>").endswith(ex.labelled)
    assert plain.positions.tolist() == list(range(len(plain.ids)))


def test_training_forward_equals_paraspec_forward_with_the_branch_mask(tiny_model_dir, tmp_path):
    m, tok, ids, n_base, model = _tiny(tiny_model_dir)
    for mod in model.modules():
        if isinstance(mod, LoRALinear):
            torch.nn.init.normal_(mod.lora_B, std=0.05)
    with torch.no_grad():
        model.new_embed.add_(torch.randn_like(model.new_embed) * 0.1)
    e = train.encode(synth.generate(1, 4)[0], tok, ids)
    with torch.no_grad():
        ref = model.logits(model.hidden(torch.tensor([e.ids]), e.positions[None], e.visible[None]))[0]
    adapter = {k: v.detach() for k, v in model.adapter_tensors().items()}
    weights = merged_weights(m, n_base, adapter, {"alpha": 8.0, "rank": 4})
    # through the exported Hugging Face folder, as --model loads it
    folder = write_hf_folder(tmp_path / "merged", m.args, weights, m.tokenizer_source, with_markup=True)
    back = load_model(folder, torch.float32)
    assert Tokenizer.from_source(back.tokenizer_source).encode("<|para|>") == [ids.para]
    for kernels in ("torch", None):
        from paraspec.model import kernels as ck
        net = Transformer(back.args, back.weights, torch.float32, kernels=ck.choose(kernels) if kernels else None)
        out = net.forward(torch.tensor(e.ids), e.positions, [SeqInput(net.new_cache(len(e.ids)), len(e.ids), e.visible)])
        assert (out - ref).abs().max() < 1e-4


def test_lora_merge_equals_unmerged():
    w = torch.randn(24, 16)
    lin = LoRALinear(w, rank=3, alpha=6.0)
    torch.nn.init.normal_(lin.lora_B)
    x = torch.randn(5, 16)
    assert torch.allclose(lin(x), x @ lin.merged().T, atol=1e-5)
    assert not torch.allclose(lin.merged(), w)


def test_a_few_steps_reduce_the_loss_and_adapters_round_trip(tiny_model_dir, tmp_path):
    _, tok, ids, n_base, model = _tiny(tiny_model_dir, rank=8)
    data = [train.encode(ex, tok, ids) for ex in synth.generate(4, 9)]
    before = train.loss_on(model, data).item()
    stats = train.fit(model, data, train.TrainConfig(epochs=10, batch=4, lr=1e-2, max_minutes=30), log=lambda m: None)
    after = train.loss_on(model, data).item()
    assert stats["steps"] == 10 and after < before - 0.5, (before, after, stats)
    save_adapter(tmp_path / "a.safetensors", model.adapter_tensors(), {"rank": 8, "alpha": 16.0})
    tensors, meta = load_adapter(tmp_path / "a.safetensors")
    assert meta == {"rank": 8, "alpha": 16.0} and tensors["new_embed"].shape == (6, model.args.dim)
    assert torch.allclose(tensors["layers.0.wqkv.lora_B"], model.layers[0].wqkv.lora_B.detach(), atol=1e-3)
    # the six new rows trained too (tied: input and output rows)
    assert not torch.allclose(model.new_embed.detach(), model.base_embed.mean(0).expand(6, -1))

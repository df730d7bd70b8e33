"""`paraspec aspd build-data --sources sharegpt`: real ShareGPT answers as ASPD examples, on a slice of
the fetched file (plus a chat that asks an MT-Bench question and a held-out chat that repeats a training
question): split by chat, MT-Bench never in training, every example within the training length, the
serial examples down-sampled to the block share, bad files refused in one line."""

import json
import math
import random

import pytest

from paraspec import catalog
from paraspec.aspd import data, sharegpt, train
from paraspec.aspd.data import Example
from paraspec.aspd.markup import to_plain
from paraspec.cli import main
from paraspec.datasets import mtbench_questions, sharegpt_conversations, split_of

SHARE = 0.44


def _need(*names):
    from kernel_paths import on_ci

    missing = [n for n in names if not catalog.is_fetched(n)]
    if missing and not on_ci():
        pytest.skip(
            f"{' and '.join(missing)} not fetched: run `paraspec fetch {' '.join(missing)}`"
        )


def _chat_id(split: str, stem: str) -> str:
    return next(f"{stem}{k}" for k in range(1000) if split_of(f"{stem}{k}") == split)


def _element(cid: str, turns: list[tuple[str, str]]) -> dict:
    return {"id": f"{cid}_0", "conversations": [{"from": f, "value": v} for f, v in turns]}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One build on ~160 train-split and ~60 eval-split chats of the real file, and the slice's chats."""
    _need("sharegpt", "mtbench")
    tmp = tmp_path_factory.mktemp("sharegpt")
    convs, want = [], {"train": 160, "eval": 60}
    for c in sharegpt_conversations():
        s = split_of(c.chat_id)
        if want.get(s, 0) > 0:
            want[s] -= 1
            convs.append(c)
        if not any(want.values()):
            break
    roles = {"user": "human", "assistant": "gpt", "system": "system"}
    elements = [
        {
            "id": c.id,
            "conversations": [
                {"from": roles[m["role"]], "value": m["content"]} for m in c.messages
            ],
        }
        for c in convs
    ]
    mt = mtbench_questions()[3].turns[0]
    train_q = next(
        m["content"]
        for c in convs
        if split_of(c.chat_id) == "train"
        for m in c.messages
        if m["role"] == "user" and len(m["content"]) > 60
    )
    topics = ("Price", "Quality", "Support", "Warranty", "Delivery", "Reviews", "Returns", "Extras")
    # a block the rule judge accepts: in training unless MT-Bench keeps it out
    long_answer = "Here is what I would look at when choosing one.\n" + "".join(
        f"- **{t}**: how the {t.lower()} compares across the options you have, and what it means for you.\n"
        for t in topics
    )
    elements += [
        _element(
            _chat_id("train", "mtbench-in-train-"),
            [
                ("human", "Hi there."),
                ("gpt", "Hello! How can I help?"),
                ("human", mt.lower().rstrip(".?!") + "?? Thanks!"),
                ("gpt", long_answer),
            ],
        ),
        _element(_chat_id("eval", "repeat-in-eval-"), [("human", train_q), ("gpt", long_answer)]),
    ]
    path = tmp / "slice.json"
    path.write_text(json.dumps(elements))
    out = tmp / "out"
    assert (
        main(
            [
                "aspd",
                "build-data",
                "--out",
                str(out),
                "--sources",
                "sharegpt",
                "--sharegpt",
                str(path),
                "--train",
                "20",
                "--heldout",
                "4",
                "--sharegpt-heldout",
                "25",
                "--block-share",
                str(SHARE),
            ]
        )
        == 0
    )
    return out, {c.id: c for c in sharegpt_conversations(path)}, mt


def _chat(ex: Example) -> str:
    return ex.id.split("/", 1)[1].rsplit("#", 1)[0].rsplit("_", 1)[0]


def test_stage_counts_and_the_mix_are_reported(built, capsys):
    out, _, _ = built
    s = json.loads((out / "summary.json").read_text())
    sg = s["extraction"]["by_source"]["sharegpt"]
    assert list(sg)[:8] == [
        "input",
        "parsed",
        "min_length",
        "format",
        "integrity",
        "independence",
        "consistency",
        "selected",
    ]
    assert sg["input"] == sg["selected"] + sg["serial"] > 0 and sg["skipped"]["mtbench"] == 2
    exs = data.read_jsonl(out / "extracted.jsonl")
    train_set = data.read_jsonl(out / "train.jsonl") + exs
    blocks = sum(bool(e.blocks) for e in train_set)
    m = s["mix"]
    assert m["examples"] == len(train_set) and m["block"] == blocks and m["target"] == SHARE
    assert m["serial_kept"] == min(
        m["serial_available"], math.floor(blocks * (1 - SHARE) / SHARE + 1e-9)
    )
    assert (
        sg["written"]
        == sum(e.source == "sharegpt" for e in exs)
        == sg["selected"] - sg["skipped"]["markup_too_long"] + m["serial_kept"]
    )
    assert (
        s["sharegpt_heldout"]["written"] == len(data.read_jsonl(out / "heldout_sharegpt.jsonl")) > 0
    )


def test_no_chat_in_both_splits_and_no_mtbench_question_in_training(built):
    out, convs, _ = built
    train_exs = [e for e in data.read_jsonl(out / "extracted.jsonl") if e.source == "sharegpt"]
    held = data.read_jsonl(out / "heldout_sharegpt.jsonl")
    assert train_exs and held
    assert not {_chat(e) for e in train_exs} & {_chat(e) for e in held}
    assert {split_of(_chat(e)) for e in train_exs} == {"train"}
    assert {split_of(_chat(e)) for e in held} == {"eval"}
    assert len({_chat(e) for e in held}) == len(held)  # one turn per held-out chat
    mt = {sharegpt.normalise(t) for q in mtbench_questions() for t in q.turns}
    for e in train_exs:
        for text in [e.prompt] + [m["content"] for m in e.history]:
            norm = sharegpt.normalise(text)
            assert not any(q in norm for q in mt), e.id
    assert not any(_chat(e).startswith("mtbench-in-train-") for e in train_exs)
    # the eval chat that repeats a training question is not held out
    assert not any(_chat(e).startswith("repeat-in-eval-") for e in held)
    assert (
        json.loads((out / "summary.json").read_text())["sharegpt_heldout"]["skipped"]["in_train"]
        >= 1
    )
    seen = {
        sharegpt.normalise(m["content"])
        for c in convs.values()
        if split_of(c.chat_id) == "train"
        for m in c.messages
        if m["role"] == "user"
    }
    assert not any(sharegpt.normalise(e.prompt) in seen for e in held)


def test_examples_are_the_chat_up_to_the_answer_and_fit_the_training_length(built):
    from paraspec.aspd.train_command import base

    out, convs, _ = built
    exs = [e for e in data.read_jsonl(out / "extracted.jsonl") if e.source == "sharegpt"]
    exs += data.read_jsonl(out / "heldout_sharegpt.jsonl")
    _, tok, ids, _ = base()
    for e in exs:
        conv_id, k = e.id.split("/", 1)[1].rsplit("#", 1)
        msgs = convs[conv_id].messages
        k = int(k)
        assert msgs[k]["role"] == "assistant" and e.plain == msgs[k]["content"].strip()
        assert e.prompt == msgs[k - 1]["content"].strip()
        assert e.history == list(msgs[k - 1 - len(e.history) : k - 1])  # the latest whole turns
        assert to_plain(e.aspd) == e.plain and (e.aspd == e.plain) == (not e.blocks)
        assert e.family == ("extracted" if e.blocks else "serial")
        enc = train.encode(e, tok, ids)  # train's own filter: ASPD's encoding and the control's fit
        assert len(enc.ids) <= 384 and len(train.encode(e, tok, None).ids) <= 384
        assert enc.ids[: len(tok.encode_chat(e.messages))] == tok.encode_chat(e.messages)
    assert (
        any(e.history for e in exs)
        and any(e.blocks for e in exs)
        and any(not e.blocks for e in exs)
    )


def test_history_keeps_the_latest_whole_turns_that_fit():
    b = sharegpt.Budget(60, len, lambda ms: sum(len(m["content"]) + 2 for m in ms))
    hist = tuple(
        {"role": r, "content": c}
        for r, c in (
            ("user", "a" * 30),
            ("assistant", "b" * 8),
            ("user", "c" * 6),
            ("assistant", "d" * 10),
        )
    )
    t = sharegpt.Turn("sharegpt/x_0#5", "x", hist, "q" * 10, "z" * 20)
    assert b.fits_plain(t)
    # 60 - 18 - 12 leaves 30: the last three (10 + 8 + 12)
    assert b.history(t, 18) == list(hist[1:])
    gap = (hist[0], {"role": "assistant", "content": "f" * 30}, *hist[2:])
    # a misfit ends it
    assert b.history(sharegpt.Turn("y", "x", gap, "q" * 10, "z"), 18) == list(hist[2:])
    assert b.history(t, 40) == []  # 8 left: not even the last turn
    assert b.history(t, 50) is None  # the question itself does not fit
    assert not b.fits_plain(sharegpt.Turn("i", "x", (), "q" * 10, "z" * 48))


def test_down_sampling_is_seeded_and_reaches_the_share():
    block = data.Block((data.Branch("A", "a: 1"), data.Branch("B", "b: 2")))
    blk = [Example(f"b{i}", "extracted", "q", ["x", block]) for i in range(10)]
    ser = [Example(f"s{i}", "serial", "q", [f"plain {i}"]) for i in range(100)]
    exs = blk + ser
    random.Random(1).shuffle(exs)
    kept, info = sharegpt.down_sample(exs, 0.4, (5, 0), seed=3)
    assert info == {"serial_available": 100, "serial_kept": 22}  # (10 + 5) * 0.6 / 0.4
    assert [e.id for e in kept] == [e.id for e in exs if e in kept]  # order kept
    assert sum(bool(e.blocks) for e in kept) == 10
    again, _ = sharegpt.down_sample(exs, 0.4, (5, 0), seed=3)
    other, _ = sharegpt.down_sample(exs, 0.4, (5, 0), seed=4)
    assert [e.id for e in again] == [e.id for e in kept] != [e.id for e in other]
    # too few: all kept
    assert sharegpt.down_sample(exs, 0.05, (0, 0), seed=3)[1]["serial_kept"] == 100
    assert sharegpt.down_sample(exs, 1.0, (0, 0), seed=3)[1]["serial_kept"] == 0


@pytest.mark.parametrize(
    "content", [None, b"\xff\xfe\x00garbage", b"not json at all", b'[{"id": 1}]']
)
def test_a_missing_or_broken_sharegpt_file_is_one_line(tmp_path, capsys, content):
    path = tmp_path / "sg.json"
    if content is not None:
        path.write_bytes(content)
    assert (
        main(
            [
                "aspd",
                "build-data",
                "--out",
                str(tmp_path / "o"),
                "--sources",
                "sharegpt",
                "--sharegpt",
                str(path),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(path) in err and "paraspec fetch sharegpt" in err, err
    assert not (tmp_path / "o").exists()


def test_bad_mix_options_are_refused(tmp_path, capsys):
    for flag in (["--block-share", "0"], ["--block-share", "1.5"], ["--sharegpt-turns", "-1"]):
        assert main(["aspd", "build-data", "--out", str(tmp_path), *flag]) == 2
        assert capsys.readouterr().err.count("\n") == 1

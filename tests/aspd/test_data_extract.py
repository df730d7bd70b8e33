"""Extraction of parallel structure from plain answers, its validation stages and judges, the JSONL records,
and `paraspec aspd build-data`."""

import json

import pytest

from paraspec.aspd import data, extract, judge, pipeline, sources, synth
from paraspec.aspd.data import Block, Branch
from paraspec.errors import ConfigError
from paraspec.aspd.markup import to_plain
from paraspec.cli import main

LIST_ANSWER = (
    "Python has several useful built-in types to know about.\n\n"
    "1. **Lists**: ordered, mutable sequences that hold any objects you like.\n"
    "2. **Tuples**: ordered, immutable sequences, handy as dictionary keys.\n"
    "   They are also hashable when their items are.\n\n"
    "3. **Sets**: unordered collections of unique, hashable items.\n\n"
    "Pick the one that matches how the data is used."
)
HEAD_ANSWER = (
    "# Guide\nIntro line.\n## Install\nRun pip install foo to get it.\n"
    "## Usage\nImport foo and call foo.run() with your data.\n### Details\nMore words here.\n"
)


def test_list_split_round_trips_exactly_with_bold_titles():
    cands = extract.split(LIST_ANSWER)
    assert len(cands) == 1
    block = next(s for s in cands[0] if isinstance(s, Block))
    assert [b.title for b in block.branches] == ["Lists", "Tuples", "Sets"]
    assert data.plain_text(cands[0]) == LIST_ANSWER
    assert to_plain(data.aspd_text(cands[0])) == LIST_ANSWER
    assert block.branches[1].content.endswith("are.\n")  # the blank line stays with its item


def test_heading_split_keeps_levels_apart():
    cands = extract.split(HEAD_ANSWER)
    titles = [[b.title for b in s.branches] for c in cands for s in c if isinstance(s, Block)]
    assert titles == [["Install", "Usage"]]
    assert all(data.plain_text(c) == HEAD_ANSWER for c in cands)


def test_rule_judge_rejects_cross_references_and_reused_results():
    rj = judge.RuleJudge()
    ok = Block(
        (
            Branch("a", "Paris is the capital of France."),
            Branch("b", "Rome is the capital of Italy."),
        )
    )
    ref = Block((Branch("a", "Compute 12 times 3."), Branch("b", "Add 5 to the previous result.")))
    reuse = Block((Branch("a", "First, 12 * 3 = 36."), Branch("b", "Adding 5: 36 + 5 = 41.")))
    assert rj.independent("q", "", ok, 3) == [True] * 3
    assert rj.independent("q", "", ref, 3) == [False] * 3
    assert rj.independent("q", "", reuse, 3) == [False] * 3
    # 36 came from the question
    assert rj.independent("what is 36 + 5 and 36 - 5", "", reuse, 1) == [True]
    steps = [
        Block(
            (
                Branch("Clone", "1. Clone the repository."),
                Branch("Enter", f"2. {w} enter its folder."),
            )
        )
        for w in ("Then", "After that,", "**Enter**: then", "Enter: next")
    ]
    assert all(rj.independent("q", "", b, 1) == [False] for b in steps)
    # a sequence word only counts where it opens a later branch: "then as now" inside an item is no order
    later = Block(
        (
            Branch("Paris", "- Paris: France's capital, then as now its largest city."),
            Branch("Rome", "- Rome: Italy's capital."),
        )
    )
    assert rj.independent("q", "", later, 1) == [True]
    assert judge.accept([True, True, True]) and not judge.accept([True, True, False])
    assert judge.accept([True, True, False], unanimous=False) and not judge.accept([])


def test_pipeline_counts_every_stage():
    dependent = (
        "Steps to follow for the computation below, each one in order.\n"
        "- Step one: take 12 and triple it to get 36 as the base value\n"
        "- Step two: add five to the previous result from above to get 41\n"
    ) * 3
    dup = "Some text here to start.\n- same thing here\n- same thing here\n" * 8
    items = [
        ("a", "q", LIST_ANSWER * 4),
        ("b", "q", dependent),
        ("c", "q", dup),
        ("d", "q", "short\n- x\n- y"),
    ]
    pipe = pipeline.Pipeline(judge.RuleJudge(), min_tokens=50)
    out = pipe.run(items)
    c = pipe.counts
    assert c["input"] == 4 and c["selected"] == len(out) == 1
    assert (
        c["parsed"]
        >= c["min_length"]
        >= c["format"]
        >= c["integrity"]
        >= c["independence"]
        >= c["consistency"]
    )
    assert out[0].plain == LIST_ANSWER * 4 and out[0].source == "extract"
    assert c["format"] < c["min_length"]  # the duplicate titles went
    assert c["independence"] < c["integrity"]  # the dependent steps went


def test_llm_judge_votes_with_a_real_model(tiny_model_dir):
    from paraspec.api import LLM

    lj = judge.LLMJudge(LLM(str(tiny_model_dir()), dtype="float32"))
    votes = lj.independent("q", "", Block((Branch("a", "one thing"), Branch("b", "another"))), 3)
    assert len(votes) == 3 and all(isinstance(v, bool) for v in votes)
    both = judge.BothJudges(lj)
    # the rules reject: no model call needed
    assert both.consistent("q", "x", ["y"], 2) == [
        False,
        False,
    ]


def test_examples_round_trip_through_jsonl(tmp_path):
    exs = synth.generate(5, 1)
    data.write_jsonl(tmp_path / "x.jsonl", exs)
    back = data.read_jsonl(tmp_path / "x.jsonl")
    assert [e.to_json() for e in back] == [e.to_json() for e in exs]
    m = data.parallel_metrics(exs[0].segments)
    assert 0 < m["dp"] <= 1 and m["abn"] >= 2 and 0 < m["ape"] < 1


def test_build_data_cli_writes_jsonl_and_stage_counts(tmp_path, capsys):
    assert (
        main(
            [
                "aspd",
                "build-data",
                "--out",
                str(tmp_path),
                "--train",
                "20",
                "--heldout",
                "5",
                "--sources",
                "packages",
            ]
        )
        == 0
    )
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["synthetic"]["train"] == 20 and summary["synthetic"]["heldout"] == 5
    assert list(summary["extraction"]["stages"]) == list(extract.STAGES)
    assert (
        summary["extraction"]["by_source"]["packages"]["input"]
        == summary["extraction"]["stages"]["input"]
    )
    out = capsys.readouterr().out
    assert "extraction (rule): input" in out
    rec = json.loads((tmp_path / "train.jsonl").read_text().splitlines()[0])
    assert to_plain(rec["aspd"]) == rec["plain"]
    assert main(["aspd", "build-data", "--out", str(tmp_path), "--sources", "web"]) == 2
    assert "--sources: unknown source 'web'" in capsys.readouterr().err


FENCED = (
    "Intro to the tool, in a few words.\n## Install\nRun this:\n```sh\n# fetch the code\n# build it\n"
    "- not an item\n- nor this\n```\n## Usage\nImport it and call run() on your data.\n## Notes\n"
)


def test_code_fences_hide_headings_and_items_and_a_bare_heading_fails_format():
    cands = extract.split(FENCED)
    titles = [[b.title for b in s.branches] for c in cands for s in c if isinstance(s, Block)]
    # no "# fetch the code" run, no "- not an item" list
    assert titles == [["Install", "Usage", "Notes"]]
    assert (
        data.plain_text(cands[0]) == FENCED
        and extract.consistency_problem(FENCED, cands[0]) is None
    )
    assert not extract.format_ok(cands[0])  # "## Notes" has nothing under it
    assert extract.format_ok(extract.split(FENCED + "Tested on Linux only.")[0])


def test_package_answers_come_in_pieces_that_fit_with_fences_whole():
    count = len  # characters, so that the budget is exact here
    text = "# pkg\nLead.\n" + "".join(
        f"## Part {i}\n" + "word " * 30 + "\n```py\n" + "x = 1\n" * 12 + "```\n" for i in range(6)
    )
    pieces = sources._chunks(text, count, 200)
    assert len(pieces) > 6 and all(count(p) <= 200 for p in pieces)
    assert all(sum(bool(extract.FENCE.match(ln)) for ln in p.split("\n")) % 2 == 0 for p in pieces)
    # nothing lost
    assert [ln for p in pieces for ln in p.split("\n")] == [ln for ln in text.split("\n") if ln]
    assert sources._chunks("one very long line " * 40, count, 50) == ["one very long line " * 40]
    answers = sources.package_answers(limit=6)
    assert answers and all(len(a) // 4 <= sources.ANSWER_TOKENS for _, _, a in answers)


# ------------------------------------------------------------------ integrity and consistency can fail


def _list_candidate() -> list:
    (cand,) = extract.split(LIST_ANSWER)
    return cand


def _with_block(cand: list, block: Block) -> list:
    return [block if isinstance(s, Block) else s for s in cand]


def test_integrity_accepts_the_split_and_rejects_any_changed_character():
    good = _list_candidate()
    assert extract.integrity_problem(LIST_ANSWER, good) is None
    head, block, tail = good
    b0, b1, b2 = block.branches
    changed = _with_block(
        good, Block((Branch(b0.title, b0.content.replace("mutable", "mutabel")), b1, b2))
    )
    # a splitter's strip()
    stripped = _with_block(good, Block((b0, Branch(b1.title, b1.content.rstrip()), b2)))
    assert f"char {LIST_ANSWER.index('mutable') + 5}:" in extract.integrity_problem(
        LIST_ANSWER, changed
    )
    assert extract.integrity_problem(LIST_ANSWER, stripped) is not None
    # a lost newline
    assert extract.integrity_problem(LIST_ANSWER, [head.rstrip("\n"), block, tail]) is not None
    assert extract.integrity_problem(LIST_ANSWER, good[:2]) is not None  # a lost tail


def test_integrity_reads_the_markup_rendering_too():
    # the plain join is exact, but a branch holding markup text does not survive to_plain of the
    # ASPD rendering: training on it would teach an answer the user never reads
    answer = LIST_ANSWER.replace("any objects you like", "a <|/branch|> token as text")
    (cand,) = extract.split(answer)
    assert data.plain_text(cand) == answer
    assert extract.integrity_problem(answer, cand).startswith("to_plain(markup) differs")


def test_consistency_accepts_the_split_and_rejects_each_crafted_structure():
    good = _list_candidate()
    assert extract.consistency_problem(LIST_ANSWER, good) is None
    head, block, tail = good
    b0, b1, b2 = block.branches
    merged = _with_block(good, Block((b0, Branch(b1.title, b1.content + "\n" + b2.content))))
    partial = [head, Block((b0, b1)), "\n" + b2.content + tail]
    shifted = [head + b0.content + "\n", Block((b1, b2)), tail]
    retitled = _with_block(good, Block((Branch("Dicts", b0.content), b1, b2)))
    repeated = _with_block(good, Block((b0, Branch("lists", b1.content), b2)))
    empty = _with_block(good, Block((Branch(" ", b0.content), b1, b2)))
    cut = head.index("to know")  # a block that starts inside a line
    midline = [head[:cut], Block((Branch("to", head[cut:] + b0.content), b1, b2)), tail]
    bad = {
        "merged": merged,
        "partial": partial,
        "shifted": shifted,
        "retitled": retitled,
        "repeated": repeated,
        "empty": empty,
        "midline": midline,
        "two serials": [head[:5], head[5:], block, tail],
        "no block": [LIST_ANSWER],
    }
    for name, cand in bad.items():
        # integrity alone passes every one of them
        assert data.plain_text(cand) == LIST_ANSWER, name
        assert extract.consistency_problem(LIST_ANSWER, cand) is not None, name
        assert judge.RuleJudge().consistent("q", LIST_ANSWER, cand, 2) == [False, False], name
    assert "items at lines [3, 4, 7]" in extract.consistency_problem(LIST_ANSWER, merged)
    assert "items at lines [3, 4, 7]" in extract.consistency_problem(LIST_ANSWER, partial)
    assert "'Dicts' is not restated" in extract.consistency_problem(LIST_ANSWER, retitled)
    assert judge.RuleJudge().consistent("q", LIST_ANSWER, good, 2) == [True, True]


def test_consistency_checks_heading_blocks_against_their_level():
    (good,) = extract.split(HEAD_ANSWER)
    assert extract.consistency_problem(HEAD_ANSWER, good) is None
    head, block, tail = good
    install, usage = block.branches
    # "### Details" as a third branch: the sections at level 2 are two, so the block is not the original's
    usage_only, details = usage.content.split("\n### ")
    three = [
        head,
        Block((install, Branch("Usage", usage_only), Branch("Details", "### " + details))),
        tail,
    ]
    assert data.plain_text(three) == HEAD_ANSWER
    assert extract.consistency_problem(HEAD_ANSWER, three) is not None


def test_pipeline_rejects_a_buggy_splitter_at_integrity_and_a_rewriting_stage_at_consistency():
    answer = LIST_ANSWER * 4

    def strips(text):  # a plausible extraction bug: branch contents stripped of their blank lines
        return [
            [
                s
                if isinstance(s, str)
                else Block(tuple(Branch(b.title, b.content.strip()) for b in s.branches))
                for s in cand
            ]
            for cand in extract.split(text)
        ]

    real = pipeline.Pipeline(judge.RuleJudge(), min_tokens=50)
    assert len(real.run([("a", "q", answer)])) == 1
    buggy = pipeline.Pipeline(judge.RuleJudge(), min_tokens=50, splitter=strips)
    assert buggy.run([("a", "q", answer)]) == []
    assert buggy.counts["format"] == 4 and buggy.counts["integrity"] == 0

    class Rewrites(pipeline.Pipeline):  # a stage after integrity that changes a branch's text
        def _independent(self, question, segments):
            return [
                s
                if isinstance(s, str)
                else Block(
                    (Branch(s.branches[0].title, s.branches[0].content + " "),) + s.branches[1:]
                )
                for s in segments
            ]

    rw = Rewrites(judge.RuleJudge(), min_tokens=50)
    assert rw.run([("a", "q", answer)]) == []
    assert rw.counts["independence"] == 4 and rw.counts["consistency"] == 0


# ------------------------------------------------------------------------------------ user data

PAD = (
    " Each of these is part of the language itself, so no import is needed to use it, and every one"
    " of them supports len(), iteration and membership tests with the in operator."
)
USER_LIST = LIST_ANSWER + PAD * 4
USER_PLAIN = (
    "Python is a general-purpose programming language that favours readable code." + PAD * 5
)
USER_STEPS = (
    "To build the project from source:\n"
    "1. Clone the repository into a new folder on your machine.\n"
    "2. Then enter that folder and create a virtual environment in it.\n"
    "3. After that, install the package into the environment you just made.\n" + PAD * 4
)


def _jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_user_data_runs_through_the_pipeline_and_keeps_plain_answers_serial(tmp_path, capsys):
    f = _jsonl(
        tmp_path / "mine.jsonl",
        [
            {"prompt": "Which built-in types should I know?", "answer": USER_LIST},
            "",
            {"prompt": "What is Python?", "answer": USER_PLAIN},
            {"prompt": "How do I build it?", "answer": USER_STEPS},
        ],
    )
    out = tmp_path / "out"
    assert (
        main(
            [
                "aspd",
                "build-data",
                "--out",
                str(out),
                "--train",
                "3",
                "--heldout",
                "2",
                "--sources",
                "",
                "--user-data",
                str(f),
            ]
        )
        == 0
    )
    recs = [json.loads(line) for line in (out / "extracted.jsonl").read_text().splitlines()]
    assert [(r["id"], r["source"], r["family"]) for r in recs] == [
        ("user/1", "user", "extracted"),
        ("user/3", "user", "serial"),
        ("user/4", "user", "serial"),
    ]
    listed, plain, steps = recs
    assert [b["title"] for b in listed["segments"][1]["branches"]] == ["Lists", "Tuples", "Sets"]
    assert listed["plain"] == USER_LIST and to_plain(listed["aspd"]) == USER_LIST
    assert plain["segments"] == [USER_PLAIN] and plain["aspd"] == USER_PLAIN
    # sequential steps stay serial
    assert steps["plain"] == USER_STEPS and "<|para|>" not in steps["aspd"]
    user = json.loads((out / "summary.json").read_text())["extraction"]["by_source"]["user"]
    assert (
        user["input"] == 3
        and user["selected"] == 1
        and user["serial"] == 2
        and user["written"] == 3
    )
    # the steps' block was judged dependent
    assert user["parsed"] == 2 and user["independence"] == 1
    assert "  user: input 3 -> parsed 2" in capsys.readouterr().out


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"prompt": "p"}', "line 2: missing field 'answer'"),
        ('{"answer": "a"}', "line 2: missing field 'prompt'"),
        ('{"prompt": "", "answer": "a"}', "line 2: field 'prompt' must be a non-empty string"),
        ('{"prompt": "p", "answer": 3}', "line 2: field 'answer' must be a non-empty string"),
        ('{"prompt": "p", "answer": ', "line 2 is not JSON"),
        ('["p", "a"]', "line 2 is a JSON list"),
    ],
)
def test_user_data_bad_line_is_one_config_error_naming_line_and_field(
    tmp_path, capsys, line, message
):
    f = _jsonl(tmp_path / "bad.jsonl", [{"prompt": "p", "answer": "a"}, line])
    with pytest.raises(ConfigError, match=message):
        sources.user_answers(f)
    assert main(["aspd", "build-data", "--out", str(tmp_path / "o"), "--user-data", str(f)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()  # nothing written before the data is read

"""server/json_reader.Section: typed reads that turn every bad value into one problem naming its key."""

from __future__ import annotations

from paraspec.server.json_reader import Section


def read(raw, path: str = "Top") -> tuple[Section, list[str], list[str]]:
    problems: list[str] = []
    notes: list[str] = []
    return Section(path, raw, problems, notes), problems, notes


def test_values_of_the_right_kind_come_back_and_absent_keys_give_the_default():
    s, problems, _ = read({"port": 8080, "timeout": 5, "name": "x", "on": True})
    assert s.get("port", int, 1025, 1024, 65535) == 8080
    assert s.get("timeout", float, 1.0, 0.001, 10) == 5.0 and isinstance(
        s.get("timeout", float, 1.0), float
    )
    assert s.get("name", str, None) == "x" and s.get("on", bool, False) is True
    assert s.get("absent", int, 7) == 7 and problems == []


def test_a_wrong_kind_is_one_problem_naming_the_path_and_the_default():
    s, problems, _ = read({"port": "1025", "count": True, "ratio": "high"})
    assert s.get("port", int, 1025) == 1025
    assert s.get("count", int, 8) == 8  # true/false is not a count
    assert s.get("ratio", float, None) is None
    assert problems == [
        "Top.port='1025' is a JSON string; use a JSON integer (default 1025)",
        "Top.count=True is a JSON boolean; use a JSON integer (default 8)",
        "Top.ratio='high' is a JSON string; use a JSON number",
    ]


def test_out_of_range_names_the_range():
    s, problems, _ = read({"n": 0, "t": 99.5})
    assert s.get("n", int, 8, 1, 256) == 8 and s.get("t", float, 1.0, 0.001, 10) == 1.0
    assert problems == [
        "Top.n=0 is out of range; use an integer from 1 to 256",
        "Top.t=99.5 is out of range; use a number from 0.001 to 10",
    ]


def test_int_as_bool_takes_mindie_zero_and_one():
    s, problems, _ = read({"a": 0, "b": 1, "c": 2})
    assert (
        s.get("a", bool, True, int_as_bool=True) is False
        and s.get("b", bool, False, int_as_bool=True) is True
    )
    assert s.get("c", bool, False, int_as_bool=True) is False and len(problems) == 1


def test_nested_sections_and_sections_that_are_not_objects():
    s, problems, _ = read({"Inner": {"x": "no"}, "Bad": [1]}, path="")
    assert s.section("Inner").get("x", int, 3) == 3
    assert s.section("Bad").get("y", int, 4) == 4
    assert s.section("Absent").get("z", int, 5) == 5  # a missing section reads as {}
    assert problems == [
        "Inner.x='no' is a JSON string; use a JSON integer (default 3)",
        "Bad must be a JSON object, not a JSON array",
    ]


def test_unknown_keys_are_notes_with_a_suggestion_and_known_foreign_keys_are_silent():
    s, problems, notes = read({"maxBatchsize": 4, "tlsCert": "x", "colour": "blue"})
    s.get("maxBatchSize", int, 8)
    s.check_unknown({"tlsCert"})
    assert problems == []
    assert notes == [
        "unknown key 'Top.maxBatchsize' is ignored; did you mean 'maxBatchSize'?",
        "unknown key 'Top.colour' is ignored",
    ]

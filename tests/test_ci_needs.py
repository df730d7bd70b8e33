"""tests/ci_needs.py: a missing tool skips a test locally and fails it under CI=true."""

import pytest

from ci_needs import require


def test_a_missing_tool_fails_on_ci_and_skips_elsewhere(monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(
        pytest.fail.Exception, match=r"^CI=true: /usr/bin/x is missing, .*\(apt-get install x\)$"
    ):
        require(False, "/usr/bin/x", "apt-get install x")
    monkeypatch.setenv("CI", "")
    with pytest.raises(pytest.skip.Exception, match=r"^/usr/bin/x is missing: apt-get install x$"):
        require(False, "/usr/bin/x", "apt-get install x")
    monkeypatch.setenv("CI", "true")
    require(True, "/usr/bin/x", "apt-get install x")  # present: nothing

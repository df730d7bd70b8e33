"""The playground page at `/`: served without a key and fetching nothing from outside; and, in
headless Chromium (Debian's `chromium`; `make test-browser` installs it), a prompt run from the page
whose coloured step spans spell exactly the API's text for the same request.
"""

from __future__ import annotations

import fnmatch
import json
import re
import tomllib
from pathlib import Path

import httpx
import pytest

import chromium
from ci_needs import require
from paraspec import LLM
from paraspec.server import create_app
from paraspec.server.playground import ASSETS as SERVED
from live_server import LiveServer
from test_server import _config  # the tiny server's config (same folder, on sys.path)

ASSETS = {"/": "text/html", "/playground.js": "text/javascript", "/playground.css": "text/css"}
API_KEY = "sk-playground-test"
SPANS_TEXT = (
    "[...document.querySelectorAll('#pane-{} .text .run')].map(e => e.textContent).join('')"
)


@pytest.fixture(scope="module")
def server(tiny_model_dir):
    """A server with an API key (`paraspec serve --api-key`): the page must ask for it."""
    model_dir = tiny_model_dir("llama", n_layers=2, hidden=64)
    app = create_app(LLM(str(model_dir), dtype="float32"), _config(model_dir, api_key=API_KEY))
    with LiveServer(app, api_key=API_KEY) as s:
        yield s


def test_page_is_served_without_a_key_and_fetches_nothing_from_outside(server):
    assert httpx.get(server.url + "/v1/models").status_code == 401
    for path, kind in ASSETS.items():
        r = httpx.get(server.url + path)  # no key
        assert r.status_code == 200 and r.headers["content-type"].startswith(kind), path
        assert "default-src 'none'" in r.headers["content-security-policy"]
        assert "connect-src 'self'" in r.headers["content-security-policy"]
        assert not re.search(r"(https?:)?//[\w.-]+\.\w+/", r.text), f"{path} names another origin"
    page = server.http.get("/").text
    assert 'src="playground.js"' in page and 'href="playground.css"' in page


def test_the_page_ships_as_package_data():
    """Every file of the page is served and matched by pyproject's package-data (else a wheel lacks it)."""
    root = Path(__file__).parents[2]
    folder = root / "src/paraspec/server/playground"
    globs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]
    files = sorted(p.name for p in folder.iterdir())
    assert files == sorted(SERVED)
    assert all(
        any(fnmatch.fnmatch(f"playground/{f}", g) for g in globs["paraspec.server"]) for f in files
    )


def _set_up(browser, mode: str, prompt: str, max_tokens: int, plugin: str) -> None:
    browser.evaluate(f"""(() => {{
        document.querySelector('.tab[data-mode={mode}]').click();
        document.getElementById('prompt').value = {json.dumps(prompt)};
        document.getElementById('max-tokens').value = {max_tokens};
        const plugin = document.getElementById('plugin');
        plugin.value = {json.dumps(plugin)};
        plugin.dispatchEvent(new Event('change'));
    }})()""")


def _run(browser, button: str) -> None:
    browser.evaluate(
        f"document.body.dataset.state = 'clicked'; document.getElementById('{button}').click()"
    )
    state = browser.wait_for(
        "['done', 'error', 'stopped'].includes(document.body.dataset.state) "
        "&& document.body.dataset.state",
        timeout=120,
    )
    assert state == "done", browser.evaluate("document.getElementById('error').textContent")


def _api_text(server, body: dict) -> tuple[str, int]:
    """The same request without the stream, as an OpenAI client gets it: (text, completion tokens)."""
    body = {
        **body,
        "stream": False,
        "paraspec": {"plugin_params": body["paraspec"]["plugin_params"]},
    }
    path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
    response = server.http.post(path, json=body).raise_for_status().json()
    choice = response["choices"][0]
    return choice["message"]["content"] if "messages" in body else choice["text"], response[
        "usage"
    ]["completion_tokens"]


@pytest.fixture
def browser_here():
    require(
        chromium.available(),
        chromium.BINARY,
        "`make test-browser` installs Debian's chromium (apt-get install -y chromium) and runs this test",
    )


def test_a_prompt_run_in_the_browser_draws_the_apis_text_in_step_spans(
    browser_here, server, tmp_path
):
    profile = tmp_path / "profile"
    profile.mkdir()
    with chromium.Chromium(profile) as browser:
        browser.open(server.url + "/")
        # without the key the page loads and says what it needs
        error = browser.wait_for(
            "document.body?.dataset.state === 'ready' && document.getElementById('model')"
            ".textContent === '?' && document.getElementById('error').textContent"
        )
        assert "API key" in error
        assert (
            browser.wait_for("document.getElementById('metrics-status').textContent")
            == "API key needed"
        )
        # a key typed into the page is kept and sent as a Bearer token
        browser.evaluate(
            f"const k = document.getElementById('api-key'); k.value = '{API_KEY}'; "
            "k.dispatchEvent(new Event('change'))"
        )
        assert browser.evaluate("localStorage.getItem('paraspec.apiKey')") == API_KEY
        browser.wait_for("document.getElementById('model').textContent === 'tiny'")
        assert browser.evaluate("document.getElementById('error').hidden")

        for mode, prompt, plugin in [
            ("chat", "hi there", "lookahead"),
            ("chat", "hello", "hybrid"),
            ("completion", "x = [1, 2, 3]\ny =", "memory_decoding"),
        ]:
            _set_up(browser, mode, prompt, 48, plugin)
            _run(browser, "run")
            spans = browser.evaluate(SPANS_TEXT.format("main"))
            body = browser.evaluate("ui.last.body")
            assert body["paraspec"]["plugin_params"]["plugin_type"] == plugin
            text, tokens = _api_text(server, body)
            assert spans and spans == text, mode
            runs = browser.evaluate(
                "[...document.querySelectorAll('#pane-main .run')].map(e => "
                "[+e.dataset.step, +e.dataset.tokens, +e.dataset.accepted])"
            )
            assert runs[0][0] == 0 and all(t == a + 1 for _, t, a in runs[1:])
            shown = browser.evaluate(
                "[...document.querySelectorAll('#pane-main .figures dd')].map(e => e.textContent)"
            )
            assert int(shown[3]) == tokens and shown[0] != "–"  # tokens, tokens/s

        assert any(a > 0 for _, _, a in runs), (
            "memory_decoding accepted no draft on a repetitive output"
        )
        _run(browser, "compare")  # the same request with plugins off, side by side
        assert browser.evaluate(SPANS_TEXT.format("off")) == spans
        assert browser.evaluate("document.getElementById('verdict').dataset.identical") == "true"
        # hovering a run names its step and its draft
        step, tokens, accepted = max(runs, key=lambda r: r[2])
        box = browser.evaluate(
            f"(() => {{ const r = document.querySelector('#pane-main .run[data-step=\"{step}\"]')"
            ".getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()"
        )
        browser.send("Input.dispatchMouseEvent", type="mouseMoved", x=box[0], y=box[1])
        tip = browser.wait_for(
            "!document.getElementById('tip').hidden && document.getElementById('tip').textContent"
        )
        drafted = browser.evaluate(
            f"document.querySelector('#pane-main .run[data-step=\"{step}\"]').dataset.drafted"
        )
        assert (
            f"step {step} · {tokens} tokens" in tip
            and f"{accepted} of {drafted} draft tokens" in tip
        )
        # the server panel read /metrics after the runs
        assert browser.wait_for(
            "+document.querySelector('[data-metric=generated]').textContent.replace(/,/g, '')"
        )
        assert browser.evaluate("document.querySelector('[data-metric=trie]').textContent") not in (
            "0",
            "–",
        )
        shot = browser.screenshot(tmp_path / "playground.png")
        print(f"playground screenshot: {shot}")
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000

        sent = [
            e["params"]["request"]
            for e in browser.events
            if e["method"] == "Network.requestWillBeSent"
        ]
        assert all(r["url"].startswith(server.url) for r in sent), [r["url"] for r in sent]
        posts = [r for r in sent if r["method"] == "POST"]
        assert len(posts) == 4 and all(
            r["headers"].get("Authorization") == f"Bearer {API_KEY}" for r in posts
        )
        # no script error, no CSP violation: only the 401s the page got before it had the key
        problems = browser.problems()
        assert problems and all("status of 401" in p for p in problems), problems


HISTORY_TEXT = (
    "[...document.querySelectorAll('#history li .answer .run')].map(e => e.textContent).join('')"
)


def test_a_conversation_in_the_browser_keeps_its_turns(browser_here, server, tmp_path):
    """Chat runs send every earlier turn; earlier answers stay drawn in their step spans; the last
    turn can be taken back, edited and sent again; a new chat starts from nothing."""
    profile = tmp_path / "profile"
    profile.mkdir()
    with chromium.Chromium(profile) as browser:
        browser.open(server.url + "/")
        browser.wait_for("document.body?.dataset.state === 'ready'")
        browser.evaluate(
            f"const k = document.getElementById('api-key'); k.value = '{API_KEY}'; "
            "k.dispatchEvent(new Event('change'))"
        )
        browser.wait_for("document.getElementById('model').textContent === 'tiny'")
        assert browser.evaluate("document.getElementById('edit-last').disabled")
        _set_up(browser, "chat", "hi there", 24, "memory_decoding")
        _run(browser, "run")
        first = browser.evaluate(SPANS_TEXT.format("main"))
        first_runs = browser.evaluate(
            "[...document.querySelectorAll('#pane-main .text .run')].map(e => e.className)"
        )
        # ready for the next
        assert first and browser.evaluate("document.getElementById('prompt').value") == ""
        browser.evaluate("document.getElementById('prompt').value = 'and again'")
        _run(browser, "run")
        body = browser.evaluate("ui.last.body")
        assert body["messages"] == [
            {"role": "user", "content": "hi there"},
            {"role": "assistant", "content": first},
            {"role": "user", "content": "and again"},
        ]
        assert browser.evaluate(SPANS_TEXT.format("main")) == _api_text(server, body)[0]
        # the first turn moved up, its answer still in its coloured step spans
        assert browser.evaluate(HISTORY_TEXT) == first
        assert (
            browser.evaluate(
                "[...document.querySelectorAll('#history li .answer .run')].map(e => e.className)"
            )
            == first_runs
        )
        assert browser.evaluate(
            "[...document.querySelectorAll('#history .msg.user')].map(e => e.textContent)"
        ) == ["hi there"]
        assert browser.evaluate("document.getElementById('ask').textContent") == "and again"
        assert (
            browser.evaluate("document.getElementById('turns').textContent")
            == "2 turns in this chat"
        )
        # the last turn back into the box, edited and sent again: the first turn stays
        browser.evaluate("document.getElementById('edit-last').click()")
        assert browser.evaluate("document.getElementById('prompt').value") == "and again"
        assert (
            browser.evaluate(SPANS_TEXT.format("main")) == ""
            and browser.evaluate(HISTORY_TEXT) == first
        )
        browser.evaluate("document.getElementById('prompt').value = 'and once more'")
        _run(browser, "run")
        assert [m["content"] for m in browser.evaluate("ui.last.body")["messages"]] == [
            "hi there",
            first,
            "and once more",
        ]
        # a new chat forgets every turn
        browser.evaluate("document.getElementById('clear').click()")
        assert (
            browser.evaluate(HISTORY_TEXT) == ""
            and browser.evaluate("document.getElementById('turns').textContent") == ""
        )
        _set_up(browser, "chat", "fresh start", 8, "memory_decoding")
        _run(browser, "run")
        assert browser.evaluate("ui.last.body")["messages"] == [
            {"role": "user", "content": "fresh start"}
        ]
        # the completion tab has no conversation
        browser.evaluate("document.querySelector('.tab[data-mode=completion]').click()")
        assert not browser.evaluate("document.getElementById('history').checkVisibility()")
        problems = browser.problems()
        assert all("status of 401" in p for p in problems), problems

"""The cases of benchmarks/fuzz_server.py: case number i of seed s is made by its own
random.Random(f"{s}:{i}"), so any case replays alone (`--replay s:i`) whatever ran before it.

A case is an HTTP request (method, path, headers, body bytes) or, for the framing cases, the raw
bytes to write on a socket. Bodies start from a valid request of one endpoint and feature
(completions, chat, responses, tools and tool_choice, response_format, grammars, logprobs, n,
stop, streaming, per-request plugin_params), and a share of them is then broken in one place
(`blame`: the field a 4xx must name): a wrong type or value, a missing field, odd unicode, a
huge value. Others are malformed JSON, huge or long prompts, and malformed HTTP framing.
"""

from __future__ import annotations

import copy
import json
import random
from dataclasses import dataclass, field

TEXT = [
    "hello",
    "def f(x):\n    return",
    "The quick brown fox",
    "1, 2, 3, 4,",
    "<|im_end|>",
    "<|im_start|>assistant",
    '{"a": [1, 2]}',
    "SELECT * FROM t WHERE",
    "Once upon a time",
    "a b a b a b",
]
ODD = [
    "é",
    "中文字",
    "🙂",
    "👩\u200d👩\u200d👧",
    "\u202eevil",
    "\u200b",
    "\ufeff",
    "\x00",
    "\U0010ffff",
    "\ufffd",
    "e\u0301\u0301\u0301",
    "\t\r\n",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "\x7f",
    "\\u0000",
    "%s%n",
    "' OR 1=1 --",
]
JUNK = [
    None,
    True,
    False,
    0,
    -1,
    1,
    2**31,
    2**63,
    -(2**63),
    10**30,
    1e308,
    -0.0,
    1e-46,
    0.5,
    float("nan"),
    float("inf"),
    "",
    "x",
    "4",
    "true",
    "\ud800",
    "\x00",
    [],
    [1],
    ["a", None],
    {},
    {"a": 1},
    {"type": None},
    [[[]]],
]
SCHEMAS = [
    {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name"],
    },
    {"type": "array", "items": {"type": "number"}, "maxItems": 3},
    {"type": "string", "enum": ["yes", "no"]},
    {
        "type": "object",
        "properties": {"a": {"type": "object", "properties": {"b": {"type": "boolean"}}}},
    },
]
GRAMMARS = [
    {"regex": r"\d{4}-\d{2}-\d{2}"},
    {"regex": "(yes|no)"},
    {"choice": ["red", "green", "blue"]},
    {"lark": 'start: "a" "b"+'},
    {"gbnf": 'root ::= "x" [0-9]+'},
]
BAD_GRAMMARS = [
    {"regex": "(unclosed"},
    {"choice": []},
    {"lark": "start: undefined_rule"},
    {"gbnf": "root ::= "},
    {"regex": 7},
    {"xml": "<a/>"},
    {"regex": "a", "choice": ["a"]},
]
BAD_FORMATS = [
    {"type": "xml"},
    {"type": "json_schema"},
    {"type": "json_schema", "json_schema": {"schema": []}},
    {"type": "json_schema", "json_schema": {"name": 3, "schema": {}}},
    {
        "type": "json_schema",
        "json_schema": {
            "schema": {"type": "object", "minProperties": 3, "maxProperties": 1},
            "strict": True,
        },
    },
    {"type": "json_schema", "json_schema": {"schema": {"$ref": "#/nope"}}},
    {"type": "json_schema", "json_schema": {"schema": {"type": "string", "pattern": "(["}}},
    {"type": "json_schema", "json_schema": {"schema": {"type": "integer"}, "strict": "yes"}},
]
PLUGINS = [
    {"plugin_type": "memory_decoding", "decoding_length": 8},
    {"plugin_type": "lookahead", "level": 3},
    {"plugin_type": "hybrid"},
    "none",
    {"plugin_type": "none"},
    '{"plugin_type": "memory_decoding"}',
    {"plugin_type": "memory_decoding", "dynamic_algo": True, "mode": "chain"},
]
BAD_PLUGINS = [
    {"plugin_type": "warp"},
    {"plugin_type": "memory_decoding", "decoding_length": 99},
    {"plugin_type": "lookahead", "level": 1},
    "{not json",
    {"plugin_type": 3},
    {"plugin_type": "memory_decoding", "decoding_length": "8"},
    ["memory_decoding"],
]
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOL = {
    "type": "function",
    "function": {"name": "get_weather", "description": "Weather of a city", "parameters": CITY},
}
PATHS = {
    "completion": "/v1/completions",
    "chat": "/v1/chat/completions",
    "tools": "/v1/chat/completions",
    "responses": "/v1/responses",
}


@dataclass
class Case:
    seed: int
    index: int
    kind: str
    method: str = "POST"
    path: str = "/v1/completions"
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=lambda: {"content-type": "application/json"})
    raw: bytes | None = None  # framing cases: written as is on a new connection
    blame: str | None = None  # the field a 4xx answer must name
    stream: bool = False
    stalls: bool = False  # a framing case whose body never completes (answered at bodyTimeout)
    cut: bool = False  # a stream the client closes after its first event

    @property
    def replay(self) -> str:
        return f"{self.seed}:{self.index}"

    def describe(self, limit: int = 600) -> str:
        what = self.raw if self.raw is not None else self.body or b""
        shown = what[:limit].decode("utf-8", "backslashreplace") + (
            "..." if len(what) > limit else ""
        )
        cut = " (closed after its first event)" if self.cut else ""
        return f"[{self.kind}] {self.method} {self.path} blame={self.blame}{cut}: {shown}"


def _text(r: random.Random, odd: float = 0.15) -> str:
    parts = [r.choice(ODD) if r.random() < odd else r.choice(TEXT) for _ in range(r.randint(1, 3))]
    return " ".join(parts)


def _sampling(r: random.Random, body: dict, chat: bool) -> None:
    """A few of the sampling fields, with plausible values (edge values included)."""
    options = {
        "temperature": lambda: r.choice([0, 0, 0.7, 1.3, 1e-5]),
        "top_p": lambda: r.choice([1.0, 0.9, 1e-9]),
        "top_k": lambda: r.choice([0, 1, 40, -1]),
        "min_p": lambda: r.choice([0.0, 0.05]),
        "seed": lambda: r.randint(0, 2**32),
        "n": lambda: r.choice([1, 1, 2, 3]),
        "stop": lambda: r.choice(["\n", ["a", "b"], [_text(r, 0.5)[:6] or "z"], "。"]),
        "stop_token_ids": lambda: [r.randint(0, 200)],
        "ignore_eos": lambda: r.random() < 0.5,
        "repetition_penalty": lambda: r.choice([1.0, 1.3]),
        "presence_penalty": lambda: r.choice([0, 0.5]),
        "frequency_penalty": lambda: r.choice([0, -0.5]),
        "user": lambda: _text(r),
        "include_stop_str_in_output": lambda: r.random() < 0.5,
        "skip_special_tokens": lambda: r.random() < 0.5,
        "paraspec": lambda: {"plugin_params": r.choice(PLUGINS)},
    }
    if chat:
        options |= {
            "logprobs": lambda: True,
            "top_logprobs": lambda: r.randint(0, 5),
            "max_completion_tokens": lambda: r.randint(1, 12),
        }
    else:
        options |= {
            "logprobs": lambda: r.randint(0, 5),
            "echo": lambda: r.random() < 0.5,
            "suffix": lambda: r.choice([None, ""]),
        }
    for name in r.sample(sorted(options), r.randint(0, 5)):
        body[name] = options[name]()
    if "top_logprobs" in body:
        body["logprobs"] = True
    if body.get("echo") and body.get("logprobs") is not None:
        del body["echo"]  # (refused together: no prompt log-probabilities)
    if body.get("stream") is None and r.random() < 0.35:
        body["stream"] = True
        if r.random() < 0.5:
            body["stream_options"] = {"include_usage": r.random() < 0.7}
        if r.random() < 0.2:
            body.setdefault("paraspec", {})["stream_steps"] = True


def _messages(r: random.Random) -> list[dict]:
    out: list[dict] = []
    if r.random() < 0.4:
        out.append({"role": r.choice(["system", "developer"]), "content": _text(r)})
    for _ in range(r.choice([0, 0, 1, 2])):
        out += [{"role": "user", "content": _text(r)}, {"role": "assistant", "content": _text(r)}]
    content = _text(r) if r.random() < 0.8 else [{"type": "text", "text": _text(r)}]
    return out + [{"role": "user", "content": content}]


def completion(r: random.Random) -> tuple[str, dict]:
    prompt = r.choice(
        [
            lambda: _text(r),
            lambda: [_text(r) for _ in range(r.randint(1, 3))],
            lambda: [r.randint(0, 200) for _ in range(r.randint(1, 12))],
            lambda: [[r.randint(0, 200)] * r.randint(1, 5), [r.randint(0, 200)]],
        ]
    )()
    body = {"prompt": prompt, "max_tokens": r.randint(1, 16)}
    _sampling(r, body, chat=False)
    return "completion", body


def chat(r: random.Random) -> tuple[str, dict]:
    body = {"messages": _messages(r), "max_tokens": r.randint(1, 16)}
    _sampling(r, body, chat=True)
    return "chat", body


def tools(r: random.Random) -> tuple[str, dict]:
    _, body = chat(r)
    second = {**TOOL, "function": {**TOOL["function"], "name": "f2"}}
    body["tools"] = [TOOL] if r.random() < 0.7 else [TOOL, second]
    named = {"type": "function", "function": {"name": "get_weather"}}
    body["tool_choice"] = r.choice(["auto", "none", "required", named, None])
    body["max_tokens"] = r.randint(8, 40)
    if r.random() < 0.3:  # a history with a call and its answer
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
        }
        body["messages"][-1:-1] = [
            {"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": "12 C"},
        ]
    return "tools", body


def structured(r: random.Random) -> tuple[str, dict]:
    kind, body = (chat if r.random() < 0.6 else completion)(r)
    if r.random() < 0.5:
        body.pop("paraspec", None)
    choice = r.random()
    if choice < 0.3:
        body["response_format"] = {"type": "json_object"}
    elif choice < 0.6:
        spec = {"name": "x", "schema": r.choice(SCHEMAS), "strict": r.choice([True, False, None])}
        body["response_format"] = {"type": "json_schema", "json_schema": spec}
    else:
        body.setdefault("paraspec", {})["grammar"] = r.choice(GRAMMARS)
    body["max_tokens"] = r.randint(4, 24)
    body.pop("max_completion_tokens", None)
    body.pop("ignore_eos", None)  # (refused with a grammar: it ends where the grammar ends)
    return f"{kind}+structured", body


def responses(r: random.Random) -> tuple[str, dict]:
    if r.random() < 0.5:
        body: dict = {"input": _text(r)}
    else:
        body = {
            "input": [
                {
                    "role": m["role"],
                    "content": m["content"]
                    if isinstance(m["content"], str)
                    else [{"type": "input_text", "text": m["content"][0]["text"]}],
                }
                for m in _messages(r)
            ]
        }
    for name, value in (
        ("instructions", _text(r)),
        ("max_output_tokens", r.randint(1, 16)),
        ("temperature", r.choice([0, 0.8])),
        ("top_p", 0.9),
        ("stream", True),
        ("store", False),
        ("metadata", {"k": "v"}),
        ("paraspec", {"plugin_params": r.choice(PLUGINS)}),
    ):
        if r.random() < 0.4:
            body[name] = value
    body.setdefault("max_output_tokens", r.randint(1, 16))
    return "responses", body


VALID = [(completion, 3), (chat, 3), (tools, 1.5), (structured, 2), (responses, 1.5)]


def valid_body(r: random.Random) -> tuple[str, dict]:
    make = r.choices([m for m, _ in VALID], [w for _, w in VALID])[0]
    return make(r)


def _paths(body, prefix: str = "", depth: int = 0) -> list[str]:
    """Every field path of a body (a.b, a[0].c), to break one of them."""
    out = []
    items = (
        body.items()
        if isinstance(body, dict)
        else enumerate(body)
        if isinstance(body, list)
        else ()
    )
    for k, v in items:
        path = f"{prefix}[{k}]" if isinstance(k, int) else f"{prefix}.{k}" if prefix else k
        out.append(path)
        if depth < 3:
            out += _paths(v, path, depth + 1)
    return out


def _set(body, path: str, value, delete: bool = False) -> None:
    keys = [
        int(k) if k.isdigit() else k for k in path.replace("[", ".").replace("]", "").split(".")
    ]
    for k in keys[:-1]:
        body = body[k]
    if delete:
        del body[keys[-1]]
    else:
        body[keys[-1]] = value


def broken(r: random.Random) -> tuple[str, dict, str]:
    """A valid body with one field replaced by junk (or removed, or made huge or odd): its blame."""
    kind, body = valid_body(r)
    body = copy.deepcopy(body)  # (its parts may be this module's constants)
    path = r.choice(_paths(body))
    how = r.random()
    if how < 0.1:
        _set(body, path, None, delete=True)
        return f"{kind}-missing", body, path
    if how < 0.2:
        _set(body, path, r.choice(ODD) * r.randint(1, 3))
        return f"{kind}-odd", body, path
    if how < 0.25:
        _set(body, path, r.choice(["x" * 100_000, list(range(5000)), [{"a": 1}] * 2000, 10**400]))
        return f"{kind}-huge", body, path
    if how < 0.4:  # a feature's own bad value: a grammar, a schema, a plugin, a tool choice
        feature = r.choice(["grammar", "plugin_params", "response_format", "tool_choice"])
        if feature in ("grammar", "plugin_params"):
            bad = BAD_GRAMMARS if feature == "grammar" else BAD_PLUGINS
            body.setdefault("paraspec", {})[feature] = r.choice(bad)
            return f"{kind}-bad", body, f"paraspec.{feature}"
        missing = {"type": "function", "function": {"name": "missing"}}
        body[feature] = (
            r.choice(BAD_FORMATS)
            if feature == "response_format"
            else r.choice(["sometimes", {"type": "function"}, missing])
        )
        return f"{kind}-bad", body, feature
    _set(body, path, r.choice(JUNK))
    return f"{kind}-junk", body, path


MALFORMED = [
    b'{"prompt": "x", "max_tokens": 2',
    b'{"prompt": "x",}',
    b"{'prompt': 'x'}",
    b'{"prompt": "\\x41"}',
    b'\xff\xfe{"prompt": "x"}',
    b"[" * 5000 + b"]" * 5000,
    b"",
    b"null",
    b'"prompt"',
    b"[1, 2]",
    b"42",
    b'{"prompt": "x"} trailing',
    b'{"prompt": "x", "prompt": 3}',
    b'{"prompt": "x", "max_tokens": 1e999}',
    b'{"messages": [{"role": "user", "content": "x"}]}\x00',
    b"\x00" * 64,
    b'{"a": ' * 200 + b"1" + b"}" * 200,
]


def malformed(r: random.Random, case: Case) -> None:
    case.kind, case.path = "malformed-json", r.choice(list(PATHS.values()))
    case.body = r.choice(MALFORMED)
    if r.random() < 0.25:
        case.kind = "content-type"
        case.body = json.dumps(
            {
                "prompt": "x",
                "messages": [{"role": "user", "content": "x"}],
                "input": "x",
                "max_tokens": 2,
            }
        ).encode()
        case.headers = {
            "content-type": r.choice(
                [
                    "text/plain",
                    "application/x-www-form-urlencoded",
                    "",
                    "multipart/form-data; boundary=x",
                    "application/json; charset=latin-1",
                ]
            )
        }


def long_input(r: random.Random, case: Case) -> None:
    """Prompts past the server's input limit, or long but allowed, and counts past its limits."""
    many = {"role": "user", "content": "hi " * 30}
    big = r.choice(
        [
            lambda: {"prompt": "word " * r.choice([400, 5000, 200_000]), "max_tokens": 2},
            lambda: {
                "prompt": [r.randint(0, 200) for _ in range(r.choice([300, 5000]))],
                "max_tokens": 2,
            },
            lambda: {"messages": [many] * r.choice([20, 400]), "max_tokens": 2},
            lambda: {"prompt": "x", "max_tokens": r.choice([10**6, 2**31])},
            lambda: {"prompt": "x", "max_tokens": 2, "n": r.choice([64, 10**4])},
            lambda: {"prompt": ["x"] * r.choice([50, 5000]), "max_tokens": 1},
            lambda: {
                "prompt": "x",
                "max_tokens": 2,
                "stop": ["s%d" % i for i in range(r.choice([5, 500]))],
            },
            lambda: {"input": "long " * 5000, "max_output_tokens": 2},
        ]
    )()
    case.kind = "long"
    case.path = PATHS[
        "responses" if "input" in big else "chat" if "messages" in big else "completion"
    ]
    case.body = json.dumps(big).encode()


def framing(r: random.Random, case: Case, host: str, body_timeout: float | None) -> None:
    body = b'{"prompt": "x", "max_tokens": 2}'
    head = f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
    chunked = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    close = f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    options = [
        (head + f"Content-Length: {len(body)}\r\nTransfer-Encoding: chunked\r\n\r\n").encode()
        + chunked,
        (head + "Content-Length: abc\r\nConnection: close\r\n\r\n").encode() + body,
        (head + "Content-Length: -5\r\nConnection: close\r\n\r\n").encode() + body,
        (head + "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\nzz\r\n").encode()
        + body
        + b"\r\n0\r\n\r\n",
        (head + "BadHeaderWithoutColon\r\nContent-Length: 2\r\n\r\n{}").encode(),
        (head + "X-Big: " + "a" * 70_000 + f"\r\nContent-Length: {len(body)}\r\n\r\n").encode()
        + body,
        b"GARBAGE\r\n\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # a TLS hello
        ("GET /health HTTP/1.0\r\n\r\n").encode(),
        (head.replace(host, "evil.example") + close).encode() + body,
        (f"BREW /v1/completions HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").encode(),
        (
            head.replace("POST /v1/completions", f"POST http://{host}/v1/completions") + close
        ).encode()
        + body,
        (head + f"Content-Length: {len(body)}\r\n\r\n").encode()
        + body  # two requests at once
        + (head + close).encode()
        + body,
        (head + "Expect: 100-continue\r\n" + close).encode() + body,
        (head + "Content-Length: 2\r\nConnection: close\r\n\r\n").encode() + b"\xff\xfe",
        (head.replace("HTTP/1.1", "HTTP/1.1 extra") + "Connection: close\r\n\r\n").encode(),
        (head + "Transfer-Encoding: gzip, chunked\r\nConnection: close\r\n\r\n").encode() + chunked,
    ]
    if body_timeout is not None:
        options.append((head + "Content-Length: 100\r\n\r\n").encode() + body[:20])  # stalls: a 408
    case.kind, case.raw = "framing", r.choice(options)
    case.stalls = case.raw.endswith(body[:20]) and b"Content-Length: 100" in case.raw
    case.body, case.headers = None, {}


def other_endpoint(r: random.Random, case: Case) -> None:
    case.kind = "endpoint"
    case.method, case.path = r.choice(
        [
            ("GET", "/v1/models"),
            ("GET", "/health"),
            ("HEAD", "/ready"),
            ("GET", "/metrics"),
            ("GET", "/nope"),
            ("DELETE", "/v1/completions"),
            ("POST", "/health"),
            ("GET", "/v1/chat/completions"),
            ("OPTIONS", "/v1/responses"),
            ("POST", "/v1/completions/../models"),
            ("GET", "/v1/models/x%00y"),
        ]
    )
    case.body = b"{}" if case.method == "POST" else None


def make_case(
    seed: int, index: int, host: str = "127.0.0.1", body_timeout: float | None = None
) -> Case:
    r = random.Random(f"{seed}:{index}")
    case = Case(seed, index, "")
    pick = r.random()
    if pick < 0.45:
        case.kind, body = valid_body(r)
    elif pick < 0.75:
        case.kind, body, case.blame = broken(r)
    else:
        maker = r.choices([malformed, long_input, framing, other_endpoint], [3, 2, 3, 1])[0]
        if maker is framing:
            framing(r, case, host, body_timeout)
        else:
            maker(r, case)
        return case
    case.path = PATHS[case.kind.split("+")[0].split("-")[0]]
    case.stream = isinstance(body, dict) and body.get("stream") is True
    case.cut = case.stream and r.random() < 0.25
    text = json.dumps(body, allow_nan=True, ensure_ascii=r.random() < 0.5)
    case.body = text.encode("utf-8", "surrogatepass")
    if case.body != text.encode("utf-8", "replace"):
        case.blame = None  # a lone surrogate written raw: the body is not UTF-8, no field to name
    return case

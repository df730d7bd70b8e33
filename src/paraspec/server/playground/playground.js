// paraspec playground: streams a request from this server's OpenAI endpoints with the opt-in step
// trace (paraspec.stream_steps) and draws every decode step's run of tokens as one span. Each step
// entry is {step, tokens, drafted, accepted, text: [from, own, to]}: code-point offsets into the
// generated text, [from, own) the draft tokens accepted, [own, to) the model's own token.
// Chat keeps a conversation: each run sends the earlier turns (question and answer) before the new
// question; earlier answers stay drawn in their step spans; the last turn can be taken back to edit.
"use strict";

const $ = (id) => document.getElementById(id);
const KEY_STORE = "paraspec.apiKey";
const PROMPTS = {
  chat: "Here is a Python function:\n\ndef mean(xs):\n    return sum(xs) / len(xs)\n\n" +
        "Rewrite it with type hints and a docstring, keeping the same logic.",
  completion: "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
};
// turns: the chat's committed {user, answer, runs} (runs: the answer's step spans, kept to redraw it);
// shown: whether the output pane holds the last turn's answer (else every turn is in the history)
const ui = { mode: "chat", prompts: { ...PROMPTS }, controller: null, last: null, turns: [], shown: false };

function setState(s) { document.body.dataset.state = s; }

function authHeaders() {
  const key = localStorage.getItem(KEY_STORE);
  return key ? { Authorization: "Bearer " + key } : {};
}

// ------------------------------------------------------------------------------- the request

function pluginParams(kind) {
  if (kind === "off") return "none";
  const params = { plugin_type: kind };
  for (const label of document.querySelectorAll("#params [data-for]")) {
    if (!label.dataset.for.split(" ").includes(kind)) continue;
    const input = label.querySelector("[data-param]");
    params[input.dataset.param] = input.type === "checkbox" ? input.checked
      : input.type === "number" ? Number(input.value) : input.value;
  }
  return params;
}

function requestFor(kind) {
  const body = {
    max_tokens: Number($("max-tokens").value),
    temperature: Number($("temperature").value),
    stream: true,
    paraspec: { plugin_params: pluginParams(kind), stream_steps: true },
  };
  const prompt = $("prompt").value;
  if (ui.mode === "chat") {
    body.messages = ui.turns.flatMap((t) => [{ role: "user", content: t.user }, { role: "assistant", content: t.answer }]);
    body.messages.push({ role: "user", content: prompt });
  } else body.prompt = prompt;
  return { path: ui.mode === "chat" ? "/v1/chat/completions" : "/v1/completions", body, kind, user: prompt };
}

async function errorText(response) {
  if (response.status === 401) return "this server needs an API key: enter it in the API key field at the top right";
  try {
    const body = await response.json();
    if (body.error && body.error.message) return body.error.message;
  } catch (_) { /* not JSON */ }
  return `${response.status} ${response.statusText}`;
}

// POSTs a streaming request and hands each SSE chunk to onChunk; throws the server's message.
async function streamRequest(req, onChunk, signal) {
  const response = await fetch(req.path, {
    method: "POST", signal, body: JSON.stringify(req.body),
    headers: { "Content-Type": "application/json", ...authHeaders() },
  });
  if (!response.ok) throw new Error(await errorText(response));
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data: ")) continue;
        const data = line.slice(6);
        if (data === "[DONE]") return;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new Error(chunk.error.message);
        onChunk(chunk);
      }
    }
  }
}

// ------------------------------------------------------------------------------- one output pane

function runClass(tokens) {   // shade by run length: 1 token = the model's own only
  return tokens >= 8 ? "r5" : tokens >= 5 ? "r4" : tokens >= 3 ? "r3" : tokens >= 2 ? "r2" : "r1";
}

function fmt(x, digits) { return Number.isFinite(x) ? x.toFixed(digits) : "–"; }

class Pane {
  constructor(root) {
    this.root = root;
    this.textEl = root.querySelector("[data-role=text]");
    this.figEl = root.querySelector("[data-role=figures]");
    this.reset();
  }

  reset() {
    this.chars = [];            // the generated text, one code point per entry
    this.pending = [];          // steps whose text has not fully arrived
    this.tokens = 0; this.decodeTokens = 0; this.steps = 0; this.drafted = 0; this.accepted = 0;
    this.t0 = performance.now(); this.tFirst = null; this.final = null;
  }

  start(req) {
    this.reset();
    this.textEl.replaceChildren();
    this.textEl.classList.add("live");
    const tag = this.root.querySelector("[data-role=plugin]");
    if (tag) tag.textContent = req.kind === "off" ? "plugins off" : req.kind;
    this.figures();
  }

  get text() { return this.chars.join(""); }

  chunk(chunk) {
    const choice = chunk.choices[0];
    if (choice) {
      const piece = choice.delta ? (choice.delta.content || "") : (choice.text || "");
      for (const ch of piece) this.chars.push(ch);
    }
    const ext = chunk.paraspec;
    if (ext) {
      for (const s of ext.steps || []) this.count(s);
      this.pending.push(...(ext.steps || []));
      if (ext.tokens_per_s !== undefined) this.final = ext;    // the sample's statistics, at its end
    }
    this.draw(false);
    this.figures();
  }

  count(s) {
    this.tokens += s.tokens;
    if (s.step === 0) { this.tFirst = performance.now(); return; }
    this.steps += 1; this.decodeTokens += s.tokens; this.drafted += s.drafted; this.accepted += s.accepted;
  }

  finish() {
    this.draw(true);
    this.textEl.classList.remove("live");
    this.figures();
  }

  // draws the steps whose text has arrived (at the end: all, cut to the text a stop string left)
  draw(end) {
    while (this.pending.length) {
      const s = this.pending[0];
      let [from, own, to] = s.text;
      if (to > this.chars.length) {
        if (!end) return;
        to = this.chars.length; own = Math.min(own, to); from = Math.min(from, to);
      }
      this.pending.shift();
      if (to <= from) continue;
      const run = document.createElement("span");
      run.className = "run " + runClass(s.tokens);
      run.dataset.step = s.step; run.dataset.tokens = s.tokens;
      run.dataset.drafted = s.drafted; run.dataset.accepted = s.accepted;
      if (own > from) run.append(part("d", this.chars.slice(from, own).join("")));
      if (to > own) run.append(part("own", this.chars.slice(own, to).join("")));
      this.textEl.append(run);
    }
  }

  // tokens/s as the server counts it: tokens after the first over the time after the first
  figures() {
    const live = this.tFirst !== null && this.tokens > 1
      ? (this.tokens - 1) / ((performance.now() - this.tFirst) / 1000) : NaN;
    const f = this.final;
    const rows = [
      ["tokens/s", fmt(f ? f.tokens_per_s : live, 1)],
      ["tokens/step", fmt(this.steps ? this.decodeTokens / this.steps : NaN, 2)],
      ["acceptance", this.drafted ? fmt(100 * this.accepted / this.drafted, 1) + " %" : "–"],
      ["tokens", String(this.tokens)],
      ["steps", String(this.steps)],
      ["first token", this.tFirst !== null ? fmt(this.tFirst - this.t0, 0) + " ms" : "–"],
      ["prompt reused", f && f.cached_tokens !== undefined ? `${f.cached_tokens} / ${f.prompt_tokens}` : "–"],
    ];
    this.figEl.replaceChildren(...rows.map(([k, v]) => {
      const div = document.createElement("div");
      const dt = document.createElement("dt"); dt.textContent = k;
      const dd = document.createElement("dd"); dd.textContent = v;
      div.append(dd, dt);
      return div;
    }));
  }

  get tokensPerSecond() { return this.final ? this.final.tokens_per_s : NaN; }
}

function part(cls, text) {
  const span = document.createElement("span");
  span.className = cls;
  span.textContent = text;
  return span;
}

const panes = { main: null, off: null };

// ------------------------------------------------------------------------------- running

function showError(message) {
  const el = $("error");
  el.textContent = message || "";
  el.hidden = !message;
}

async function execute(pane, req) {
  ui.controller = new AbortController();
  $("run").disabled = true; $("compare").disabled = true; $("stop").disabled = false;
  showError("");
  setState("running");
  pane.start(req);
  try {
    await streamRequest(req, (c) => pane.chunk(c), ui.controller.signal);
    pane.finish();
    setState("done");
    return true;
  } catch (e) {
    pane.finish();
    if (e.name === "AbortError") { setState("stopped"); return false; }
    showError(e.message);
    setState("error");
    return false;
  } finally {
    ui.controller = null;
    $("run").disabled = false; $("stop").disabled = true;
    $("compare").disabled = ui.last === null;
    showTurns();
    refreshMetrics();          // the run's tokens and trie growth, without waiting for the next poll
  }
}

async function run() {
  const req = requestFor($("plugin").value);
  ui.last = null;
  $("pane-off").hidden = true; $("verdict").hidden = true;
  document.querySelector(".panes").classList.remove("split");
  ui.shown = false;            // the pane's last answer (if any) moves up into the history
  showTurns();
  const ask = $("ask");
  ask.textContent = req.user; ask.hidden = ui.mode !== "chat";
  if (await execute(panes.main, req)) {
    ui.last = req;
    if (ui.mode === "chat") {
      const runs = [...panes.main.textEl.childNodes].map((n) => n.cloneNode(true));
      ui.turns.push({ user: req.user, answer: panes.main.text, runs });
      ui.shown = true;
      $("prompt").value = "";
      showTurns();
    }
  }
  $("compare").disabled = ui.last === null;
}

// ------------------------------------------------------------------------------- server panel

function parseMetrics(text) {
  const values = {};
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = line.match(/^([A-Za-z_:][\w:]*)(\{[^}]*\})?\s+(\S+)/);
    if (m) values[m[1]] = (values[m[1]] || 0) + Number(m[3]);
  }
  return values;
}

async function refreshMetrics() {
  const status = $("metrics-status");
  try {
    const response = await fetch("/metrics", { headers: authHeaders() });
    if (!response.ok) throw new Error(response.status === 401 ? "API key needed" : `HTTP ${response.status}`);
    const v = parseMetrics(await response.text());
    const count = v.paraspec_accepted_tokens_per_step_count;
    const shown = {
      in_flight: v.paraspec_requests_in_flight, running: v.paraspec_running_sequences,
      trie: v.paraspec_trie_nodes,
      per_step: count ? (v.paraspec_accepted_tokens_per_step_sum / count).toFixed(2) : "–",
      generated: v.paraspec_generation_tokens_total, steps: v.paraspec_decode_steps_total,
      reused: v.paraspec_prefix_cache_reused_tokens_total,
    };
    for (const dd of document.querySelectorAll("[data-metric]")) {
      const x = shown[dd.dataset.metric];
      dd.textContent = x === undefined ? "–" : typeof x === "number" ? x.toLocaleString("en-US") : x;
    }
    status.textContent = "live"; status.className = "live";
  } catch (e) {
    status.textContent = e.message; status.className = "bad";
  }
}

async function loadModel() {
  try {
    const response = await fetch("/v1/models", { headers: authHeaders() });
    if (!response.ok) throw new Error(await errorText(response));
    $("model").textContent = (await response.json()).data[0].id;
  } catch (e) {
    $("model").textContent = "?";
    showError(e.message);
  }
}

// ------------------------------------------------------------------------------- wiring

function showParams() {
  const kind = $("plugin").value;
  for (const label of document.querySelectorAll("#params [data-for]")) {
    label.hidden = !label.dataset.for.split(" ").includes(kind);
  }
}

function setMode(mode) {
  ui.prompts[ui.mode] = $("prompt").value;
  ui.mode = mode;
  document.body.dataset.mode = mode;
  $("prompt").value = ui.prompts[mode];
  for (const tab of document.querySelectorAll(".tab")) tab.classList.toggle("active", tab.dataset.mode === mode);
}

function showTip(event) {
  const run = event.target.closest(".run");
  const tip = $("tip");
  if (!run) { tip.hidden = true; return; }
  const d = run.dataset;
  const lines = Number(d.step) === 0
    ? ["step 0 (prefill)", "the first token, chosen by the model"]
    : [`step ${d.step} · ${d.tokens} token${d.tokens === "1" ? "" : "s"}`,
       `${d.accepted} of ${d.drafted} draft tokens verified were accepted`,
       "+ 1 token of the model's own"];
  tip.replaceChildren(...lines.map((t, i) => { const p = document.createElement(i ? "div" : "b"); p.textContent = t; return p; }));
  tip.style.left = Math.min(event.clientX + 14, window.innerWidth - 300) + "px";
  tip.style.top = event.clientY + 16 + "px";
  tip.hidden = false;
}

function init() {
  panes.main = new Pane($("pane-main"));
  panes.off = new Pane($("pane-off"));
  $("prompt").value = ui.prompts.chat;
  const key = $("api-key");
  key.value = localStorage.getItem(KEY_STORE) || "";
  key.addEventListener("change", () => {
    if (key.value) localStorage.setItem(KEY_STORE, key.value); else localStorage.removeItem(KEY_STORE);
    showError(""); loadModel(); refreshMetrics();
  });
  for (const tab of document.querySelectorAll(".tab")) tab.addEventListener("click", () => setMode(tab.dataset.mode));
  $("plugin").addEventListener("change", showParams);
  $("run").addEventListener("click", run);
  $("stop").addEventListener("click", () => ui.controller && ui.controller.abort());
  $("compare").addEventListener("click", compare);
  $("edit-last").addEventListener("click", editLast);
  $("clear").addEventListener("click", newChat);
  document.body.dataset.mode = ui.mode;
  $("prompt").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey) && !$("run").disabled) run();
  });
  for (const pane of document.querySelectorAll(".pane .text")) {
    pane.addEventListener("mousemove", showTip);
    pane.addEventListener("mouseleave", () => { $("tip").hidden = true; });
  }
  showParams();
  panes.main.figures();
  loadModel();
  refreshMetrics();
  setInterval(refreshMetrics, 2000);
  setState("ready");
}

document.addEventListener("DOMContentLoaded", init);

// paraspec playground, the chat's conversation: the committed turns drawn above the output pane
// (each answer in its step spans), the last turn taken back to edit, a new chat. Shares the page's
// globals with playground.js (ui, panes, $), loaded after this file.
"use strict";

function turnNode(turn, index) {
  const li = document.createElement("li");
  li.dataset.turn = index;
  const user = document.createElement("div");
  user.className = "msg user"; user.textContent = turn.user;
  const answer = document.createElement("div");
  answer.className = "answer";
  answer.append(...turn.runs.map((n) => n.cloneNode(true)));
  li.append(user, answer);
  return li;
}

// the history above the pane: every committed turn but the one the pane shows
function showTurns() {
  const archived = ui.shown ? ui.turns.slice(0, -1) : ui.turns;
  $("history").replaceChildren(...archived.map(turnNode));
  const n = ui.turns.length;
  $("turns").textContent = n ? `${n} turn${n === 1 ? "" : "s"} in this chat` : "";
  const busy = ui.controller !== null;
  $("edit-last").disabled = busy || !n; $("clear").disabled = busy || !n;
}

function clearPane() {
  panes.main.reset();
  panes.main.textEl.replaceChildren();
  panes.main.figures();
  $("ask").hidden = true;
}

// the last question back into the box, its answer forgotten: edit it and run again
function editLast() {
  const turn = ui.turns.pop();
  if (!turn) return;
  $("prompt").value = turn.user;
  if (ui.shown) clearPane();
  ui.shown = false;
  showTurns();
  $("prompt").focus();
}

function newChat() {
  ui.turns = [];
  if (ui.shown) clearPane();
  ui.shown = false;
  showTurns();
}

// the same request with parallel decoding off, side by side, and whether the texts agree
async function compare() {
  if (!ui.last) return;
  const req = { ...ui.last, kind: "off",
                body: { ...ui.last.body, paraspec: { plugin_params: "none", stream_steps: true } } };
  $("pane-off").hidden = false; $("verdict").hidden = true;
  document.querySelector(".panes").classList.add("split");
  if (!(await execute(panes.off, req))) return;
  const speedup = panes.main.tokensPerSecond / panes.off.tokensPerSecond;
  const greedy = req.body.temperature === 0;
  const same = panes.main.text === panes.off.text;
  const verdict = $("verdict");
  verdict.replaceChildren();
  const big = document.createElement("b");
  big.textContent = Number.isFinite(speedup) ? speedup.toFixed(2) + "× decode speed" : "speed: –";
  const check = document.createElement("span");
  check.className = greedy ? (same ? "ok" : "bad") : "neutral";
  check.textContent = !greedy ? "sampling (temperature > 0): the texts are not expected to match"
    : same ? "✓ identical text: greedy parallel decoding is lossless"
    : "✗ the texts differ under greedy decoding: please report this";
  verdict.append(big, check);
  verdict.dataset.identical = String(same);
  verdict.hidden = false;
}

"""The judging page: one item at a time, keys 1/2/3, undo, progress; no system names."""

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>ctxnmt judge</title>
<style>
 body { font-family: sans-serif; max-width: 62em; margin: 1.5em auto; padding: 0 1em; color: #222; }
 header { display: flex; justify-content: space-between; align-items: baseline; }
 #progress { font-size: 1.3em; font-weight: bold; }
 .label { font-size: 0.8em; text-transform: uppercase; color: #666; margin-top: 1em; }
 .text { font-size: 1.15em; padding: 0.5em 0.7em; background: #f4f4f4; border-radius: 4px; }
 #outputs { display: grid; grid-template-columns: 1fr 1fr; gap: 1em; }
 #outputs .text { background: #eef4fb; min-height: 3em; }
 #buttons { display: flex; gap: 0.7em; margin-top: 1.2em; }
 button { font-size: 1em; padding: 0.6em 1.1em; cursor: pointer; }
 #message { color: #a00; margin-top: 1em; min-height: 1.2em; }
 kbd { border: 1px solid #aaa; border-radius: 3px; padding: 0 0.3em; font-size: 0.85em; }
 [hidden] { display: none !important; }
</style>
</head>
<body>
<header><h2>Which translation is better?</h2><span id="progress"></span></header>
<form id="login">
 <p>Your name (answers are stored under it; use the same name to resume):</p>
 <input id="judge-name" maxlength="64" autofocus> <button id="start" type="submit">Start</button>
</form>
<main id="judging" hidden>
 <div class="label">Source</div><div id="src" class="text"></div>
 <div id="ref-block"><div class="label">Reference</div><div id="ref" class="text"></div></div>
 <div id="outputs">
  <div><div class="label">Left</div><div id="left" class="text"></div></div>
  <div><div class="label">Right</div><div id="right" class="text"></div></div>
 </div>
 <div id="buttons">
  <button id="btn-left" data-choice="left"><kbd>1</kbd> Left is better</button>
  <button id="btn-equal" data-choice="equal"><kbd>2</kbd> Equal</button>
  <button id="btn-right" data-choice="right"><kbd>3</kbd> Right is better</button>
  <button id="btn-undo"><kbd>u</kbd> Undo last answer</button>
 </div>
 <p>Judge: <b id="judge-label"></b> · <a href="#" id="switch">not you?</a></p>
</main>
<div id="finished" hidden><p>All items are judged. Thank you!</p>
 <button id="btn-undo-end"><kbd>u</kbd> Undo last answer</button></div>
<div id="message"></div>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
let judge = new URLSearchParams(location.search).get("judge") || localStorage.getItem("ctxnmt-judge") || "";
let item = null, busy = false;
// A new item is shown this long before it can be judged: the second click of a double click,
// or a held key's repeats, must not judge the next item unseen.
const SETTLE_MS = 400;
const ANSWER_BUTTONS = ["btn-left", "btn-equal", "btn-right"];
let ready = false, shown = 0;

function settle() {
  const mine = ++shown;
  ready = false;
  for (const id of ANSWER_BUTTONS) $(id).disabled = true;
  setTimeout(() => {
    if (mine !== shown) return;
    ready = true;
    for (const id of ANSWER_BUTTONS) $(id).disabled = false;
  }, SETTLE_MS);
}

async function call(path, body) {
  const init = body ? {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)}
                    : {};
  const response = await fetch(path, init);
  const data = await response.json();
  if (!response.ok) throw new Error(data.error || response.statusText);
  return data;
}

function show(state) {
  if (state.item !== null && (item === null || state.item.item !== item.item)) settle();
  item = state.item;
  $("login").hidden = true;
  $("judge-label").textContent = judge;
  $("progress").textContent = Math.min(state.done + 1, state.total) + " / " + state.total;
  $("judging").hidden = item === null;
  $("finished").hidden = item !== null;
  if (item === null) { $("progress").textContent = state.done + " / " + state.total; return; }
  $("src").textContent = item.src;
  $("ref-block").hidden = item.ref === null;
  $("ref").textContent = item.ref || "";
  $("left").textContent = item.left;
  $("right").textContent = item.right;
}

async function act(path, body) {
  if (busy) return;
  busy = true;
  try { show(await call(path, body)); $("message").textContent = ""; }
  catch (err) {
    $("message").textContent = err.message;
    show(await call("api/state?judge=" + encodeURIComponent(judge)));
  }
  finally { busy = false; }
}

function answer(choice) {
  if (item !== null && ready) act("api/answer", {judge: judge, item: item.item, choice: choice});
}
function undo() { act("api/undo", {judge: judge}); }

$("login").addEventListener("submit", (e) => {
  e.preventDefault();
  judge = $("judge-name").value.trim();
  if (!judge) { $("message").textContent = "Please type your name."; return; }
  localStorage.setItem("ctxnmt-judge", judge);
  act("api/state?judge=" + encodeURIComponent(judge));
});
for (const id of ANSWER_BUTTONS) {
  $(id).addEventListener("click", () => answer($(id).dataset.choice));
}
$("btn-undo").addEventListener("click", undo);
$("btn-undo-end").addEventListener("click", undo);
$("switch").addEventListener("click", (e) => { e.preventDefault(); localStorage.removeItem("ctxnmt-judge");
  location.search = ""; });
document.addEventListener("keydown", (e) => {
  if (e.repeat || e.ctrlKey || e.metaKey || e.altKey) return;  // a held key; the browser's own shortcuts
  if (!judge || !$("login").hidden || $("judging").hidden && e.key !== "u") return;
  if (e.target.tagName === "INPUT") return;
  const choice = {"1": "left", "2": "equal", "3": "right"}[e.key];
  if (choice) { e.preventDefault(); answer(choice); }
  else if (e.key === "u" || e.key === "Backspace") { e.preventDefault(); undo(); }
});
if (judge) act("api/state?judge=" + encodeURIComponent(judge));
</script>
</body>
</html>
"""

// The page of `ctxnmt serve`: plain JavaScript, no build step, nothing loaded from elsewhere.
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v; else if (k === "text") node.textContent = v; else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
}

// Subwords are shown without the BPE separator; a piece that continues a word ends in "·".
const shown = (tok) => (tok.endsWith("@@") ? tok.slice(0, -2) + "·" : tok);

// Weight 0 is white, 1 is deep red; the text turns white on dark cells.
function shade(node, w) {
  node.style.background = `rgba(179, 38, 30, ${Math.max(0, Math.min(1, w)).toFixed(3)})`;
  node.style.color = w > 0.55 ? "#fff" : "";
}

function heatmap(kind, rows, cols, matrix, causal) {
  const table = el("table", { class: `heatmap ${kind}` });
  const head = el("tr", {}, el("th"));
  cols.forEach((c) => head.append(el("th", { text: shown(c) })));
  table.append(el("thead", {}, head));
  const body = el("tbody");
  rows.forEach((r, i) => {
    const tr = el("tr", { "data-row": i }, el("th", { text: shown(r) }));
    cols.forEach((_, j) => {
      const w = matrix[i] ? matrix[i][j] : 0;
      const td = el("td", { class: "cell", "data-weight": w, title: `${shown(r)} → ${shown(cols[j])}: ${w}` });
      if (causal && j > i) td.className = "na"; else shade(td, w);
      tr.append(td);
    });
    body.append(tr);
  });
  table.append(body);
  return table;
}

// The server describes each model in plain words (ctxnmt.serve.models.describe), its
// document context included; an ensemble's reads context when any member does.
function describeModel(info) {
  const m = info.models[0];
  const bleu = (x) => (x.dev_scores && x.dev_scores.bleu !== undefined ? x.dev_scores.bleu.toFixed(2) : null);
  const parts = info.ensemble
    ? [`ensemble of ${info.models.length} (${info.ensemble_mode})`,  // each member is its own architecture
      "members: " + info.models.map((x) => (bleu(x) ? `${x.name} (dev BLEU ${bleu(x)})` : x.name)).join(", ")]
    : [m.name, m.description];
  parts.push(`${(info.models.reduce((s, x) => s + x.parameters, 0) / 1e6).toFixed(2)} M parameters`);
  if (!info.ensemble && bleu(m)) parts.push(`dev BLEU ${bleu(m)}`);
  if (info.ensemble && info.document_sents) {
    parts.push(`reads the ${info.document_sents} previous source sentences of the document as context`);
  }
  $("#model").textContent = parts.join(" · ");
  $("#document-option").hidden = !info.document_sents;  // a sentence model has no use for documents
  $("#beam").value = info.server.beam;
}

function select(card, row) {
  card.querySelectorAll(".tgt-token").forEach((t) => t.classList.toggle("selected", Number(t.dataset.row) === row));
  // rows are output words in the attention maps; columns are output words in the output gates
  card.querySelectorAll("table.source tbody tr, table.target tbody tr").forEach((tr) => {
    const on = Number(tr.dataset.row) === row;
    tr.classList.toggle("selected", on);
    tr.querySelectorAll("td.cell").forEach((td) => td.classList.toggle("hl", on));
  });
  card.querySelectorAll("table.output-gates tbody tr").forEach((tr) =>
    tr.querySelectorAll("td.cell").forEach((td, j) => td.classList.toggle("hl", j === row)));
  const weights = card.attention[row] || [];
  const best = weights.indexOf(Math.max(...weights));
  card.querySelectorAll(".src-token").forEach((s, j) => {
    shade(s, weights[j] || 0);
    s.classList.toggle("attended", j === best);
  });
}

function gatesPanel(s) {
  const panel = el("div", { class: "panel gates" });
  const enc = Object.entries(s.gates.encoder);
  if (enc.length) {
    panel.append(el("h3", { text: "hyper-gate g per source subword (weight of the state against the input)" }));
    panel.append(heatmap("encoder-gates", enc.map(([k]) => k), s.src_tokens, enc.map(([, v]) => v), false));
  }
  const out = Object.entries(s.gates.output);
  if (out.length) {
    panel.append(el("h3", { text: "adaptive output weights α per output subword" }));
    panel.append(heatmap("output-gates", out.map(([k]) => k.replace("alpha_", "α_")), [...s.tokens, "</s>"],
      out.map(([, v]) => v), false));
  }
  return panel;
}

function sentenceCard(s, n, source, documentMode) {
  const card = el("section", { class: "sentence", "data-sentence": n });
  card.append(el("h2", { text: `sentence ${n + 1}` }), el("p", { class: "source-line", text: source }),
    el("p", { class: "translation", text: s.translation || "(empty)" }));
  if (documentMode && s.src_tokens && s.src_tokens.length) {  // document mode is offered to context models only
    const ctx = s.context || [];
    const text = ctx.length ? `context: sentence${ctx.length > 1 ? "s" : ""} ${ctx.map((i) => i + 1).join(", ")}`
      : "context: none (first sentence of the document)";
    card.append(el("p", { class: "context", text }));
  }
  if (!s.tokens || !s.src_tokens.length) return card;
  card.attention = s.attention || [];
  const out = [...s.tokens, "</s>"];
  const tgt = el("div", { class: "tokens target" }, el("span", { class: "label", text: "output" }));
  out.forEach((t, i) => {
    const tok = el("span", { class: "tok tgt-token", "data-row": i, text: shown(t) });
    tok.addEventListener("click", () => select(card, i));
    tgt.append(tok);
  });
  const src = el("div", { class: "tokens source" }, el("span", { class: "label", text: "source" }));
  s.src_tokens.forEach((t) => src.append(el("span", { class: "tok src-token", text: shown(t) })));
  card.append(tgt, src);
  card.append(el("p", { class: "note legend" }, "weights: ", el("span", { class: "scale" }), " 0 → 1"));
  const panels = el("div", { class: "panels" });
  if (s.attention) {
    panels.append(el("div", { class: "panel" }, el("h3", { text: "source attention α (rows: output, columns: source)" }),
      heatmap("source", out, s.src_tokens, s.attention, false)));
  } else {
    panels.append(el("p", { class: "note", text: "no attention for a line translated in pieces" }));
  }
  if (s.target_attention) {
    panels.append(el("div", { class: "panel" },
      el("h3", { text: "target-side attention (rows: predicted word, columns: earlier words)" }),
      heatmap("target", out, ["<s>", ...s.tokens], s.target_attention, true)));
  }
  if (s.gates) panels.append(gatesPanel(s));
  card.append(panels);
  card.querySelectorAll("table.source tbody tr, table.target tbody tr").forEach((tr) =>
    tr.querySelector("th").addEventListener("click", () => select(card, Number(tr.dataset.row))));
  return card;
}

async function translate(event) {
  event.preventDefault();
  const text = $("#source").value;
  const documentMode = $("#document").checked && !$("#document-option").hidden;
  const status = $("#status");
  status.className = "";
  status.textContent = "translating…";
  $("#translate").disabled = true;
  const started = performance.now();
  try {
    const res = await fetch("/v1/translate", {
      method: "POST", headers: { "content-type": "application/json" },
      body: JSON.stringify({ text, beam: Number($("#beam").value), attention: true, document: documentMode }),
    });
    const answer = await res.json().catch(() => null);  // a proxy's or a crash's page is not JSON
    if (!res.ok || answer === null) {
      throw new Error((answer && answer.error) || `the server answered ${res.status} ${res.statusText}`);
    }
    const lines = text.split(/\r?\n/);
    const results = $("#results");
    results.replaceChildren(...answer.sentences.map((s, n) => sentenceCard(s, n, lines[n], documentMode)));
    status.textContent = `${answer.sentences.length} sentence(s) in ${Math.round(performance.now() - started)} ms`
      + ` (batch of ${answer.batch.sentences})`;
  } catch (err) {
    status.className = "error";
    status.textContent = err.message;
  } finally {
    $("#translate").disabled = false;
  }
}

$("#form").addEventListener("submit", translate);
fetch("/v1/models").then((r) => r.json()).then(describeModel)
  .catch(() => { $("#model").textContent = "model description unavailable"; });

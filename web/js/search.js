// search.js — the node search box (double-click on empty canvas, or drop a dragged link on
// empty space). It matches what people type against the title shown on the node
// (display_name) as well as the class name and the category, forgives a typo per word,
// ranks the results, and shows each one's category and socket types. Opened from a link,
// it lists only nodes that can take (or give) that link's type and connects the one chosen.
// The box is placed at the pointer but always kept inside the window.

const LG = window.LiteGraph;
const MAX_RESULTS = 40;

// --- matching (pure; exported for tests) --------------------------------------------

export function words(s) {
  return String(s)
    .replace(/([a-z0-9])([A-Z])/g, "$1 $2").replace(/([A-Z]+)([A-Z][a-z])/g, "$1 $2")
    .toLowerCase().split(/[^a-z0-9]+/).filter(Boolean);
}

// Optimal string alignment distance (Levenshtein plus adjacent swaps: "imgae" -> "image" is
// one edit), giving up above `max`.
export function editDistance(a, b, max = 3) {
  if (Math.abs(a.length - b.length) > max) return max + 1;
  let prev2 = null, prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    let best = i;
    for (let j = 1; j <= b.length; j++) {
      let d = Math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
      if (prev2 && i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d = Math.min(d, prev2[j - 2] + 1);
      cur.push(d);
      best = Math.min(best, d);
    }
    if (best > max) return max + 1;
    prev2 = prev; prev = cur;
  }
  return prev[b.length];
}

function isSubsequence(q, w) {
  let i = 0;
  for (const c of w) if (c === q[i]) i++;
  return i === q.length;
}

// How well one typed word matches one word of a name, 0..1.
function wordScore(q, w) {
  if (w === q) return 1;
  if (w.startsWith(q)) return 0.9;
  if (w.includes(q)) return 0.7;
  const allowed = q.length < 4 ? 0 : q.length < 8 ? 1 : 2; // typos allowed for this length
  if (allowed) {
    // Against the whole word, and against its start (the word may not be typed out yet).
    const d = Math.min(editDistance(q, w, allowed), editDistance(q, w.slice(0, q.length), allowed));
    if (d <= allowed) return 0.6 - 0.15 * d;
  }
  if (q.length >= 2 && isSubsequence(q, w)) return 0.3;
  return 0;
}

// How well a query matches a text (a title, class name or category), 0 when it does not.
export function textScore(query, text) {
  const qw = words(query), tw = words(text);
  if (!qw.length || !tw.length) return 0;
  let sum = 0;
  for (const q of qw) {
    let best = 0;
    for (const w of tw) best = Math.max(best, wordScore(q, w));
    if (!best) { sum = 0; break; }
    sum += best;
  }
  let score = (sum / qw.length) * 100;
  const qc = qw.join(""), tc = tw.join("");
  if (!score && qc.length >= 3 && tc.includes(qc)) score = 70;           // "ksamp" in "k sampler"
  if (!score) return 0;
  if (tc === qc) score += 100;
  else if (tc.startsWith(qc)) score += 40;
  score -= Math.min(20, Math.max(0, tw.length - qw.length) * 3);        // fewer extra words first
  return score;
}

export function scoreEntry(query, e) {
  return Math.max(textScore(query, e.title) * 1.0, textScore(query, e.name) * 0.95, textScore(query, e.category) * 0.4);
}

// Entries: [{name, title, category, inputs: [types], outputs: [types]}].
// filter: {input: type} (nodes with an input socket taking `type`) or {output: type}.
export function searchNodes(query, entries, filter = null) {
  let list = entries;
  if (filter) list = list.filter((e) => acceptsType(filter.input ? e.inputs : e.outputs, filter.input || filter.output));
  if (!query.trim()) return list.slice().sort((a, b) => a.category.localeCompare(b.category) || a.title.localeCompare(b.title)).slice(0, MAX_RESULTS);
  return list.map((e) => ({ e, s: scoreEntry(query, e) })).filter((x) => x.s > 0)
    .sort((a, b) => b.s - a.s || a.e.title.length - b.e.title.length || a.e.title.localeCompare(b.e.title))
    .slice(0, MAX_RESULTS).map((x) => x.e);
}

function typeMatches(slotType, type) {
  if (slotType === "*" || type === "*") return true;
  const a = String(slotType).split(","), b = String(type).split(",");
  return a.some((t) => b.includes(t));
}

function acceptsType(types, type) { return types.some((t) => typeMatches(t, type)); }

// The node types the page can create, as search entries.
export function nodeEntries(objectInfo) {
  const out = [];
  for (const [name, cls] of Object.entries(LG.registered_node_types)) {
    if (cls.skip_list) continue;
    const info = objectInfo[name];
    if (info) {
      const inputs = [];
      for (const g of ["required", "optional"]) for (const spec of Object.values(info.input?.[g] || {})) {
        const t = Array.isArray(spec) ? spec[0] : spec;
        if (typeof t === "string" && !["INT", "FLOAT", "STRING", "BOOLEAN", "COMBO"].includes(t)) inputs.push(t);
      }
      out.push({ name, title: info.display_name || name, category: info.category || "", inputs, outputs: (info.output || []).map((t) => Array.isArray(t) ? "COMBO" : String(t)) });
    } else if (cls.isVirtual) {
      const n = LG.createNode(name);
      out.push({ name, title: cls.title || name, category: cls.category || "utils", inputs: (n?.inputs || []).map((s) => s.type), outputs: (n?.outputs || []).map((s) => s.type) });
    }
  }
  return out;
}

// --- the box -----------------------------------------------------------------------

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text != null) e.textContent = text;
  return e;
}

export class NodeSearch {
  constructor(app) {
    this.app = app;
    this.box = null;
  }

  // from: {node, slot (index), output: true|false} when opened from a dropped link.
  open(clientX, clientY, from = null) {
    this.close();
    const canvas = this.app.canvas;
    const graphPos = canvas.convertEventToCanvasOffset({ clientX, clientY });
    let filter = null;
    if (from) {
      const slot = from.output ? from.node.outputs[from.slot] : from.node.inputs[from.slot];
      filter = from.output ? { input: slot.type } : { output: slot.type };
    }
    const entries = nodeEntries(this.app.objectInfo);
    const box = el("div", "node-search");
    const input = el("input");
    input.placeholder = filter ? `search nodes that ${filter.input ? "take" : "give"} ${filter.input || filter.output}` : "search nodes";
    const list = el("div", "results");
    box.append(input, list);
    document.body.append(box);
    this.box = box;
    let results = [], sel = 0;
    const render = () => {
      results = searchNodes(input.value, entries, filter);
      sel = Math.min(sel, Math.max(0, results.length - 1));
      list.replaceChildren(...results.map((e, i) => {
        const row = el("div", `result${i === sel ? " selected" : ""}`);
        row.dataset.type = e.name;
        const head = el("div", "head");
        head.append(el("span", "title", e.title));
        if (e.name !== e.title) head.append(el("span", "cls", e.name));
        head.append(el("span", "cat", e.category));
        row.append(head, el("div", "types", `${e.inputs.join(", ") || "—"} → ${e.outputs.join(", ") || "—"}`));
        row.addEventListener("pointerdown", (ev) => { ev.preventDefault(); this.pick(e, graphPos, from); });
        return row;
      }));
      if (!results.length) list.append(el("div", "none", "no node matches"));
      list.children[sel]?.scrollIntoView?.({ block: "nearest" });
    };
    input.addEventListener("input", () => { sel = 0; render(); });
    input.addEventListener("keydown", (e) => {
      e.stopPropagation(); // typing belongs to the box, not to the canvas shortcuts
      if (e.key === "ArrowDown") { sel = Math.min(results.length - 1, sel + 1); render(); e.preventDefault(); }
      else if (e.key === "ArrowUp") { sel = Math.max(0, sel - 1); render(); e.preventDefault(); }
      else if (e.key === "Enter") { if (results[sel]) this.pick(results[sel], graphPos, from); e.preventDefault(); }
      else if (e.key === "Escape") this.close();
    });
    input.addEventListener("blur", () => setTimeout(() => { if (this.box === box && document.activeElement !== input) this.close(); }, 150));
    render();
    this.place(box, clientX, clientY);
    input.focus();
    return box;
  }

  // At the pointer, shifted so the whole box stays in the window.
  place(box, x, y) {
    const r = box.getBoundingClientRect(), m = 8;
    const left = Math.max(m, Math.min(x - 20, window.innerWidth - r.width - m));
    const top = Math.max(m, Math.min(y - 20, window.innerHeight - r.height - m));
    box.style.left = `${left}px`;
    box.style.top = `${top}px`;
  }

  close() {
    if (!this.box) return;
    const b = this.box;
    this.box = null;
    b.remove();
    this.app.canvas.canvas.focus();
  }

  // Adds the chosen node where the search was opened and, from a link, connects it.
  pick(entry, graphPos, from) {
    this.close();
    const node = LG.createNode(entry.name);
    if (!node) return null;
    node.pos = [graphPos[0], graphPos[1]];
    this.app.graph.add(node);
    if (from) {
      const src = from.node;
      if (from.output) {
        const type = src.outputs[from.slot].type;
        const i = (node.inputs || []).findIndex((s) => typeMatches(s.type, type));
        if (i >= 0) src.connect(from.slot, node, i);
      } else {
        const type = src.inputs[from.slot].type;
        const o = (node.outputs || []).findIndex((s) => typeMatches(s.type, type));
        if (o >= 0) { node.pos = [graphPos[0] - node.size[0], graphPos[1]]; node.connect(o, src, from.slot); }
      }
    }
    this.app.canvas.selectNode(node);
    this.app.canvas.setDirty(true, true);
    this.app.tracker.check();
    return node;
  }

  // Routes litegraph's own entry points (double-click, link dropped on empty space) here.
  install(canvas) {
    const slotIndex = (node, slot, output) => typeof slot === "number" ? slot : (output ? node.outputs : node.inputs).indexOf(slot);
    const pos = (e) => [e?.clientX ?? window.innerWidth / 2, e?.clientY ?? window.innerHeight / 2];
    canvas.showSearchBox = (e, o = {}) => {
      let from = null;
      if (o.node_from && o.slot_from) from = { node: o.node_from, slot: slotIndex(o.node_from, o.slot_from, true), output: true };
      else if (o.node_to && o.slot_from) from = { node: o.node_to, slot: slotIndex(o.node_to, o.slot_from, false), output: false };
      return this.open(...pos(e), from);
    };
    canvas.showConnectionMenu = (o = {}) => {
      const from = o.nodeFrom ? { node: o.nodeFrom, slot: slotIndex(o.nodeFrom, o.slotFrom, true), output: true }
        : { node: o.nodeTo, slot: slotIndex(o.nodeTo, o.slotTo, false), output: false };
      return this.open(...pos(o.e), from);
    };
  }
}

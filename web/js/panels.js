// panels.js — the side panel (queue, history, gallery, system), the error dialog and the
// missing-node banner. All lists are rebuilt from the server's answers (GET /queue,
// /history, /system_stats) whenever a WS event says they changed.
import { api } from "./api.js";
import { openImage, saveImage, copyImage } from "./image_actions.js";
import { promptSummary, firstWords, historyTimes, fmtClock, fmtDuration } from "./prompt_info.js";

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "class") e.className = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) if (c != null) e.append(c instanceof Node ? c : String(c));
  return e;
}

function fmtBytes(n) {
  if (typeof n !== "number") return "?";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${u[i]}`;
}

// The failure of a history entry, from its execution_error message, as one line.
function errorLine(msgs) {
  const m = msgs.find((x) => x[0] === "execution_error");
  if (!m) return null;
  const d = m[1] || {};
  return el("div", { class: "err" }, `${d.node_type || "?"} #${d.node_id ?? "?"}: ${(d.exception_message || "").trim().split("\n")[0]}`);
}

export class Panels {
  constructor(app) {
    this.app = app;
    this.gallery = [];
    this.tab = "queue";
    for (const b of document.querySelectorAll("#tabs button"))
      b.addEventListener("click", () => this.showTab(b.dataset.tab));
    document.getElementById("btn-queue-clear").addEventListener("click", async () => { await api.clearQueue(); this.refreshQueue(); });
    document.getElementById("btn-history-clear").addEventListener("click", async () => { await api.clearHistory(); this.refreshHistory(); });
    document.getElementById("error-close").addEventListener("click", () => this.hideErrorDialog());
    document.getElementById("lightbox").addEventListener("click", (e) => { e.currentTarget.hidden = true; });
    // The same image actions as on nodes, for history and gallery images.
    for (const b of document.querySelectorAll("#lightbox .lb-actions button")) {
      b.addEventListener("click", (e) => {
        e.stopPropagation(); // an action does not close the view
        const img = document.querySelector("#lightbox img");
        const act = { open: openImage, save: saveImage, copy: (i) => copyImage(i).then(() => this.app.setStatus("image copied", 4000)) }[b.dataset.act];
        Promise.resolve(act(img)).catch((err) => this.app.showError(`image action failed: ${err.message || err}`));
      });
    }
    this.showTab("queue");
    setInterval(() => { if (this.tab === "system") this.refreshSystem(); }, 5000);
  }

  showTab(name) {
    this.tab = name;
    for (const b of document.querySelectorAll("#tabs button")) b.classList.toggle("active", b.dataset.tab === name);
    for (const p of document.querySelectorAll(".panel")) p.hidden = p.id !== `panel-${name}`;
    if (name === "system") this.refreshSystem();
    if (name === "history") this.refreshHistory();
    if (name === "queue") this.refreshQueue();
    if (name === "workflows") this.app.workflows?.refreshList();
  }

  // Q: show the queue, or hide the side panel when the queue is already shown.
  toggleTab(name) {
    const side = document.getElementById("side");
    if (!side.hidden && this.tab === name) { side.hidden = true; return; }
    side.hidden = false;
    this.showTab(name);
  }

  refreshAll() { this.refreshQueue(); this.refreshHistory(); this.refreshSystem(); }

  // --- queue and history rows ------------------------------------------------------
  // Status, duration and the actions on the first line (the actions never wrap), the times
  // on the second, seed and the first words of the positive prompt on the third.
  promptRow(cls, id, prompt, { tag, duration = "", times, actions }) {
    const info = promptSummary(prompt);
    const text = info.positive ? firstWords(info.positive) : "";
    return el("div", { class: `item ${cls}`, "data-prompt-id": id },
      el("div", { class: "row" },
        el("span", { class: "tag" }, tag),
        el("span", { class: "dur" }, duration),
        el("span", { class: "acts" }, ...actions)),
      el("div", { class: "row when", title: `prompt ${id}` }, times),
      el("div", { class: "row info" },
        info.seed != null ? el("span", { class: "seed" }, `seed ${info.seed}`) : null,
        el("span", { class: "words", title: info.positive || "" }, text || `${Object.keys(prompt || {}).length} nodes`)));
  }

  async refreshQueue() {
    let q;
    try { q = await api.getQueue(); } catch { return; }
    const root = document.getElementById("queue-list");
    root.replaceChildren();
    const row = (item, running) => {
      const [number, id, prompt, extra] = item;
      const queued = extra?.create_time ?? null;
      const started = running ? this.app.myPrompts[id]?.startedAt ?? null : null;
      const times = `queued ${fmtClock(queued)}${running ? ` · started ${fmtClock(started)}` : ""}`;
      return this.promptRow(running ? "running" : "pending", id, prompt, {
        tag: running ? "running" : `#${number}`, times, duration: running && started ? fmtDuration(Date.now() - started) : "",
        actions: [
          running
            ? el("button", { onclick: () => api.interrupt() }, "interrupt")
            : el("button", { onclick: async () => { await api.deleteQueueItems([id]); this.refreshQueue(); } }, "delete"),
          el("button", { onclick: () => this.loadFromItem(item) }, "load")],
      });
    };
    for (const it of q.queue_running || []) root.append(row(it, true));
    const pending = (q.queue_pending || []).slice().sort((a, b) => a[0] - b[0]);
    for (const it of pending) root.append(row(it, false));
    if (!root.children.length) root.append(el("div", { class: "empty" }, "queue is empty"));
    document.getElementById("tab-queue-count").textContent = String((q.queue_running || []).length + pending.length);
  }

  loadFromItem(item) {
    const wf = item[3]?.extra_pnginfo?.workflow;
    if (wf && wf.nodes) this.app.loadGraphData(wf);
    else if (item[2]) this.app.loadGraphData(item[2]);
  }

  async refreshHistory() {
    let h;
    try { h = await api.getHistory(200); } catch { return; }
    const root = document.getElementById("history-list");
    root.replaceChildren();
    const entries = Object.entries(h).reverse(); // newest first
    for (const [id, entry] of entries) {
      const status = entry.status || {};
      const images = [];
      for (const out of Object.values(entry.outputs || {})) for (const img of out.images || []) images.push(img);
      const thumbs = el("div", { class: "thumbs" });
      for (const img of images.slice(0, 8)) {
        const url = api.viewUrl(img);
        thumbs.append(el("img", { src: url, title: img.filename, loading: "lazy", onclick: () => this.openLightbox(url, img) }));
      }
      const msgs = status.messages || [];
      const last = msgs.length ? msgs[msgs.length - 1][0] : "";
      const label = status.status_str === "success" ? "success" : last === "execution_interrupted" ? "interrupted" : (status.status_str || "?");
      const t = historyTimes(entry);
      const times = `queued ${fmtClock(t.queued)} · started ${fmtClock(t.started)}`;
      const item = this.promptRow(`hist ${label}`, id, entry.prompt?.[2], {
        tag: label, times, duration: t.started != null && t.ended != null ? fmtDuration(t.ended - t.started) : "",
        actions: [
          el("button", { onclick: () => this.loadFromItem(entry.prompt || []) }, "load"),
          el("button", { onclick: async () => { await api.deleteHistoryItems([id]); this.refreshHistory(); } }, "delete")],
      });
      item.append(...[errorLine(msgs), images.length ? thumbs : null].filter(Boolean));
      root.append(item);
    }
    if (!entries.length) root.append(el("div", { class: "empty" }, "no history"));
    const all = [];
    for (const [, entry] of entries) for (const out of Object.values(entry.outputs || {})) for (const img of out.images || []) all.push(img);
    this.setGallery(all);
  }

  // --- gallery ---------------------------------------------------------------------
  addGallery(images) { this.setGallery([...images, ...this.gallery]); }

  setGallery(images) {
    const seen = new Set();
    this.gallery = images.filter((i) => { const k = `${i.type}/${i.subfolder}/${i.filename}`; if (seen.has(k)) return false; seen.add(k); return true; }).slice(0, 200);
    const root = document.getElementById("gallery-list");
    root.replaceChildren(...this.gallery.map((img) => {
      const url = api.viewUrl(img);
      return el("img", { src: url, title: `${img.subfolder ? img.subfolder + "/" : ""}${img.filename} (${img.type})`, loading: "lazy", onclick: () => this.openLightbox(url) });
    }));
    document.getElementById("tab-gallery-count").textContent = String(this.gallery.length);
  }

  openLightbox(url) {
    const lb = document.getElementById("lightbox");
    lb.querySelector("img").src = url;
    lb.hidden = false;
  }

  // --- system ----------------------------------------------------------------------
  async refreshSystem() {
    const root = document.getElementById("system-info");
    let s;
    try { s = await api.getSystemStats(); }
    catch (e) { root.replaceChildren(el("div", { class: "empty" }, `system_stats unavailable: ${e.message}`)); return; }
    const sys = s.system || {};
    const table = el("table");
    const add = (k, v) => table.append(el("tr", {}, el("th", {}, k), el("td", {}, v)));
    add("OS", sys.os ?? "?");
    add("version", sys.comfyui_version ?? "?");
    add("RAM", `${fmtBytes(sys.ram_free)} free of ${fmtBytes(sys.ram_total)}`);
    for (const d of s.devices || []) {
      add("device", `${d.name} (${d.type}${d.index != null ? " " + d.index : ""})`);
      add("VRAM", `${fmtBytes(d.vram_free)} free of ${fmtBytes(d.vram_total)}`);
      add("pool", `${fmtBytes(d.torch_vram_free)} free of ${fmtBytes(d.torch_vram_total)} reserved`);
    }
    // Anything else the server exposes (e.g. the memory manager's loaded models) is shown raw.
    const known = new Set(["system", "devices"]);
    const extras = Object.entries(s).filter(([k]) => !known.has(k));
    root.replaceChildren(table);
    for (const [k, v] of extras) root.append(el("h4", {}, k), el("pre", {}, JSON.stringify(v, null, 1)));
    root.append(el("button", { onclick: () => api.freeMemory().then(() => this.refreshSystem()) }, "free memory"));
  }

  // --- errors ----------------------------------------------------------------------
  showErrorDialog(err) {
    const d = document.getElementById("error-dialog");
    document.getElementById("error-message").textContent = err.message;
    document.getElementById("error-details").textContent = err.details || "";
    const list = document.getElementById("error-nodes");
    list.replaceChildren(...(err.nodes || []).map((n) => el("li", {}, el("b", {}, `${n.node} (${n.cls})`), " ", n.text)));
    d.hidden = false;
  }

  hideErrorDialog() { document.getElementById("error-dialog").hidden = true; }

  // First run without a model: say where checkpoints go instead of showing empty combos.
  showModelHint(objectInfo) {
    const b = document.getElementById("hint-banner");
    const spec = objectInfo.CheckpointLoaderSimple?.input?.required?.ckpt_name;
    const values = Array.isArray(spec?.[0]) ? spec[0] : spec?.[1]?.options;
    if (!spec || (values && values.length)) { b.hidden = true; return; }
    b.replaceChildren("No checkpoint found. Put a checkpoint (.safetensors) in ", el("code", {}, "models/checkpoints"),
      " under the server's base directory, then press Refresh (R).");
    b.hidden = false;
  }

  showMissing(types) {
    const b = document.getElementById("missing-banner");
    if (!types.length) { b.hidden = true; return; }
    b.textContent = `This workflow uses node types the server does not provide: ${types.join(", ")}. They are shown in red and cannot be queued.`;
    b.hidden = false;
  }
}

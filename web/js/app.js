// app.js — the page: graph canvas, top bar (queue, batch, interrupt, progress), workflow
// tabs (workflows.js), side panels (queue, history, gallery, workflows, system), error
// dialog, drag-and-drop of PNG/JSON workflows. Undo (undo.js), shortcuts (shortcuts.js) and
// the node search (search.js) are wired here. window.app is the page's state and is what
// the UI tests drive and inspect.
import { api } from "./api.js";
import { registerNodeTypes, applySeedControl, fitLoadedSizes } from "./nodes.js";
import { graphToPrompt, apiPromptToGraph, isApiPrompt, isWorkflow, registerMissingTypes } from "./workflow.js";
import { readComfyMetadata } from "./png.js";
import { Panels } from "./panels.js";
import { registerVirtualNodes } from "./virtual.js";
import { ChangeTracker } from "./undo.js";
import { Workflows } from "./workflows.js";
import { bindShortcuts, selectedNodes } from "./shortcuts.js";
import { bindLinkMode } from "./linkmode.js";
import { NodeSearch } from "./search.js";

const LG = window.LiteGraph;
const STORE_KEY = "latentd.workflow"; // the single workflow of older versions of this page

class App {
  constructor() {
    this.runningNodeId = null;
    this.runningPromptId = null;
    this.nodeProgress = {};   // node id -> {value, max, state}
    this.nodeErrors = {};     // node id -> node_errors entry of the last failed queue
    this.myPrompts = {};      // prompt id -> {total: nodes sent, done: Set of finished ids, cached: count}
    this.lastError = null;
    this.missingTypes = [];
    this.objectInfo = {};
  }

  $(id) { return document.getElementById(id); }

  async setup() {
    LG.release_link_on_empty_shows_menu = true;
    LG.alt_drag_do_clone_nodes = true;
    LG.ctrl_shift_v_paste_connect_unselected_outputs = true; // ComfyUI's Ctrl+Shift+V
    this.graph = new LG.LGraph();
    const el = this.$("graph-canvas");
    this.canvas = new LG.LGraphCanvas(el, this.graph);
    this.canvas.allow_searchbox = true;
    this.canvas.show_info = false;
    this.canvas.render_canvas_border = false;
    // ComfyUI's link colours per type, so graphs look familiar.
    const typeColors = {
      MODEL: "#B39DDB", CLIP: "#FFD500", VAE: "#FF6E6E", LATENT: "#FF9CF9", IMAGE: "#64B5F6",
      CONDITIONING: "#FFA931", MASK: "#81C784", CLIP_VISION: "#A8DADC", CONTROL_NET: "#00D78D",
    };
    Object.assign(this.canvas.default_connection_color_byType, typeColors);
    Object.assign(LG.LGraphCanvas.link_type_colors, typeColors);
    this.resizeCanvas();
    // The canvas follows its container (window resizes, the missing-node banner appearing).
    new ResizeObserver(() => this.resizeCanvas()).observe(el.parentElement);

    this.panels = new Panels(this);
    this.tracker = new ChangeTracker(this.graph, (state) => this.applyGraphState(state));
    this.tracker.bind();
    this.workflows = new Workflows(this);
    this.tracker.onChange = () => this.workflows.render();
    this.bindToolbar();
    bindShortcuts(this);
    bindLinkMode(this.canvas, this.$("link-mode"));
    this.search = new NodeSearch(this);
    this.search.install(this.canvas);
    this.bindDrop();
    this.bindSocket();

    try {
      await this.loadNodeDefs();
    } catch (e) {
      this.showError(`could not load node definitions from /object_info: ${e.message}`);
    }
    let restored = false;
    try { restored = await this.workflows.restore(); } catch (e) { console.warn("stored tabs unreadable", e); }
    if (!restored) {
      await this.workflows.newTab();
      try {
        const saved = localStorage.getItem(STORE_KEY);
        if (saved) restored = await this.loadGraphData(JSON.parse(saved), { quiet: true });
      } catch (e) { console.warn("stored workflow unreadable", e); }
      if (!restored) await this.loadDefault();
      this.workflows.markOpened();
    }
    this.workflows.refreshList();
    setInterval(() => this.persist(), 2000);
    window.addEventListener("beforeunload", () => this.persist());
    api.connect();
    this.panels.refreshAll();
    this.ready = true;
    document.body.dataset.ready = "1";
  }

  resizeCanvas() {
    const el = this.$("graph-canvas");
    const r = el.parentElement.getBoundingClientRect();
    el.width = r.width; el.height = r.height;
    this.canvas.resize(r.width, r.height);
    this.canvas.setDirty(true, true);
  }

  async loadNodeDefs() {
    this.objectInfo = await api.getObjectInfo();
    registerNodeTypes(this.objectInfo);
    registerVirtualNodes(this.objectInfo);
    this.setStatus(`${Object.keys(this.objectInfo).length} node types`, 10000);
    this.panels.showModelHint(this.objectInfo);
  }

  persist() {
    if (!this.graph || !this.ready) return;
    this.workflows.persist();
  }

  viewState() { return { scale: this.canvas.ds.scale, offset: Array.from(this.canvas.ds.offset) }; }

  // Shows a snapshot taken by the change tracker (undo, redo, switching tabs): the graph
  // exactly as serialised, nothing re-laid-out; the view stays unless `ds` is given.
  async applyGraphState(state, ds = null) {
    const data = typeof state === "string" ? JSON.parse(state) : state;
    this.clearRunState();
    this.missingTypes = registerMissingTypes(data);
    this.graph.configure(data);
    if (ds) { this.canvas.ds.scale = ds.scale; this.canvas.ds.offset = ds.offset.slice(); }
    this.panels.showMissing(this.missingTypes);
    this.canvas.setDirty(true, true);
  }

  // --- loading and saving workflows ------------------------------------------------

  async loadDefault() {
    const res = await fetch("default_workflow.json", { cache: "no-store" });
    const wf = await res.json();
    await this.loadGraphData(wf);
    // The stock default names ComfyUI's checkpoint; pick an installed one if that is absent.
    for (const n of this.graph._nodes) {
      for (const w of n.widgets || []) {
        if (w.name === "ckpt_name" && w.type === "combo") {
          const vals = w.options.values || [];
          if (vals.length && !vals.includes(w.value)) w.value = vals[0];
        }
      }
    }
  }

  // data: a litegraph workflow or an API prompt. Returns true when loaded.
  async loadGraphData(data, { quiet = false, ds = null } = {}) {
    this.clearRunState();
    this.nodeErrors = {};
    if (isWorkflow(data)) {
      this.missingTypes = registerMissingTypes(data);
      this.graph.clear();
      this.graph.configure(data);
      ds = ds || data.extra?.ds;
      if (ds) {
        this.canvas.ds.offset = ds.offset ? Array.from(ds.offset) : [0, 0];
        this.canvas.ds.scale = ds.scale || 1;
      }
      fitLoadedSizes(this.graph);
    } else if (isApiPrompt(data)) {
      this.missingTypes = apiPromptToGraph(this.graph, data);
    } else {
      if (!quiet) this.showError("this file holds no workflow (no litegraph graph and no API prompt)");
      return false;
    }
    if (!ds) this.fitView();
    this.panels.showMissing(this.missingTypes);
    this.canvas.setDirty(true, true);
    return true;
  }

  fitView() {
    const nodes = this.graph._nodes;
    if (!nodes.length) return;
    let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
    for (const n of nodes) {
      x0 = Math.min(x0, n.pos[0]); y0 = Math.min(y0, n.pos[1] - LG.NODE_TITLE_HEIGHT);
      x1 = Math.max(x1, n.pos[0] + n.size[0]); y1 = Math.max(y1, n.pos[1] + n.size[1]);
    }
    const c = this.canvas.canvas;
    const scale = Math.min(1, Math.max(0.2, Math.min((c.width - 40) / (x1 - x0), (c.height - 40) / (y1 - y0))));
    this.canvas.ds.scale = scale;
    this.canvas.ds.offset = [20 / scale - x0, 20 / scale - y0];
  }

  // The workflow as ComfyUI saves it: litegraph's serialisation plus the view in extra.ds.
  serializeWorkflow() {
    const wf = this.graph.serialize();
    wf.extra = { ...(wf.extra || {}), ds: { scale: this.canvas.ds.scale, offset: Array.from(this.canvas.ds.offset) } };
    return wf;
  }

  // Export: the workflow as a downloaded file (the server copy is workflows.js's job).
  exportWorkflow() {
    const wf = this.serializeWorkflow();
    const blob = new Blob([JSON.stringify(wf, null, 2)], { type: "application/json" });
    const a = document.createElement("a");
    a.href = URL.createObjectURL(blob);
    const t = this.workflows.active;
    a.download = `${t && t.path ? t.path.replace(/^workflows\//, "").replace(/\.json$/, "") : "workflow"}.json`;
    document.body.appendChild(a); a.click(); a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 1000);
  }

  async loadFile(file) {
    const isPng = file.type === "image/png" || /\.png$/i.test(file.name);
    if (isPng) {
      let meta;
      try { meta = await readComfyMetadata(await file.arrayBuffer()); }
      catch (e) { this.showError(`${file.name}: ${e.message}`); return false; }
      if (meta.workflow && isWorkflow(meta.workflow)) return this.loadGraphData(meta.workflow);
      if (meta.prompt && isApiPrompt(meta.prompt)) return this.loadGraphData(meta.prompt);
      this.showError(`${file.name}: no workflow or prompt found in this PNG`);
      return false;
    }
    if (file.type === "application/json" || /\.json$/i.test(file.name)) {
      let data;
      try { data = JSON.parse(await file.text()); } catch (e) { this.showError(`${file.name}: ${e.message}`); return false; }
      if (data && data.workflow && isWorkflow(data.workflow)) data = data.workflow;
      return this.loadGraphData(data);
    }
    this.showError(`${file.name}: drop a PNG made by latentd/ComfyUI or a workflow .json`);
    return false;
  }

  // --- queueing --------------------------------------------------------------------

  batchCount() { return Math.max(1, Math.min(100, parseInt(this.$("batch-count").value, 10) || 1)); }

  // front: ComfyUI's Ctrl+Shift+Enter, the prompt goes before the pending ones.
  async queue(batchCount = 1, { front = false } = {}) {
    this.nodeErrors = {};
    this.canvas.setDirty(true, true);
    for (let i = 0; i < batchCount; i++) {
      let p;
      try { p = graphToPrompt(this.graph); }
      catch (e) { this.showError(e.message); return null; }
      const r = await api.queuePrompt(p.output, this.serializeWorkflow(), { front });
      if (!r.ok) {
        this.showPromptError(r.body);
        return null;
      }
      if (r.body.node_errors && Object.keys(r.body.node_errors).length) this.showPromptError({ error: { message: "Some outputs failed validation and were skipped", details: "" }, node_errors: r.body.node_errors });
      // The socket may have announced this prompt (execution_start, executing) before the
      // POST answered: fill in the entry those events made instead of replacing it, which
      // lost the finished nodes and showed 0 % near the end of the run.
      const entry = this.promptEntry(r.body.prompt_id);
      entry.total = Object.keys(p.output).length;
      this.lastPromptId = r.body.prompt_id;
      for (const n of this.graph._nodes) for (const w of n.widgets || []) if (w.linkedWidget) applySeedControl(w);
      this.canvas.setDirty(true, true);
    }
    this.panels.refreshQueue();
    return this.lastPromptId;
  }

  showPromptError(body) {
    const err = body.error || {};
    this.nodeErrors = body.node_errors || {};
    const lines = [];
    for (const [id, ne] of Object.entries(this.nodeErrors)) {
      const node = this.graph.getNodeById(Number(id));
      const title = node ? `#${id} ${node.title}` : `#${id}`;
      for (const e of ne.errors || []) lines.push({ node: title, cls: ne.class_type, text: `${e.message}: ${e.details}` });
    }
    this.lastError = { message: err.message || "Prompt rejected", details: err.details || "", nodes: lines };
    this.panels.showErrorDialog(this.lastError);
    this.canvas.setDirty(true, true);
  }

  showError(message, details = "") {
    this.lastError = { message, details, nodes: [] };
    this.panels.showErrorDialog(this.lastError);
  }

  // --- live execution state ---------------------------------------------------------

  clearRunState() {
    this.runningNodeId = null;
    this.nodeProgress = {};
    for (const n of this.graph?._nodes || []) if (n.previewImg) n.endLivePreview();
  }

  promptEntry(id) {
    return this.myPrompts[id] || (this.myPrompts[id] = { total: 0, done: new Set(), cached: new Set() });
  }

  nodeFor(id) { return id == null ? null : this.graph.getNodeById(Number(id)); }

  // Nodes finished of the nodes this prompt really runs (cached ones are skipped, so they
  // count neither way), plus the running node's steps as a fraction of one node.
  overallProgress() {
    const p = this.myPrompts[this.runningPromptId];
    if (!p || !p.total) return null;
    const todo = Math.max(1, p.total - p.cached.size);
    let done = 0;
    for (const id of p.done) if (!p.cached.has(id)) done++;
    let frac = 0;
    const cur = this.nodeProgress[this.runningNodeId];
    if (cur && cur.max > 0 && !p.done.has(String(this.runningNodeId))) frac = Math.min(1, cur.value / cur.max);
    return Math.min(1, (done + frac) / todo);
  }

  updateProgressBar() {
    const cur = this.nodeProgress[this.runningNodeId];
    const overall = this.overallProgress();
    const node = this.nodeFor(this.runningNodeId);
    this.$("progress-overall").style.width = `${Math.round((overall ?? 0) * 100)}%`;
    this.$("progress-node").style.width = cur && cur.max ? `${Math.round((cur.value / cur.max) * 100)}%` : "0%";
    let text = "";
    if (this.runningPromptId) {
      text = node ? `${node.title}` : "running";
      if (cur && cur.max > 1) text += ` ${cur.value}/${cur.max}`;
      if (overall != null) text += ` · ${Math.round(overall * 100)}%`;
    }
    this.$("progress-text").textContent = text;
    this.canvas.setDirty(true, false);
  }

  bindSocket() {
    api.addEventListener("socket", (e) => {
      const el = this.$("socket-state");
      el.textContent = e.detail.connected ? "connected" : "reconnecting…";
      el.className = e.detail.connected ? "ok" : "bad";
    });
    api.addEventListener("reconnected", async () => {
      this.panels.refreshAll();
      // The server was down when the page loaded: node types come now, then the graph again.
      if (!Object.keys(this.objectInfo).length) {
        try {
          const wf = this.serializeWorkflow();
          await this.loadNodeDefs();
          this.panels.hideErrorDialog();
          if (wf.nodes.length) await this.loadGraphData(wf); else await this.loadDefault();
        } catch (e) { this.showError(`could not load node definitions: ${e.message}`); }
      }
    });
    api.addEventListener("status", (e) => {
      const q = e.detail.status?.exec_info?.queue_remaining;
      if (q != null) this.$("queue-size").textContent = `queue: ${q}`;
      this.panels.refreshQueue();
    });
    api.addEventListener("execution_start", (e) => {
      this.clearRunState();
      this.runningPromptId = e.detail.prompt_id;
      this.promptEntry(this.runningPromptId).startedAt = Date.now();
      this.setStatus(""); // the last run's "done" / "interrupted" no longer applies
      this.updateProgressBar();
      this.panels.refreshQueue();
    });
    api.addEventListener("execution_cached", (e) => {
      const p = this.promptEntry(e.detail.prompt_id);
      p.cached = new Set((e.detail.nodes || []).map(String));
    });
    api.addEventListener("executing", (e) => {
      const d = e.detail;
      const prev = this.runningNodeId;
      if (prev != null && this.runningPromptId) this.promptEntry(this.runningPromptId).done.add(String(prev));
      if (d.node == null) {
        this.runningNodeId = null;
        this.nodeProgress = {};
        this.runningPromptId = null;
        this.panels.refreshQueue();
        this.panels.refreshHistory();
      } else {
        this.runningNodeId = d.display_node || d.node;
      }
      this.updateProgressBar();
    });
    api.addEventListener("progress", (e) => {
      const d = e.detail;
      this.nodeProgress[d.node] = { value: d.value, max: d.max, state: "running" };
      if (this.runningNodeId == null) this.runningNodeId = d.node;
      this.updateProgressBar();
    });
    api.addEventListener("progress_state", (e) => {
      const p = e.detail.prompt_id ? this.promptEntry(e.detail.prompt_id) : null;
      for (const [id, s] of Object.entries(e.detail.nodes || {})) {
        const nid = String(s.display_node_id || id);
        this.nodeProgress[nid] = { value: s.value, max: s.max, state: s.state };
        if (p && s.state === "finished") p.done.add(nid);
      }
      this.updateProgressBar();
    });
    api.addEventListener("b_preview", (e) => {
      const node = this.nodeFor(this.runningNodeId);
      const url = URL.createObjectURL(e.detail);
      const img = new Image();
      img.onload = () => {
        if (this.previewUrl) URL.revokeObjectURL(this.previewUrl);
        this.previewUrl = url;
        this.previewCount = (this.previewCount || 0) + 1;
        if (node) node.setLivePreview(img);
      };
      img.src = url;
    });
    api.addEventListener("executed", (e) => {
      const d = e.detail;
      const images = d.output?.images || [];
      const node = this.nodeFor(d.display_node || d.node);
      if (node && images.length) node.setImages(images.map((i) => api.viewUrl(i)));
      this.panels.addGallery(images);
    });
    api.addEventListener("execution_error", (e) => {
      const d = e.detail;
      this.nodeErrors = { [d.node_id]: { errors: [], class_type: d.node_type } };
      this.showError(`Error in ${d.node_type} (#${d.node_id}): ${d.exception_type || "error"}`, (d.exception_message || "").trim());
      this.finishRun();
    });
    api.addEventListener("execution_interrupted", (e) => {
      this.setStatus(`interrupted at #${e.detail.node_id} ${e.detail.node_type || ""}`, 15000);
      this.lastInterrupted = e.detail;
      this.finishRun();
    });
    api.addEventListener("execution_success", (e) => {
      const p = this.myPrompts[e.detail.prompt_id];
      const secs = p && p.startedAt ? ` in ${((Date.now() - p.startedAt) / 1000).toFixed(1)} s` : "";
      this.setStatus(`done${secs}`, 10000);
    });
  }

  finishRun() {
    this.runningNodeId = null;
    this.nodeProgress = {};
    this.updateProgressBar();
    this.panels.refreshHistory();
  }

  // A status line that is only true for a while (done, saved…) clears itself after ttl ms,
  // so the bar never shows a message about a run long gone.
  setStatus(text, ttl = 0) {
    this.$("status-text").textContent = text;
    clearTimeout(this.statusTimer);
    if (ttl) this.statusTimer = setTimeout(() => { this.$("status-text").textContent = ""; }, ttl);
  }

  // --- toolbar and drop ------------------------------------------------------------

  bindToolbar() {
    this.$("btn-queue").addEventListener("click", () => this.queue(this.batchCount()));
    this.$("btn-interrupt").addEventListener("click", () => api.interrupt());
    this.$("btn-export").addEventListener("click", () => this.exportWorkflow());
    this.$("btn-load").addEventListener("click", () => this.openFileDialog());
    this.$("file-input").addEventListener("change", (e) => {
      const f = e.target.files[0];
      if (f) this.loadFile(f);
      e.target.value = "";
    });
    this.$("btn-default").addEventListener("click", () => this.loadDefault());
    this.$("btn-clear").addEventListener("click", () => { this.graph.clear(); this.nodeErrors = {}; this.canvas.setDirty(true, true); });
    this.$("btn-refresh").addEventListener("click", () => this.refreshNodeDefs());
  }

  openFileDialog() { this.$("file-input").click(); }

  // ComfyUI's R: node definitions again (new checkpoints appear in the combos), same graph.
  async refreshNodeDefs() {
    const wf = this.graph.serialize();
    const ds = this.viewState();
    await this.loadNodeDefs();
    await this.loadGraphData(wf, { ds });
  }

  collapseSelected() {
    for (const n of selectedNodes(this.canvas)) n.collapse();
    this.canvas.setDirty(true, true);
  }

  // mode 2 = never (muted), 4 = bypass (ComfyUI's extra mode); pressing again restores 0.
  toggleMode(mode) {
    const sel = Object.values(this.canvas.selected_nodes || {});
    const all = sel.length && sel.every((n) => n.mode === mode);
    for (const n of sel) n.mode = all ? 0 : mode;
    this.canvas.setDirty(true, true);
  }

  bindDrop() {
    // Capture phase: a file dropped on a node with onDropFile (LoadImage) goes to that node,
    // anything else dropped anywhere on the page is read as a workflow.
    document.addEventListener("dragover", (e) => e.preventDefault(), true);
    document.addEventListener("drop", (e) => {
      const files = e.dataTransfer && e.dataTransfer.files;
      if (!files || !files.length) return;
      e.preventDefault(); e.stopPropagation();
      const file = files[0];
      let node = null;
      if (e.target === this.canvas.canvas) {
        const pos = this.canvas.convertEventToCanvasOffset(e);
        node = this.graph.getNodeOnPos(pos[0], pos[1]);
      }
      if (node && node.onDropFile && file.type.startsWith("image/")) node.onDropFile(file);
      else this.loadFile(file);
    }, true);
  }
}

export const app = new App();
window.app = app;
window.api = api;
app.setup().catch((e) => { console.error(e); app.showError(String(e)); });

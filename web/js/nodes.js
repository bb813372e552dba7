// nodes.js — turns /object_info into litegraph node types.
// One litegraph type per ComfyUI class (type name = class name). Widget inputs become
// litegraph widgets, typed inputs become slots whose type string is the ComfyUI type, so
// LiteGraph.isValidConnection only lets matching types connect ("*" and comma lists as
// litegraph defines them). Hidden inputs are not shown (the server fills them).
import { api } from "./api.js";
import { imageMenuOptions } from "./image_actions.js";

const LG = window.LiteGraph;
export const SEED_CONTROL_VALUES = ["fixed", "increment", "decrement", "randomize"];
const MIN_WIDTH = 220;

// litegraph 0.7 keeps pos and size in Float32Arrays (pos one of length 10), which
// JSON.stringify writes as {"0": x, "1": y, …}. ComfyUI writes and expects [x, y]: so do
// we, for saved files, the clipboard and the undo snapshots alike.
const serializeNode = LG.LGraphNode.prototype.serialize;
LG.LGraphNode.prototype.serialize = function () {
  const o = serializeNode.call(this);
  if (o.pos) o.pos = [o.pos[0], o.pos[1]];
  if (o.size) o.size = [o.size[0], o.size[1]];
  return o;
};

// --- widgets ---------------------------------------------------------------------

function decimalsOf(x) {
  const s = String(x);
  const i = s.indexOf(".");
  return i < 0 ? 0 : Math.min(s.length - i - 1, 6);
}

// litegraph's number widget moves by step*0.1 per click, so (like ComfyUI) we store step*10.
function addNumberWidget(node, name, type, opts) {
  const isInt = type === "INT";
  const step = opts.step != null ? opts.step : isInt ? 1 : 0.1;
  const round = isInt ? 1 : (opts.round != null && opts.round !== false ? opts.round : step);
  const precision = isInt ? 0 : Math.max(decimalsOf(round), decimalsOf(step), opts.precision || 0);
  const def = opts.default != null ? opts.default : (opts.min != null && opts.min > 0 ? opts.min : 0);
  const w = node.addWidget("number", name, def, function (v) {
    let x = Number(v);
    if (!Number.isFinite(x)) x = def;
    if (isInt) x = Math.round(x);
    else if (round) x = Math.round(x / round) * round;
    if (opts.min != null && x < opts.min) x = opts.min;
    if (opts.max != null && x > opts.max) x = opts.max;
    this.value = isInt ? x : Number(x.toFixed(precision));
  }, { min: opts.min, max: opts.max, step: step * 10, precision, round });
  w.comfyType = type;
  return w;
}

// Multi-line text: a box of wrapped lines that takes the node's spare height, so a prompt
// box grows when the node is resized (as ComfyUI's textarea does). Its height `_h` is
// settled while drawing (litegraph lays widgets out from computeSize as it draws them);
// while the node measures its minimum size the box counts as MIN_TEXT_H, so the node can
// always be made small again.
const MIN_TEXT_H = 60;
export function addMultilineWidget(node, name, value) {
  if (!node.measuresTextMin) {
    const computeSize = node.computeSize;
    node.computeSize = function (...a) {
      this.measuring = true;
      try { return computeSize.apply(this, a); } finally { this.measuring = false; }
    };
    node.measuresTextMin = true;
  }
  const w = {
    type: "customtext", name, value, options: { multiline: true }, comfyType: "STRING", _h: MIN_TEXT_H,
    computeSize(width) { return [width, node.measuring ? MIN_TEXT_H : this._h]; },
    draw(ctx, n, width, y) {
      const m = 15;
      let below = 0; // the widgets under this one keep their own heights
      for (const o of n.widgets.slice(n.widgets.indexOf(this) + 1)) below += (o.computeSize ? o.computeSize(width)[1] : LG.NODE_WIDGET_HEIGHT) + 4;
      const h = this._h = Math.max(MIN_TEXT_H, Math.floor(n.size[1] - y - below - 8));
      ctx.fillStyle = LG.WIDGET_BGCOLOR; ctx.strokeStyle = LG.WIDGET_OUTLINE_COLOR;
      ctx.beginPath(); ctx.rect(m, y, width - 2 * m, h); ctx.fill(); ctx.stroke();
      ctx.save(); ctx.beginPath(); ctx.rect(m, y, width - 2 * m, h); ctx.clip();
      ctx.fillStyle = LG.WIDGET_TEXT_COLOR; ctx.textAlign = "left"; ctx.font = "12px Arial";
      const lines = wrapText(ctx, String(this.value ?? ""), width - 2 * m - 10);
      if (!lines.length || (lines.length === 1 && !lines[0])) { ctx.fillStyle = LG.WIDGET_SECONDARY_TEXT_COLOR; lines.splice(0, 1, name); }
      lines.slice(0, Math.max(1, Math.floor((h - 4) / 14))).forEach((l, i) => ctx.fillText(l, m + 5, y + 15 + i * 14));
      ctx.restore();
    },
    mouse(event, pos, n) {
      if (event.type !== LG.pointerevents_method + "down") return false;
      setTimeout(() => editInPlace(n, this), 0); // after litegraph finishes the click
      return true;
    },
  };
  return node.addCustomWidget(w);
}

// A <textarea> laid exactly over the widget (at the canvas zoom) while it is edited; blur
// or Ctrl+Enter keeps the text, Escape drops the edit.
function editInPlace(node, w) {
  const app = window.app, canvas = app.canvas, ds = canvas.ds;
  document.querySelectorAll(".latentd-textedit").forEach((t) => t.blur());
  const m = 15, h = w._h || MIN_TEXT_H;
  const p = ds.convertOffsetToCanvas([node.pos[0] + m, node.pos[1] + w.last_y]);
  const ta = document.createElement("textarea");
  ta.className = "latentd-textedit";
  ta.value = String(w.value ?? "");
  Object.assign(ta.style, {
    left: `${p[0]}px`, top: `${p[1]}px`, width: `${(node.size[0] - 2 * m) * ds.scale}px`,
    height: `${h * ds.scale}px`, fontSize: `${Math.max(8, 12 * ds.scale)}px`,
  });
  let keep = true;
  const done = () => {
    if (!ta.isConnected) return;
    if (keep) w.value = ta.value;
    ta.remove();
    node.setDirtyCanvas(true, true);
    app.tracker?.check(); // the edit is one undo step
  };
  ta.addEventListener("blur", done);
  ta.addEventListener("keydown", (e) => {
    e.stopPropagation(); // keys belong to the text, not to litegraph or the page shortcuts
    if (e.key === "Escape") { keep = false; ta.blur(); }
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); ta.blur(); }
  });
  canvas.canvas.parentElement.appendChild(ta);
  ta.focus();
  // The canvas may move under it (drag, zoom): the edit ends then.
  canvas.canvas.addEventListener("pointerdown", () => ta.blur(), { once: true });
  canvas.canvas.addEventListener("wheel", () => ta.blur(), { once: true });
}

function wrapText(ctx, text, width) {
  const out = [];
  for (const para of text.split("\n")) {
    let line = "";
    for (const word of para.split(" ")) {
      const t = line ? line + " " + word : word;
      if (ctx.measureText(t).width > width && line) { out.push(line); line = word; } else line = t;
    }
    out.push(line);
  }
  return out;
}

// Seed companion: ComfyUI's "control after generate"; applied after each queued prompt,
// never sent to the server (its value IS saved in widgets_values, right after the seed).
function addSeedControl(node, target) {
  const w = node.addWidget("combo", "control_after_generate", "randomize", () => {}, { values: SEED_CONTROL_VALUES, serialize: false });
  w.linkedWidget = target;
  target.controlWidget = w;
  return w;
}

export function applySeedControl(w) {
  const t = w.linkedWidget;
  if (!t || t.disabled) return; // a linked seed is not ours to change
  // Like ComfyUI: stay within +-2^50 so the value survives doubles and JSON.
  const LIM = 1125899906842624;
  const min = Math.max(-LIM, t.options.min ?? 0);
  const max = Math.min(LIM, t.options.max ?? LIM);
  switch (w.value) {
    case "increment": t.value = Math.min(max, t.value + 1); break;
    case "decrement": t.value = Math.max(min, t.value - 1); break;
    case "randomize": t.value = Math.floor(Math.random() * (max - min + 1)) + min; break;
    default: break;
  }
}

// LoadImage: combo of input files + an upload button + preview of the chosen file.
function addImageUpload(node, comboWidget) {
  const show = () => node.setPreviewUrl(comboWidget.value ? api.viewUrl(parseAnnotated(comboWidget.value)) : null);
  const prev = comboWidget.callback;
  comboWidget.callback = function (v) { if (prev) prev.call(this, v); show(); };
  node.onConfigureDone = show;
  const upload = async (file) => {
    const r = await api.uploadImage(file);
    const name = r.subfolder ? `${r.subfolder}/${r.name}` : r.name;
    const values = comboWidget.options.values;
    if (!values.includes(name)) values.push(name);
    comboWidget.value = name;
    show();
    node.setDirtyCanvas(true, true);
    return name;
  };
  node.uploadFile = upload;
  node.onDropFile = (file) => { if (file.type.startsWith("image/")) upload(file).catch((e) => window.app.showError(String(e))); };
  node.addWidget("button", "choose file to upload", "image", () => {
    const input = document.createElement("input");
    input.type = "file"; input.accept = "image/*"; input.style.display = "none";
    input.className = "latentd-upload-input";
    input.addEventListener("change", () => {
      if (input.files.length) upload(input.files[0]).catch((e) => window.app.showError(String(e)));
      input.remove();
    });
    document.body.appendChild(input);
    input.click();
  }, { serialize: false });
  setTimeout(show, 0);
}

function parseAnnotated(value) {
  const m = /^(.*) \[(input|output|temp)\]$/.exec(value);
  let name = m ? m[1] : value, type = m ? m[2] : "input", subfolder = "";
  const i = name.lastIndexOf("/");
  if (i >= 0) { subfolder = name.slice(0, i); name = name.slice(i + 1); }
  return { filename: name, subfolder, type };
}

// --- image area drawn under the widgets (outputs, live preview, LoadImage preview) ----

function contentTop(node) {
  let y = Math.max(node.inputs?.length || 0, node.outputs?.length || 0) * LG.NODE_SLOT_HEIGHT + 6;
  for (const w of node.widgets || []) {
    const h = w.computeSize ? w.computeSize(node.size[0])[1] : LG.NODE_WIDGET_HEIGHT;
    if (w.last_y != null) y = Math.max(y, w.last_y + h + 4);
  }
  return y;
}

function drawImages(node, ctx) {
  const imgs = node.previewImg ? [node.previewImg] : (node.imgs || []);
  const ready = imgs.filter((i) => i && i.complete && i.naturalWidth);
  if (!ready.length) return;
  const top = contentTop(node) + 4;
  const w = node.size[0] - 10, h = node.size[1] - top - 5;
  if (h < 20) return;
  const n = ready.length, cols = Math.ceil(Math.sqrt(n)), rows = Math.ceil(n / cols);
  const cw = w / cols, ch = h / rows;
  ready.forEach((img, i) => {
    const s = Math.min(cw / img.naturalWidth, ch / img.naturalHeight);
    const dw = img.naturalWidth * s, dh = img.naturalHeight * s;
    const x = 5 + (i % cols) * cw + (cw - dw) / 2, y = top + Math.floor(i / cols) * ch + (ch - dh) / 2;
    ctx.drawImage(img, x, y, dw, dh);
  });
  if (node.previewImg) {
    ctx.fillStyle = "rgba(0,0,0,0.6)"; ctx.fillRect(5, top, 58, 16);
    ctx.fillStyle = "#fff"; ctx.font = "11px Arial"; ctx.textAlign = "left"; ctx.fillText("preview", 10, top + 12);
  }
}

// Grows a node to show images. The size it had before is remembered and is what gets saved
// while the node keeps the grown size (onSerialize below): results shown after a run are no
// edit, so they neither mark the workflow modified nor become undo steps, and a workflow
// saved after a run opens at its own size. A size the user sets wins from then on.
function ensureImageSpace(node) {
  const need = [Math.max(node.size[0], 240), Math.max(node.size[1], contentTop(node) + 220)];
  if (need[0] === node.size[0] && need[1] === node.size[1]) return;
  if (!node.grown || !sameSize(node.size, node.grown.to)) node.grown = { from: node.size.slice() };
  node.size[0] = need[0]; node.size[1] = need[1];
  node.grown.to = node.size.slice();
}

function sameSize(a, b) { return !!a && !!b && a[0] === b[0] && a[1] === b[1]; }

// The size that is saved: the one before any growth for images, unless resized since.
function savedSize(node) {
  return node.grown && sameSize(node.size, node.grown.to) ? node.grown.from.slice() : node.size.slice();
}

// Nodes that show images (outputs, LoadImage) keep room for them; any other node is cut
// down to what its slots and widgets need (a KSampler left tall by a live preview).
export function canShowImages(node) {
  return !!(node.constructor.nodeData?.output_node || node.uploadFile || node.imgs?.length);
}

export function fitToContent(node) {
  if (canShowImages(node) || node.flags?.collapsed || node.isMissing) return; // a missing node sized itself for its saved values
  const need = node.computeSize();
  if (node.size[1] > need[1] && !(node.widgets || []).some((w) => w.type === "customtext")) node.size[1] = need[1];
}

// After loading a workflow: stale preview space goes (see fitToContent).
export function fitLoadedSizes(graph) { for (const n of graph._nodes) fitToContent(n); }

// Overlays drawn in node space: executing outline, per-node progress, validation errors.
function drawOverlays(node, ctx) {
  const app = window.app;
  const TH = LG.NODE_TITLE_HEIGHT;
  const [w, h] = node.size;
  if (node.mode === 2 || node.mode === 4) { // muted grey, bypassed purple (as ComfyUI shows them)
    ctx.fillStyle = node.mode === 4 ? "rgba(160,0,200,0.35)" : "rgba(0,0,0,0.5)";
    ctx.fillRect(0, -TH, w, h + TH);
    ctx.fillStyle = "#fff"; ctx.font = "11px Arial"; ctx.textAlign = "right";
    ctx.fillText(node.mode === 4 ? "bypassed" : "muted", w - 6, -TH / 2 + 4);
  }
  if (app.runningNodeId != null && String(node.id) === String(app.runningNodeId)) {
    ctx.strokeStyle = "#0f0"; ctx.lineWidth = 3;
    ctx.strokeRect(-4, -TH - 4, w + 8, h + TH + 8); ctx.lineWidth = 1;
  }
  const p = app.nodeProgress[node.id];
  if (p && p.max > 0 && p.state !== "finished") {
    ctx.fillStyle = "rgba(0,200,0,0.8)";
    ctx.fillRect(0, -3, w * Math.min(1, p.value / p.max), 3);
  }
  const errs = app.nodeErrors[node.id];
  if (errs) {
    ctx.strokeStyle = "#f33"; ctx.lineWidth = 3;
    ctx.strokeRect(-4, -TH - 4, w + 8, h + TH + 8); ctx.lineWidth = 1;
    for (const e of errs.errors || []) {
      const name = e.extra_info && e.extra_info.input_name;
      if (!name) continue;
      const wi = (node.widgets || []).find((x) => x.name === name);
      const si = (node.inputs || []).findIndex((x) => x.name === name);
      ctx.strokeStyle = "#f33"; ctx.lineWidth = 2;
      if (wi && wi.last_y != null) {
        const hh = wi.computeSize ? wi.computeSize(w)[1] : LG.NODE_WIDGET_HEIGHT;
        ctx.strokeRect(10, wi.last_y - 1, w - 20, hh + 2);
      } else if (si >= 0) {
        const pos = node.getConnectionPos(true, si);
        ctx.beginPath(); ctx.arc(pos[0] - node.pos[0], pos[1] - node.pos[1], 8, 0, Math.PI * 2); ctx.stroke();
      }
      ctx.lineWidth = 1;
    }
  }
}

// --- node classes ---------------------------------------------------------------------

function inputNames(info, group) {
  const spec = info.input && info.input[group];
  if (!spec) return [];
  const order = info.input_order && info.input_order[group];
  return Array.isArray(order) ? order.filter((n) => n in spec) : Object.keys(spec);
}

function isWidgetType(type) {
  return Array.isArray(type) || type === "COMBO" || type === "INT" || type === "FLOAT" || type === "STRING" || type === "BOOLEAN";
}

function addInput(node, name, spec, optional) {
  const [type, opts = {}] = Array.isArray(spec) ? spec : [spec, {}];
  if (Array.isArray(type) || type === "COMBO") {
    const values = Array.isArray(type) ? type.slice() : (opts.options || []).slice();
    const def = opts.default !== undefined && values.includes(opts.default) ? opts.default : values[0];
    const w = node.addWidget("combo", name, def ?? "", () => {}, { values });
    w.comfyType = "COMBO";
    if (opts.image_upload) addImageUpload(node, w);
  } else if (type === "INT" || type === "FLOAT") {
    const w = addNumberWidget(node, name, type, opts);
    if (opts.control_after_generate) addSeedControl(node, w);
  } else if (type === "STRING") {
    if (opts.multiline) addMultilineWidget(node, name, opts.default ?? "");
    else { const w = node.addWidget("text", name, opts.default ?? "", function (v) { this.value = v; }); w.comfyType = "STRING"; }
  } else if (type === "BOOLEAN") {
    const w = node.addWidget("toggle", name, !!opts.default, () => {}, { on: opts.label_on || "true", off: opts.label_off || "false" });
    w.comfyType = "BOOLEAN";
  } else {
    const slot = node.addInput(name, String(type));
    if (optional) slot.shape = LG.CARD_SHAPE; // hint: optional socket
  }
}

function commonPrototype(proto) {
  proto.onDrawBackground = function (ctx) { if (!this.flags.collapsed) drawImages(this, ctx); };
  proto.onDrawForeground = function (ctx) { if (!this.flags.collapsed) drawOverlays(this, ctx); };
  proto.setImages = function (urls) {
    this.previewImg = null;
    // Room for the images is made once one has loaded (a broken URL leaves the node as is).
    this.imgs = urls.map((u) => {
      const i = new Image();
      i.onload = () => { ensureImageSpace(this); this.setDirtyCanvas(true, true); };
      i.src = u;
      return i;
    });
    this.setDirtyCanvas(true, true);
  };
  proto.setPreviewUrl = function (url) {
    if (!url) { this.imgs = []; this.setDirtyCanvas(true, true); return; }
    this.setImages([url]);
  };
  proto.setLivePreview = function (img) {
    this.previewImg = img;
    ensureImageSpace(this);
    this.setDirtyCanvas(true, true);
  };
  // The preview is gone (a new run, a new graph): the node returns to its own size.
  proto.endLivePreview = function () {
    this.previewImg = null;
    if (this.grown && sameSize(this.size, this.grown.to) && !this.imgs?.length) { this.size = this.grown.from.slice(); this.grown = null; }
    this.setDirtyCanvas(true, true);
  };
  proto.onSerialize = function (o) { o.size = savedSize(this); };
}

export function registerNodeTypes(objectInfo) {
  const registered = [];
  for (const [name, info] of Object.entries(objectInfo)) {
    if (!info || typeof info !== "object") continue;
    class ComfyNode extends LG.LGraphNode {
      constructor(title) {
        super(title || info.display_name || name);
        this.comfyClass = name;
        this.serialize_widgets = true;
        this.properties = { "Node name for S&R": name };
        for (const group of ["required", "optional"])
          for (const n of inputNames(info, group)) addInput(this, n, info.input[group][n], group === "optional");
        const outs = info.output || [];
        outs.forEach((t, i) => {
          const label = (info.output_name && info.output_name[i]) || t;
          const slot = this.addOutput(label, Array.isArray(t) ? "COMBO" : String(t));
          if (info.output_is_list && info.output_is_list[i]) slot.shape = LG.GRID_SHAPE;
        });
        const s = this.computeSize();
        this.size = [Math.max(MIN_WIDTH, s[0]), s[1]];
        if (info.output_node && this.size[1] < 120) this.size[1] = 120;
      }
      onConfigure() {
        // Newer ComfyUI frontends save a socket for every widget ({widget: {name}}). Unlinked
        // ones add nothing here (the widget holds the value): drop them and renumber the
        // target slots of the links that remain. Linked ones stay and win over the widget.
        if (this.inputs && this.inputs.some((i) => i.widget && i.link == null)) {
          this.inputs = this.inputs.filter((i) => !(i.widget && i.link == null));
          this.inputs.forEach((inp, idx) => { const l = inp.link != null && this.graph && this.graph.links[inp.link]; if (l) l.target_slot = idx; });
        }
        this.syncWidgetInputs();
        if (this.onConfigureDone) setTimeout(() => this.onConfigureDone(), 0);
      }
      // A widget whose socket is linked is greyed out: the link provides the value.
      syncWidgetInputs() {
        for (const w of this.widgets || []) {
          const inp = (this.inputs || []).find((i) => i.widget && i.widget.name === w.name);
          w.disabled = !!(inp && inp.link != null);
        }
        this.setDirtyCanvas(true, true);
      }
      onConnectionsChange() { if (this.graph) this.syncWidgetInputs(); }
      // Right-click: turn a widget into a socket (to feed it from e.g. a primitive) and back.
      getExtraMenuOptions(canvas, options) {
        const add = [];
        for (const w of this.widgets || []) {
          if (!isComfyWidget(w)) continue;
          const idx = (this.inputs || []).findIndex((i) => i.widget && i.widget.name === w.name);
          if (idx < 0) {
            add.push({ content: `Convert ${w.name} to input`, callback: () => {
              this.addInput(w.name, w.comfyType === "COMBO" ? "COMBO" : w.comfyType || "*", { widget: { name: w.name } });
              this.setSize([this.size[0], Math.max(this.size[1], this.computeSize()[1])]);
              this.syncWidgetInputs();
            } });
          } else if (this.inputs[idx].link == null) {
            add.push({ content: `Convert ${w.name} back to widget`, callback: () => { this.removeInput(idx); this.syncWidgetInputs(); } });
          }
        }
        const img = imageMenuOptions(this);
        if (img) add.push(...img, null);
        return add.length ? add : null; // litegraph puts these at the top of the node menu
      }
    }
    ComfyNode.title = info.display_name || name;
    ComfyNode.comfyClass = name;
    ComfyNode.nodeData = info;
    ComfyNode.category = info.category || "uncategorized";
    ComfyNode.desc = info.description || "";
    commonPrototype(ComfyNode.prototype);
    LG.registerNodeType(name, ComfyNode);
    ComfyNode.category = info.category || "uncategorized"; // registerNodeType derives it from the name
    registered.push(name);
  }
  return registered;
}

// A class that the server does not know (e.g. a workflow made elsewhere). It keeps its
// serialised slots and widget values so that saving round-trips, and draws itself in red.
export function registerMissingType(type) {
  if (LG.registered_node_types[type]) return;
  class MissingNode extends LG.LGraphNode {
    constructor(title) {
      super(title || type);
      this.comfyClass = type;
      this.isMissing = true;
      this.color = "#622"; this.bgcolor = "#311";
      this.size = [240, 80];
    }
    onConfigure(info) {
      this.savedWidgetValues = info.widgets_values;
      const slots = Math.max(this.inputs?.length || 0, this.outputs?.length || 0) * LG.NODE_SLOT_HEIGHT;
      const need = slots + 24 + 14 * Math.min(6, (this.savedWidgetValues || []).length);
      if (this.size[1] < need) this.size[1] = need;
    }
    onSerialize(o) { if (this.savedWidgetValues) o.widgets_values = this.savedWidgetValues; }
    onDrawForeground(ctx) {
      drawOverlays(this, ctx);
      ctx.fillStyle = "#f88"; ctx.font = "12px Arial"; ctx.textAlign = "left";
      const y = Math.max(this.inputs?.length || 0, this.outputs?.length || 0) * LG.NODE_SLOT_HEIGHT + 16;
      ctx.fillText(`missing node type: ${type}`, 8, Math.min(y, this.size[1] - 6));
      // Saved widget values, so the user can see what the node held.
      ctx.fillStyle = "#caa";
      (this.savedWidgetValues || []).slice(0, 6).forEach((v, i) => {
        const t = String(typeof v === "object" ? JSON.stringify(v) : v).replace(/\s+/g, " ");
        const yy = y + 16 + i * 14;
        if (yy < this.size[1] - 4) ctx.fillText(t.length > 40 ? t.slice(0, 39) + "…" : t, 8, yy);
      });
    }
  }
  MissingNode.title = type;
  MissingNode.category = "missing";
  MissingNode.skip_list = true; // not offered in menus / search
  LG.registerNodeType(type, MissingNode);
  MissingNode.category = "missing";
}

export function isComfyWidget(w) {
  return w && w.name && !(w.options && w.options.serialize === false) && w.type !== "button";
}

export { isWidgetType };

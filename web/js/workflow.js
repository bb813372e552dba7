// workflow.js — the graph in its two shapes: litegraph's serialised workflow (version 0.4,
// what ComfyUI saves and embeds in PNGs) and the API prompt that POST /prompt takes.
import { isComfyWidget, registerMissingType } from "./nodes.js";

const LG = window.LiteGraph;
const MODE_NEVER = 2, MODE_BYPASS = 4;

export function isApiPrompt(data) {
  if (!data || typeof data !== "object" || Array.isArray(data)) return false;
  const vals = Object.values(data);
  return vals.length > 0 && vals.every((v) => v && typeof v === "object" && typeof v.class_type === "string");
}

export function isWorkflow(data) {
  return !!data && typeof data === "object" && Array.isArray(data.nodes) && ("links" in data);
}

// Follow a link to what really produces the value: bypassed nodes pass through their first
// input of the same type (ComfyUI's bypass), Reroutes pass through, a legacy PrimitiveNode
// yields its value. Returns {link}, {value} or null (muted / unconnected: nothing to send).
function resolveLink(graph, linkId) {
  let link = graph.links[linkId];
  for (let guard = 0; link && guard < 100; guard++) {
    const src = graph.getNodeById(link.origin_id);
    if (!src || src.mode === MODE_NEVER) return null;
    if (src.isVirtual) {
      if (src.primitiveValue) return { value: src.primitiveValue() };
      const inp = (src.inputs || [])[0];
      if (!inp || inp.link == null) return null;
      link = graph.links[inp.link];
      continue;
    }
    if (src.mode !== MODE_BYPASS) return { link };
    const outType = src.outputs?.[link.origin_slot]?.type;
    const inp = (src.inputs || []).find((i) => i.link != null && i.type === outType);
    if (!inp) return null;
    link = graph.links[inp.link];
  }
  return null;
}

// Graph → {output: API prompt, workflow}. Throws an Error (with .missing) when the graph
// holds node types the server does not have: they cannot be converted faithfully.
export function graphToPrompt(graph) {
  const workflow = graph.serialize();
  const missing = [...new Set(graph._nodes.filter((n) => n.isMissing && n.mode !== MODE_NEVER && n.mode !== MODE_BYPASS).map((n) => n.type))];
  if (missing.length) {
    const e = new Error(`the server does not know these node types: ${missing.join(", ")}`);
    e.missing = missing;
    throw e;
  }
  const output = {};
  const order = graph.computeExecutionOrder(false) || graph._nodes;
  for (const node of order) {
    if (node.mode === MODE_NEVER || node.mode === MODE_BYPASS || node.isVirtual || !node.comfyClass) continue;
    const inputs = {};
    for (const w of node.widgets || []) {
      if (!isComfyWidget(w)) continue;
      let v = w.value;
      if (w.comfyType === "INT") v = Math.round(Number(v));
      else if (w.comfyType === "FLOAT") v = Number(v);
      inputs[w.name] = v;
    }
    for (const slot of node.inputs || []) {
      if (slot.link == null) continue;
      const r = resolveLink(graph, slot.link);
      if (!r) continue;
      inputs[slot.widget?.name || slot.name] = r.link ? [String(r.link.origin_id), r.link.origin_slot] : r.value;
    }
    output[String(node.id)] = { inputs, class_type: node.comfyClass, _meta: { title: node.title } };
  }
  // Drop links to nodes that were not emitted (muted) so the server sees no dangling ids.
  for (const n of Object.values(output))
    for (const [k, v] of Object.entries(n.inputs))
      if (Array.isArray(v) && v.length === 2 && typeof v[0] === "string" && !output[v[0]]) delete n.inputs[k];
  return { output, workflow };
}

export function registerMissingTypes(workflow) {
  const missing = [];
  for (const n of workflow.nodes || []) {
    if (n && n.type && !LG.registered_node_types[n.type]) { registerMissingType(n.type); missing.push(n.type); }
    else if (n && n.type && LG.registered_node_types[n.type].category === "missing") missing.push(n.type);
  }
  return [...new Set(missing)];
}

// Build a laid-out graph from an API prompt (a PNG without a workflow chunk, or a .json
// prompt). Columns follow link depth.
export function apiPromptToGraph(graph, prompt) {
  graph.clear();
  const missing = [];
  const nodes = {};
  for (const [id, def] of Object.entries(prompt)) {
    if (!LG.registered_node_types[def.class_type]) { registerMissingType(def.class_type); missing.push(def.class_type); }
    const node = LG.createNode(def.class_type, def._meta?.title);
    if (!node) continue;
    const numId = Number(id);
    if (Number.isInteger(numId) && numId > 0 && !graph.getNodeById(numId)) node.id = numId;
    graph.add(node);
    nodes[id] = node;
    for (const w of node.widgets || []) {
      if (!(w.name in def.inputs)) continue;
      const v = def.inputs[w.name];
      if (Array.isArray(v) && v.length === 2 && typeof v[0] === "string") continue;
      w.value = v;
      if (w.controlWidget) w.controlWidget.value = "fixed";
      if (w.type === "combo" && !w.options.values.includes(v)) w.options.values.push(v);
    }
  }
  const depth = {};
  const depthOf = (id, seen = new Set()) => {
    if (id in depth) return depth[id];
    if (seen.has(id) || !prompt[id]) return 0;
    seen.add(id);
    let d = 0;
    for (const v of Object.values(prompt[id].inputs || {}))
      if (Array.isArray(v) && v.length === 2 && typeof v[0] === "string") d = Math.max(d, depthOf(v[0], seen) + 1);
    return (depth[id] = d);
  };
  for (const [id, def] of Object.entries(prompt)) {
    const node = nodes[id];
    if (!node) continue;
    for (const [name, v] of Object.entries(def.inputs || {})) {
      if (!(Array.isArray(v) && v.length === 2 && typeof v[0] === "string")) continue;
      const src = nodes[v[0]];
      if (!src) continue;
      let slot = (node.inputs || []).findIndex((s) => s.name === name);
      if (slot < 0) slot = node.addInput(name, src.outputs?.[v[1]]?.type || "*") && node.inputs.length - 1;
      while (src.outputs.length <= v[1]) src.addOutput("out", "*"); // missing type: make its slot exist
      src.connect(v[1], node, slot);
    }
  }
  // Columns by depth; long chains wrap into bands of COLS columns stacked downwards.
  const COLS = 5, colY = {}, bandH = {};
  const place = [];
  for (const id of Object.keys(nodes)) {
    const d = depthOf(id), node = nodes[id];
    place.push([node, d, colY[d] || 0]);
    colY[d] = (colY[d] || 0) + node.size[1] + 60;
    const band = Math.floor(d / COLS);
    bandH[band] = Math.max(bandH[band] || 0, colY[d]);
  }
  const bandTop = (b) => { let y = 40; for (let i = 0; i < b; i++) y += (bandH[i] || 0) + 40; return y; };
  for (const [node, d, y] of place) node.pos = [40 + (d % COLS) * 330, bandTop(Math.floor(d / COLS)) + y];
  graph.setDirtyCanvas(true, true);
  return [...new Set(missing)];
}

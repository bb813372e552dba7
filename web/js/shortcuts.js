// shortcuts.js — ComfyUI's everyday keyboard shortcuts. litegraph itself already handles
// Ctrl+A (select all), Delete/Backspace, Ctrl+C, Ctrl+V and Ctrl+Shift+V (paste keeping the
// links into the pasted nodes) while the canvas has focus; everything else is bound here.
// Keys typed into a text field belong to that field: only the Ctrl shortcuts that make no
// sense inside a field (queue, save, open) pass through from there.

const LG = window.LiteGraph;

function inField(e) {
  const t = e.target;
  return t && (t.localName === "input" || t.localName === "textarea" || t.localName === "select" || t.isContentEditable);
}

// Selected nodes, in graph order.
export function selectedNodes(canvas) { return Object.values(canvas.selected_nodes || {}); }

// A group drawn around the selection (ComfyUI's Ctrl+G), with room for the group's title.
export function groupSelected(app) {
  const nodes = selectedNodes(app.canvas);
  if (!nodes.length) return null;
  const pad = 10, TH = LG.NODE_TITLE_HEIGHT;
  let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
  for (const n of nodes) {
    const h = n.flags.collapsed ? 0 : n.size[1];
    const w = n.flags.collapsed ? (n._collapsed_width || 100) : n.size[0];
    x0 = Math.min(x0, n.pos[0]); y0 = Math.min(y0, n.pos[1] - TH);
    x1 = Math.max(x1, n.pos[0] + w); y1 = Math.max(y1, n.pos[1] + h);
  }
  const g = new LG.LGraphGroup("Group");
  g.pos = [x0 - pad, y0 - pad - 34];
  g.size = [x1 - x0 + 2 * pad, y1 - y0 + 2 * pad + 34];
  app.graph.add(g);
  app.canvas.setDirty(true, true);
  return g;
}

export function bindShortcuts(app) {
  document.addEventListener("keydown", (e) => {
    const ctrl = e.ctrlKey || e.metaKey;
    const key = e.key.length === 1 ? e.key.toLowerCase() : e.key;
    const onCanvas = document.activeElement === app.canvas.canvas || document.activeElement === document.body;
    let handled = true;
    if (key === "Enter" && ctrl) app.queue(app.batchCount(), { front: e.shiftKey });
    else if (key === "Escape") { app.panels.hideErrorDialog(); handled = false; }
    else if (ctrl && key === "s") app.workflows.save(); // the browser's "save page" is never wanted here
    else if (ctrl && key === "o") app.openFileDialog();
    else if (inField(e)) handled = false;
    else if (ctrl && !e.shiftKey && key === "z") app.tracker.undo();
    else if (ctrl && (key === "y" || (e.shiftKey && key === "z"))) app.tracker.redo();
    else if (!onCanvas) handled = false;
    else if (ctrl && (key === "m" || key === "b")) app.toggleMode(key === "m" ? 2 : 4); // mute, bypass
    else if (ctrl && key === "g") groupSelected(app);
    else if (e.altKey && (key === "c" || e.code === "KeyC")) app.collapseSelected();
    else if (!ctrl && !e.altKey && key === "r") app.refreshNodeDefs();
    else if (!ctrl && !e.altKey && key === "q") app.panels.toggleTab("queue");
    else handled = false;
    if (handled) { e.preventDefault(); setTimeout(() => app.tracker.check(), 0); }
  });
}

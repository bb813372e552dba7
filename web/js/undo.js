// undo.js — undo/redo of graph edits by snapshots, the way ComfyUI's changeTracker does it.
// Instead of hooking every litegraph operation (add, remove, move, connect, widget change,
// paste, group, colour…), the graph is serialised after each user action (pointer up, key
// up, and explicit calls from code that edits the graph) and compared with the last known
// state; a difference becomes one undo step. This catches every kind of edit, including
// ones litegraph has no callback for, and undo restores exactly the serialised graph.
// The view (extra.ds: pan and zoom) is not part of the graph's serialisation, so panning is
// never an undo step. Each workflow tab owns its own history (see workflows.js): the
// tracker works on whichever `hist` object is attached.

const MAX_STEPS = 50; // as ComfyUI; a snapshot of a big graph is ~100 KB

export function newHistory(state = null) {
  return { undo: [], redo: [], current: state };
}

// `order` (execution order) is derived data that litegraph recomputes on configure but not
// after a paste: recomputing it first keeps a restored snapshot equal to what was stored.
export function snapshotOf(graph) {
  graph.updateExecutionOrder();
  const g = graph.serialize();
  g.nodes.sort((a, b) => a.id - b.id);
  return JSON.stringify(g);
}

export class ChangeTracker {
  // graph: the LGraph; apply(stateString): replaces the graph with a snapshot (async ok).
  constructor(graph, apply) {
    this.graph = graph;
    this.apply = apply;
    this.hist = newHistory();
    this.paused = 0;        // >0 while code replaces the graph (load, undo): no steps then
    this.onChange = null;   // called after the current state changed (tab markers)
    this.pointerDown = false;
  }

  // Nodes in id order: clicking a node brings it to the front, which reorders litegraph's
  // node list; stacking order is no edit and must not become an undo step.
  snapshot() { return snapshotOf(this.graph); }

  attach(hist) { this.hist = hist; if (hist.current == null) hist.current = this.snapshot(); }

  // Forget the past: the graph as it is now becomes the only state (a freshly opened file).
  reset() { this.hist.undo = []; this.hist.redo = []; this.hist.current = this.snapshot(); this.changed(); }

  changed() { if (this.onChange) this.onChange(); }

  // Records a step when the graph differs from the last known state. Cheap enough to call
  // after every input event: serialising a 100-node graph takes about a millisecond.
  check() {
    // Never in the middle of a drag, which would split one move into several steps (any
    // caller: the timers of the safety net and of persistence included).
    if (this.paused || this.pointerDown) return false;
    const s = this.snapshot();
    const h = this.hist;
    if (h.current == null) { h.current = s; return false; }
    if (s === h.current) return false;
    h.undo.push(h.current);
    if (h.undo.length > MAX_STEPS) h.undo.shift();
    h.redo = [];
    h.current = s;
    this.changed();
    return true;
  }

  async undo() { return this.step(this.hist.undo, this.hist.redo); }
  async redo() { return this.step(this.hist.redo, this.hist.undo); }

  async step(from, to) {
    this.check(); // an edit not yet recorded is undone first, not lost
    if (!from.length) return false;
    const target = from.pop();
    to.push(this.hist.current);
    this.hist.current = target;
    this.paused++;
    try { await this.apply(target); } finally { this.paused--; }
    this.changed();
    return true;
  }

  // Checks after the browser has finished dispatching an input event, so that litegraph's
  // own handlers (which run on the same event, and for combos on the click that follows
  // pointerup) have already changed the graph.
  // And before any new input acts (capture phase: before litegraph's handlers), an edit
  // still unrecorded is recorded: timers run after pending input events, so two quick
  // pastes (30 ms apart, as a script types) used to merge into one step.
  bind(target = window) {
    const later = () => setTimeout(() => this.check(), 0);
    target.addEventListener("keydown", () => this.check(), true);
    target.addEventListener("pointerdown", () => { this.check(); this.pointerDown = true; }, true);
    target.addEventListener("pointerup", () => { this.pointerDown = false; later(); }, true);
    target.addEventListener("click", later, true);
    target.addEventListener("keyup", later, true);
    // A safety net for edits made without any input event (async callbacks).
    setInterval(() => this.check(), 1000);
  }
}

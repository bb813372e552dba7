// linkmode.js — the link render modes ComfyUI offers (spline, linear, straight, hidden),
// chosen in the toolbar and remembered in localStorage. litegraph 0.7 knows the first three;
// "hidden" skips drawing links altogether (they still exist and still connect).

const LG = window.LiteGraph;
const KEY = "latentd.linkMode";
const MODES = { spline: LG.SPLINE_LINK, linear: LG.LINEAR_LINK, straight: LG.STRAIGHT_LINK };

export function bindLinkMode(canvas, select) {
  const draw = canvas.drawConnections;
  canvas.drawConnections = function (ctx) { if (!this.links_hidden) draw.call(this, ctx); };
  const apply = (mode) => {
    if (!(mode in MODES) && mode !== "hidden") mode = "spline";
    canvas.links_hidden = mode === "hidden";
    if (mode in MODES) canvas.links_render_mode = MODES[mode];
    select.value = mode;
    try { localStorage.setItem(KEY, mode); } catch { /* private mode */ }
    canvas.setDirty(true, true);
  };
  select.addEventListener("change", () => apply(select.value));
  apply(localStorage.getItem(KEY) || "spline");
}

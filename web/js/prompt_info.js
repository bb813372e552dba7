// prompt_info.js — what the queue and history panels say about a prompt: when it was
// queued (extra_data.create_time, which this page sends), started and finished (the
// timestamps, in ms, of its history status messages), how long it ran, its seed and the
// first words of its positive prompt (found by following the sampler's `positive` input
// to the text encoder that feeds it). Pure functions over the server's JSON.

const SEED_INPUTS = ["seed", "noise_seed"];
const isLink = (v) => Array.isArray(v) && v.length === 2 && typeof v[0] === "string";

// The first text found walking up from `id` (through e.g. ConditioningCombine), or null.
function textAbove(prompt, id, depth = 0) {
  const n = prompt[id];
  if (!n || depth > 4) return null;
  const inputs = n.inputs || {};
  for (const k of ["text", "text_g", "text_l", "prompt"]) if (typeof inputs[k] === "string") return inputs[k];
  for (const v of Object.values(inputs)) if (isLink(v)) { const t = textAbove(prompt, v[0], depth + 1); if (t != null) return t; }
  return null;
}

export function promptSummary(prompt) {
  let seed = null, positive = null;
  for (const n of Object.values(prompt || {})) {
    const inputs = n.inputs || {};
    if (seed == null) for (const k of SEED_INPUTS) if (typeof inputs[k] === "number") { seed = inputs[k]; break; }
    if (positive == null && isLink(inputs.positive)) positive = textAbove(prompt, inputs.positive[0]);
  }
  if (positive == null) { // no sampler: the first text encoder's text
    const enc = Object.values(prompt || {}).find((n) => typeof n.inputs?.text === "string");
    if (enc) positive = enc.inputs.text;
  }
  return { seed, positive };
}

export function firstWords(text, n = 8) {
  if (!text) return "";
  const w = text.trim().split(/\s+/);
  return w.slice(0, n).join(" ") + (w.length > n ? " …" : "");
}

// {queued, started, ended} in ms since the epoch (null when unknown) for a history entry.
export function historyTimes(entry) {
  const msgs = entry.status?.messages || [];
  const at = (type) => msgs.find((m) => m[0] === type)?.[1]?.timestamp ?? null;
  const end = ["execution_success", "execution_error", "execution_interrupted"].map(at).find((t) => t != null) ?? null;
  return { queued: entry.prompt?.[3]?.create_time ?? null, started: at("execution_start"), ended: end };
}

export function fmtClock(ms) {
  if (ms == null) return "—";
  const d = new Date(ms), p = (x) => String(x).padStart(2, "0");
  return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

export function fmtDuration(ms) {
  if (ms == null || ms < 0) return "";
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
}

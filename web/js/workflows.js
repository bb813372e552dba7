// workflows.js — named workflows kept on the server, open in tabs.
// A saved workflow is the file `workflows/<name>.json` under the user's data, read and
// written through /userdata exactly as ComfyUI's frontend does, so both UIs see the same
// files. Each open workflow is a tab holding its own graph state (when not shown), view,
// undo history and the state it was last saved/opened with; a tab whose graph differs from
// that state is "modified" (a dot on the tab and in the page title). The open tabs are
// kept in localStorage so a reload brings them back.
import { api } from "./api.js";
import { newHistory } from "./undo.js";

const DIR = "workflows";
const STORE_KEY = "latentd.tabs";

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

export const pathOf = (name) => `${DIR}/${name.replace(/\.json$/i, "")}.json`;
export const nameOf = (path) => path.slice(DIR.length + 1).replace(/\.json$/i, "");

let nextKey = 1;

export class Workflows {
  constructor(app) {
    this.app = app;
    this.tabs = [];   // {key, path|null, saved: state string, hist, parked: {state, ds}|null}
    this.active = null;
    this.files = [];  // last listing: [{path, size, modified}]
    this.bar = document.getElementById("wf-tabs");
    document.getElementById("btn-save").addEventListener("click", () => this.save());
    document.getElementById("btn-save-as").addEventListener("click", () => this.saveAs());
    document.getElementById("btn-wf-refresh").addEventListener("click", () => this.refreshList());
  }

  get tracker() { return this.app.tracker; }

  isModified(tab) {
    const cur = tab === this.active ? this.tracker.hist.current : tab.hist.current;
    return cur !== tab.saved;
  }

  title(tab) { return tab.path ? nameOf(tab.path) : "Unsaved Workflow"; }

  // --- tabs ------------------------------------------------------------------------

  // Makes a new tab the active one; the caller then loads a graph and calls markOpened().
  async newTab(path = null) {
    this.park();
    const tab = { key: nextKey++, path, saved: null, hist: newHistory(), parked: null };
    this.tabs.push(tab);
    this.active = tab;
    this.tracker.attach(tab.hist);
    return tab;
  }

  // The graph now shown is what `tab` holds on disk (or its fresh start): no undo past it.
  markOpened(tab = this.active) {
    this.tracker.reset();
    tab.saved = this.tracker.hist.current;
    this.render();
  }

  // Keeps the shown graph and view in the active tab before another is shown.
  park() {
    const t = this.active;
    if (!t) return;
    this.tracker.check();
    t.parked = { state: this.tracker.hist.current, ds: this.app.viewState() };
  }

  async switchTo(tab) {
    if (tab === this.active) return;
    this.park();
    this.active = tab;
    this.tracker.attach(tab.hist);
    this.tracker.paused++;
    try { await this.app.applyGraphState(tab.parked.state, tab.parked.ds); } finally { this.tracker.paused--; }
    this.render();
  }

  async close(tab) {
    if (this.isModified(tab) && !confirm(`Close "${this.title(tab)}" without saving?`)) return false;
    const i = this.tabs.indexOf(tab);
    this.tabs.splice(i, 1);
    if (tab === this.active) {
      this.active = null;
      const next = this.tabs[Math.min(i, this.tabs.length - 1)];
      if (next) { this.active = tab; await this.switchTo(next); } // switchTo parks into the closed tab: harmless
      else { await this.newTab(); await this.app.loadDefault(); this.markOpened(); }
    }
    this.render();
    return true;
  }

  render() {
    if (!this.bar) return;
    this.bar.replaceChildren(...this.tabs.map((t) => {
      const mod = this.isModified(t);
      return el("div", { class: `wf-tab${t === this.active ? " active" : ""}${mod ? " modified" : ""}`, "data-path": t.path || "", title: t.path || "not saved on the server yet", onclick: () => this.switchTo(t) },
        el("span", { class: "name" }, this.title(t)),
        el("span", { class: "dot" }, mod ? "•" : ""),
        el("button", { class: "close", title: "close", onclick: (e) => { e.stopPropagation(); this.close(t); } }, "×"));
    }), el("button", { class: "wf-new", title: "new workflow (the default graph)", onclick: () => this.newDefault() }, "+"));
    const a = this.active;
    document.title = a ? `${this.isModified(a) ? "*" : ""}${this.title(a)} - latentd` : "latentd";
  }

  async newDefault() {
    await this.newTab();
    await this.app.loadDefault();
    this.markOpened();
  }

  // --- server files ----------------------------------------------------------------

  async refreshList() {
    try { this.files = await api.listUserData(DIR); }
    catch (e) { this.app.setStatus(`workflows: ${e.message}`); return []; }
    this.files = this.files.filter((f) => /\.json$/i.test(f.path)).sort((a, b) => a.path.localeCompare(b.path));
    const root = document.getElementById("workflow-list");
    if (root) {
      root.replaceChildren(...this.files.map((f) => {
        const path = `${DIR}/${f.path}`;
        const open = this.tabs.some((t) => t.path === path);
        return el("div", { class: `item wf${open ? " open" : ""}`, "data-path": path },
          el("span", { class: "meta", title: path }, nameOf(path)),
          el("span", { class: "acts" },
            el("button", { onclick: () => this.open(path) }, "open"),
            el("button", { onclick: () => this.rename(path) }, "rename"),
            el("button", { onclick: () => this.remove(path) }, "delete")));
      }));
      if (!this.files.length) root.append(el("div", { class: "empty" }, "no saved workflows"));
    }
    return this.files;
  }

  async open(path) {
    const have = this.tabs.find((t) => t.path === path);
    if (have) { await this.switchTo(have); return true; }
    let data;
    try { data = JSON.parse(await api.getUserData(path)); }
    catch (e) { this.app.showError(`could not open ${path}: ${e.message}`); return false; }
    // An untouched untitled tab is replaced rather than kept beside the opened one.
    const a = this.active;
    if (a && !a.path && !this.isModified(a) && this.tabs.length === 1) { a.path = path; }
    else await this.newTab(path);
    this.tracker.paused++;
    try { await this.app.loadGraphData(data); } finally { this.tracker.paused--; }
    this.markOpened();
    this.refreshList();
    return true;
  }

  // Ctrl+S: write the active tab's file; an unsaved tab asks for a name first.
  async save() {
    const t = this.active;
    if (!t.path) return this.saveAs();
    return this.write(t, t.path, true);
  }

  async saveAs(name = null) {
    const t = this.active;
    name = name ?? prompt("Save workflow as:", t.path ? nameOf(t.path) : "workflow");
    if (!name || !name.trim()) return false;
    const path = pathOf(name.trim());
    if (!(await this.write(t, path, false))) return false;
    t.path = path;
    this.render();
    return true;
  }

  async write(tab, path, overwrite) {
    this.tracker.check();
    const text = JSON.stringify(this.app.serializeWorkflow(), null, 2);
    let res = await api.storeUserData(path, text, { overwrite });
    if (res.status === 409) {
      if (!confirm(`${nameOf(path)} exists. Overwrite it?`)) return false;
      res = await api.storeUserData(path, text, { overwrite: true });
    }
    if (!res.ok) { this.app.showError(`could not save ${path}: HTTP ${res.status}`, await res.text()); return false; }
    tab.saved = this.tracker.hist.current;
    this.app.setStatus(`saved ${nameOf(path)}`, 5000);
    this.render();
    this.refreshList();
    return true;
  }

  async rename(path, to = null) {
    to = to ?? prompt("Rename workflow to:", nameOf(path));
    if (!to || !to.trim()) return false;
    const dest = pathOf(to.trim());
    if (dest === path) return false;
    const res = await api.moveUserData(path, dest);
    if (!res.ok) { this.app.showError(`could not rename ${nameOf(path)}: HTTP ${res.status}`, await res.text()); return false; }
    for (const t of this.tabs) if (t.path === path) t.path = dest;
    this.render();
    await this.refreshList();
    return true;
  }

  async remove(path, { ask = true } = {}) {
    if (ask && !confirm(`Delete ${nameOf(path)} from the server?`)) return false;
    const res = await api.deleteUserData(path);
    if (!res.ok && res.status !== 404) { this.app.showError(`could not delete ${path}: HTTP ${res.status}`); return false; }
    // Its tab stays open with the graph, now unsaved (as in ComfyUI).
    for (const t of this.tabs) if (t.path === path) { t.path = null; t.saved = null; }
    this.render();
    await this.refreshList();
    return true;
  }

  // --- persistence across reloads ---------------------------------------------------

  persist() {
    if (!this.active) return;
    this.tracker.check();
    const tabs = this.tabs.map((t) => ({
      path: t.path, saved: t.saved,
      state: t === this.active ? this.tracker.hist.current : t.parked?.state,
      ds: t === this.active ? this.app.viewState() : t.parked?.ds,
    }));
    try { localStorage.setItem(STORE_KEY, JSON.stringify({ tabs, active: this.tabs.indexOf(this.active) })); } catch { /* quota */ }
  }

  // Brings back the tabs of the last session. Returns false when there were none.
  async restore() {
    let data;
    try { data = JSON.parse(localStorage.getItem(STORE_KEY) || "null"); } catch { data = null; }
    if (!data || !Array.isArray(data.tabs) || !data.tabs.length) return false;
    for (const s of data.tabs) {
      if (!s.state) continue;
      this.tabs.push({ key: nextKey++, path: s.path || null, saved: s.saved ?? null, hist: newHistory(s.state), parked: { state: s.state, ds: s.ds } });
    }
    if (!this.tabs.length) return false;
    const t = this.tabs[Math.max(0, Math.min(this.tabs.length - 1, data.active | 0))];
    const wasClean = t.saved === t.parked.state;
    this.active = t;
    this.tracker.attach(t.hist);
    this.tracker.paused++;
    try { await this.app.loadGraphData(JSON.parse(t.parked.state), { quiet: true, ds: t.parked.ds }); } finally { this.tracker.paused--; }
    // Loading may normalise the graph (sizes, missing types): that is its state now.
    t.hist.current = this.tracker.snapshot();
    if (wasClean) t.saved = t.hist.current;
    this.render();
    return true;
  }
}


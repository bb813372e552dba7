// api.js — the page's only link to latentd: HTTP under /api/ and the /ws WebSocket.
// Everything is same-origin (the page is served by latentd), nothing else is contacted.
// Events are re-dispatched on `api` (an EventTarget) by WS message type; binary preview
// frames become a "b_preview" event carrying a Blob. The socket reconnects forever with
// the same clientId, so a restarted server picks the page back up.

const CLIENT_KEY = "latentd.clientId";

class Api extends EventTarget {
  constructor() {
    super();
    this.clientId = sessionStorage.getItem(CLIENT_KEY) || null;
    this.socket = null;
    this.connected = false;
    this.reconnects = 0;
  }

  url(route) { return "api" + route; } // relative: works behind a path prefix too

  async fetchApi(route, options = {}) {
    return fetch(this.url(route), { cache: "no-store", ...options });
  }

  async getJson(route) {
    const res = await this.fetchApi(route);
    if (!res.ok) throw new Error(`GET ${route}: HTTP ${res.status}`);
    return res.json();
  }

  async postJson(route, body) {
    return this.fetchApi(route, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  }

  getObjectInfo() { return this.getJson("/object_info"); }
  getQueue() { return this.getJson("/queue"); }
  getHistory(max = 200) { return this.getJson(`/history?max_items=${max}`); }
  getSystemStats() { return this.getJson("/system_stats"); }

  // POST /prompt. Resolves to {ok, status, body}; body is the parsed JSON (or an error text).
  // create_time (ms) travels in extra_data, so the queue and history panels can show when
  // a prompt was queued (ComfyUI's server adds the same field itself).
  async queuePrompt(prompt, workflow, { front = false } = {}) {
    const body = { client_id: this.clientId, prompt, extra_data: { extra_pnginfo: { workflow }, create_time: Date.now() } };
    if (front) body.front = true;
    const res = await this.postJson("/prompt", body);
    let json = null;
    const text = await res.text();
    try { json = JSON.parse(text); } catch { json = { error: { message: text || `HTTP ${res.status}`, details: "" } }; }
    return { ok: res.ok, status: res.status, body: json };
  }

  // User files (ComfyUI keeps saved workflows under the user's workflows/). `path` is
  // relative to the user dir ("workflows/a.json") and travels as ONE encoded segment.
  async listUserData(dir) {
    const res = await this.fetchApi(`/userdata?dir=${encodeURIComponent(dir)}&recurse=true&split=false&full_info=true`);
    if (res.status === 404) return []; // no such folder yet: nothing saved
    if (!res.ok) throw new Error(`listing ${dir}: HTTP ${res.status}`);
    return res.json();
  }
  async getUserData(path) {
    const res = await this.fetchApi(`/userdata/${encodeURIComponent(path)}`);
    if (!res.ok) throw new Error(`${path}: HTTP ${res.status}`);
    return res.text();
  }
  // Resolves to the Response: 409 means it exists and overwrite was false.
  storeUserData(path, text, { overwrite = true } = {}) {
    return this.fetchApi(`/userdata/${encodeURIComponent(path)}?overwrite=${overwrite}&full_info=true`, {
      method: "POST", headers: { "Content-Type": "application/json" }, body: text });
  }
  moveUserData(from, to, { overwrite = false } = {}) {
    return this.fetchApi(`/userdata/${encodeURIComponent(from)}/move/${encodeURIComponent(to)}?overwrite=${overwrite}&full_info=true`, { method: "POST" });
  }
  deleteUserData(path) { return this.fetchApi(`/userdata/${encodeURIComponent(path)}`, { method: "DELETE" }); }

  interrupt() { return this.postJson("/interrupt"); }
  deleteQueueItems(ids) { return this.postJson("/queue", { delete: ids }); }
  clearQueue() { return this.postJson("/queue", { clear: true }); }
  deleteHistoryItems(ids) { return this.postJson("/history", { delete: ids }); }
  clearHistory() { return this.postJson("/history", { clear: true }); }
  freeMemory() { return this.postJson("/free", { unload_models: true, free_memory: true }); }

  async uploadImage(file, name) {
    const form = new FormData();
    form.append("image", file, name || file.name);
    form.append("type", "input");
    form.append("overwrite", "false");
    const res = await this.fetchApi("/upload/image", { method: "POST", body: form });
    if (!res.ok) throw new Error(`upload failed: HTTP ${res.status} ${await res.text()}`);
    return res.json();
  }

  viewUrl(img) {
    const q = new URLSearchParams({ filename: img.filename, subfolder: img.subfolder || "", type: img.type || "output" });
    return this.url("/view?" + q.toString());
  }

  emit(type, detail) { this.dispatchEvent(new CustomEvent(type, { detail })); }

  // Open /ws and keep it open. We send no feature_flags, so previews arrive as type-1
  // frames (comfy-api.md §4.6); type 4 is decoded too in case a server sends it anyway.
  connect() {
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    const base = location.pathname.replace(/[^/]*$/, "");
    let url = `${proto}//${location.host}${base}ws`;
    if (this.clientId) url += `?clientId=${encodeURIComponent(this.clientId)}`;
    const ws = new WebSocket(url);
    ws.binaryType = "arraybuffer";
    this.socket = ws;
    ws.addEventListener("open", () => {
      this.connected = true;
      if (this.reconnects > 0) this.emit("reconnected", {});
      this.emit("socket", { connected: true });
    });
    ws.addEventListener("close", () => {
      const was = this.connected;
      this.connected = false;
      if (this.socket !== ws) return;
      this.emit("socket", { connected: false, was });
      this.reconnects++;
      setTimeout(() => this.connect(), Math.min(300 * this.reconnects, 2000));
    });
    ws.addEventListener("message", (ev) => this.onMessage(ev.data));
  }

  onMessage(data) {
    if (data instanceof ArrayBuffer) {
      if (data.byteLength < 8) return;
      const view = new DataView(data);
      const event = view.getUint32(0); // big-endian
      if (event === 1) {
        const imageType = view.getUint32(4);
        const mime = imageType === 2 ? "image/png" : "image/jpeg";
        this.emit("b_preview", new Blob([data.slice(8)], { type: mime }));
      } else if (event === 4) {
        const len = view.getUint32(4);
        let meta = {};
        try { meta = JSON.parse(new TextDecoder().decode(data.slice(8, 8 + len))); } catch { /* keep {} */ }
        this.emit("b_preview", new Blob([data.slice(8 + len)], { type: meta.image_type || "image/jpeg" }));
      }
      return;
    }
    let msg;
    try { msg = JSON.parse(data); } catch { console.warn("bad ws message", data); return; }
    if (!msg || typeof msg.type !== "string") return;
    if (msg.type === "status" && msg.data && msg.data.sid) {
      this.clientId = msg.data.sid;
      sessionStorage.setItem(CLIENT_KEY, this.clientId);
    }
    this.emit(msg.type, msg.data || {});
  }
}

export const api = new Api();

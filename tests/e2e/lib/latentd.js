// tests/e2e/lib/latentd.js — reusable helpers for end-to-end tests against the real
// latentd binary (server, graph and txt2img e2e tests all use it).
//
// API (all async unless noted):
//   startLatentd({ args, setup, baseDir, env, readyPath, nofile }) -> server
//       Starts build/latentd (or $LATENTD_BIN) on 127.0.0.1 with --port 0 and a fresh temp
//       base directory (models/, input/, output/, user/ created; temp is <base>/temp). The
//       bound port is read from --port-file <base>/port; resolves once GET /system_stats
//       answers 200. `setup(dir)` runs before the start (put checkpoints, inputs there).
//       `baseDir` reuses an existing directory (restart tests). `args` are extra flags.
//       `nofile` runs it under `ulimit -n nofile` (descriptor exhaustion tests).
//       server = { url, port, dir, proc, log(), stop(), kill9(), exitCode }
//         stop(): SIGTERM, waits for exit, returns { code, signal }; the dir is kept
//         (removeDir(dir) cleans up); kill9(): SIGKILL, waits.
//   request(server|url, method, path, { body, headers, json }) -> { status, headers, body,
//       text, json() }  — raw path is sent as given (no URL normalisation, so "..", "%2e"
//       and friends reach the server untouched). `json` serialises an object as the body.
//   rawRequest(server, bytes, { timeoutMs, halfClose }) -> Buffer of whatever came back
//       before the server closed or the timeout (for malformed HTTP).
//   postPrompt(server, prompt, extra) -> { status, json }  — POST /prompt {prompt, ...extra}
//   waitFor(fn, { timeoutMs, intervalMs }) -> the first truthy value of fn() (may be async)
//   waitIdle(server) -> resolves when /queue is empty
//   openWs(server, { clientId, path, firstMessage }) -> WsClient
//       WsClient: messages (array: parsed JSON objects for text frames, and
//       { binary: Buffer } for binary frames), next(pred, timeoutMs), waitFor(pred,
//       timeoutMs), send(objOrString), close(), closed (promise)
//   multipart(fields) -> { body: Buffer, contentType }   fields: { name: string |
//       { filename, data: Buffer, type } }
//   pngRGBA(w, h, pixelFn, text) -> Buffer  (a valid PNG; pixelFn(x, y) -> [r, g, b, a];
//       text: { key: value } written as tEXt chunks)
//   decodePng(buf) -> { width, height, channels, pixels, text }  (8-bit, non-interlaced)
//   removeDir(dir)
// LATENTD_E2E_STORE=pg: every server gets a PostgreSQL store (see pgArgs below).
"use strict";
const fs = require("fs");
const os = require("os");
const path = require("path");
const http = require("http");
const net = require("net");
const zlib = require("zlib");
const { spawn } = require("child_process");

const SOURCE = path.resolve(__dirname, "..", "..", "..");
let WebSocket;
try {
  WebSocket = require(path.join(SOURCE, "tests", "node_modules", "ws"));
} catch (e) {
  throw new Error(`tests/node_modules/ws is missing: run \`npm ci\` in ${path.join(SOURCE, "tests")} (${e.message})`);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function latentdBin() {
  if (process.env.LATENTD_BIN) return process.env.LATENTD_BIN;
  for (const c of ["build/latentd", "build-server/latentd"]) {
    const p = path.join(SOURCE, c);
    if (fs.existsSync(p)) return p;
  }
  return path.join(SOURCE, "build", "latentd");
}

function removeDir(dir) {
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
}

// LATENTD_E2E_STORE=pg runs every server on a PostgreSQL store instead of SQLite: one
// private PostgreSQL server per test process (lib/postgres.js), one database per base
// directory (so a restart on the same directory finds its jobs again).
let pgServer = null;
async function pgArgs(dir) {
  if (process.env.LATENTD_E2E_STORE !== "pg") return [];
  if (!pgServer) {
    pgServer = await require("./postgres.js").startPostgres();
    if (pgServer.skip) {
      // CTest's SKIP_RETURN_CODE: reported as skipped, with the reason in the output.
      console.log(`skipped: LATENTD_E2E_STORE=pg but PostgreSQL is unavailable: ${pgServer.skip}`);
      process.exit(77);
    }
    // The server must not keep the test process alive; it goes when the process does.
    pgServer.proc.unref();
    process.on("exit", () => {
      try { process.kill(parseInt(fs.readFileSync(path.join(pgServer.dir, "data", "postmaster.pid"), "utf8"), 10), "SIGQUIT"); } catch { /* gone */ }
      removeDir(pgServer.dir);
    });
  }
  const db = "e2e_" + path.basename(dir).replace(/[^A-Za-z0-9]/g, "_").toLowerCase();
  try { pgServer.createDatabase(db); } catch { /* exists: a restart */ }
  return ["--database-url", pgServer.url(db)];
}

async function startLatentd({ args = [], setup, baseDir, env, readyPath = "/system_stats", nofile } = {}) {
  const dir = baseDir || fs.mkdtempSync(path.join(os.tmpdir(), "latentd-e2e-"));
  args = [...(await pgArgs(dir)), ...args];
  for (const d of ["input", "output", "user", "models/checkpoints"]) fs.mkdirSync(path.join(dir, d), { recursive: true });
  if (setup) await setup(dir);
  const portFile = path.join(dir, "port");
  fs.rmSync(portFile, { force: true });
  const logPath = path.join(dir, "latentd.log");
  const logFd = fs.openSync(logPath, "a");
  const argv = ["--listen", "127.0.0.1", "--port", "0", "--port-file", portFile, "--base-directory", dir, "--cpu", ...args];
  // `nofile` lowers the descriptor limit (EMFILE tests) through the shell's ulimit.
  const proc = nofile
    ? spawn("/bin/sh", ["-c", `ulimit -n ${nofile} && exec "$0" "$@"`, latentdBin(), ...argv], { cwd: dir, stdio: ["ignore", logFd, logFd], env: { ...process.env, ...env } })
    : spawn(latentdBin(), argv, { cwd: dir, stdio: ["ignore", logFd, logFd], env: { ...process.env, ...env } });
  fs.closeSync(logFd);
  const server = { dir, proc, port: 0, url: null, exitCode: null, exitSignal: null };
  const exited = new Promise((resolve) => {
    proc.on("exit", (code, signal) => { server.exitCode = code; server.exitSignal = signal; resolve({ code, signal }); });
    // A binary that cannot be executed (missing, being rebuilt) reports here, not via exit.
    proc.on("error", (e) => { server.spawnError = e; server.exitCode = -1; resolve({ code: -1, signal: null }); });
  });
  server.log = () => { try { return fs.readFileSync(logPath, "utf8"); } catch { return ""; } };
  server.stop = async () => {
    if (server.exitCode === null && server.exitSignal === null) proc.kill("SIGTERM");
    const t = setTimeout(() => proc.kill("SIGKILL"), 10000);
    const r = await exited;
    clearTimeout(t);
    return r;
  };
  server.kill9 = async () => {
    if (server.exitCode === null && server.exitSignal === null) proc.kill("SIGKILL");
    return exited;
  };
  const deadline = Date.now() + 30000;
  while (Date.now() < deadline) {
    if (server.exitCode !== null || server.exitSignal !== null) break;
    if (!server.port && fs.existsSync(portFile)) {
      const p = parseInt(fs.readFileSync(portFile, "utf8"), 10);
      if (p > 0) { server.port = p; server.url = `http://127.0.0.1:${p}`; }
    }
    if (server.port) {
      try { const r = await request(server, "GET", readyPath); if (r.status === 200) return server; } catch { /* not yet */ }
    }
    await sleep(50);
  }
  proc.kill("SIGKILL");
  await exited;
  const log = server.log();
  if (!baseDir) removeDir(dir);
  throw new Error(`latentd did not start (exit ${server.exitCode}, signal ${server.exitSignal}${server.spawnError ? `, ${server.spawnError.message}` : ""}):\n${log.slice(-4000)}`);
}

function portOf(s) {
  if (typeof s === "string") return parseInt(new URL(s).port, 10);
  return s.port;
}

function request(s, method, rawPath, { body, headers = {}, json } = {}) {
  return new Promise((resolve, reject) => {
    let data = body;
    const h = { ...headers };
    if (json !== undefined) { data = Buffer.from(JSON.stringify(json)); if (!h["Content-Type"]) h["Content-Type"] = "application/json"; }
    if (typeof data === "string") data = Buffer.from(data);
    if (data) h["Content-Length"] = data.length;
    const req = http.request({ host: "127.0.0.1", port: portOf(s), method, path: rawPath, headers: h, agent: false }, (res) => {
      const chunks = [];
      res.on("data", (c) => chunks.push(c));
      res.on("end", () => {
        const b = Buffer.concat(chunks);
        resolve({ status: res.statusCode, headers: res.headers, body: b, text: b.toString("utf8"),
          json() { return JSON.parse(b.toString("utf8")); } });
      });
      res.on("error", reject);
    });
    req.on("error", reject);
    req.setTimeout(30000, () => req.destroy(new Error(`timeout: ${method} ${rawPath}`)));
    if (data) req.write(data);
    req.end();
  });
}

function rawRequest(s, bytes, { timeoutMs = 3000, halfClose = false } = {}) {
  return new Promise((resolve) => {
    const chunks = [];
    const sock = net.connect(portOf(s), "127.0.0.1", () => {
      sock.write(bytes);
      if (halfClose) sock.end();
    });
    const done = () => { clearTimeout(t); sock.destroy(); resolve(Buffer.concat(chunks)); };
    const t = setTimeout(done, timeoutMs);
    sock.on("data", (c) => chunks.push(c));
    sock.on("close", done);
    sock.on("error", done);
  });
}

async function waitFor(fn, { timeoutMs = 15000, intervalMs = 25 } = {}) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error("waitFor: timed out");
    await sleep(intervalMs);
  }
}

async function waitIdle(s, timeoutMs = 30000) {
  return waitFor(async () => {
    const q = (await request(s, "GET", "/queue")).json();
    return q.queue_running.length === 0 && q.queue_pending.length === 0;
  }, { timeoutMs });
}

async function postPrompt(s, prompt, extra = {}) {
  const r = await request(s, "POST", "/prompt", { json: { prompt, ...extra } });
  let j = null;
  try { j = r.json(); } catch { /* not JSON */ }
  return { status: r.status, json: j, text: r.text };
}

class WsClient {
  constructor(ws) {
    this.ws = ws;
    this.messages = [];
    this.waiters = [];
    this.closed = new Promise((r) => ws.on("close", (code) => r(code)));
    ws.on("message", (data, isBinary) => {
      const m = isBinary ? { binary: Buffer.from(data) } : JSON.parse(data.toString("utf8"));
      this.messages.push(m);
      for (const w of [...this.waiters]) w();
    });
  }
  // Resolves with the first message (from index `from` on) that matches pred.
  waitFor(pred, timeoutMs = 15000, from = 0) {
    return new Promise((resolve, reject) => {
      const check = () => {
        for (let i = from; i < this.messages.length; i++) if (pred(this.messages[i])) { cleanup(); resolve(this.messages[i]); return true; }
        return false;
      };
      const cleanup = () => { clearTimeout(t); this.waiters = this.waiters.filter((w) => w !== check); };
      const t = setTimeout(() => { cleanup(); reject(new Error(`ws waitFor timed out; got ${JSON.stringify(this.messages.map((m) => m.type || "binary"))}`)); }, timeoutMs);
      if (!check()) this.waiters.push(check);
    });
  }
  next(pred, timeoutMs = 15000) { return this.waitFor(pred, timeoutMs, this.messages.length); }
  send(m) { this.ws.send(typeof m === "string" ? m : JSON.stringify(m)); }
  close() { this.ws.close(); return this.closed; }
}

function openWs(s, { clientId, path: p = "/ws", headers } = {}) {
  const q = clientId !== undefined ? `?clientId=${encodeURIComponent(clientId)}` : "";
  const ws = new WebSocket(`ws://127.0.0.1:${portOf(s)}${p}${q}`, { headers });
  const c = new WsClient(ws);
  return new Promise((resolve, reject) => {
    ws.once("open", () => resolve(c));
    ws.once("error", reject);
    ws.once("unexpected-response", (req, res) => reject(new Error(`ws upgrade refused: ${res.statusCode}`)));
  });
}

function multipart(fields) {
  const boundary = "----latentd" + Math.random().toString(16).slice(2);
  const parts = [];
  for (const [name, v] of Object.entries(fields)) {
    if (v && typeof v === "object" && v.data !== undefined) {
      parts.push(Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="${name}"; filename="${v.filename}"\r\nContent-Type: ${v.type || "application/octet-stream"}\r\n\r\n`));
      parts.push(Buffer.from(v.data));
      parts.push(Buffer.from("\r\n"));
    } else {
      parts.push(Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${v}\r\n`));
    }
  }
  parts.push(Buffer.from(`--${boundary}--\r\n`));
  return { body: Buffer.concat(parts), contentType: `multipart/form-data; boundary=${boundary}` };
}

function crc32(buf) {
  let crc = 0xffffffff;
  for (let n = 0; n < buf.length; n++) {
    let c = (crc ^ buf[n]) & 0xff;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    crc = (crc >>> 8) ^ c;
  }
  return (crc ^ 0xffffffff) >>> 0;
}

function pngChunk(type, data) {
  const len = Buffer.alloc(4); len.writeUInt32BE(data.length);
  const td = Buffer.concat([Buffer.from(type, "ascii"), data]);
  const crc = Buffer.alloc(4); crc.writeUInt32BE(crc32(td));
  return Buffer.concat([len, td, crc]);
}

function pngRGBA(w, h, pixelFn = () => [255, 0, 0, 255], text = {}) {
  const raw = Buffer.alloc((w * 4 + 1) * h);
  for (let y = 0; y < h; y++) {
    raw[y * (w * 4 + 1)] = 0;
    for (let x = 0; x < w; x++) {
      const p = pixelFn(x, y);
      for (let c = 0; c < 4; c++) raw[y * (w * 4 + 1) + 1 + x * 4 + c] = p[c];
    }
  }
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0); ihdr.writeUInt32BE(h, 4);
  ihdr[8] = 8; ihdr[9] = 6; ihdr[10] = 0; ihdr[11] = 0; ihdr[12] = 0;
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    pngChunk("IHDR", ihdr),
    ...Object.entries(text).map(([k, v]) => pngChunk("tEXt", Buffer.concat([Buffer.from(k, "latin1"), Buffer.from([0]), Buffer.from(v, "latin1")]))),
    pngChunk("IDAT", zlib.deflateSync(raw)), pngChunk("IEND", Buffer.alloc(0))]);
}

// Decode the RGBA (colour type 6) / RGB (2) 8-bit PNGs latentd writes; returns
// { width, height, channels, pixels: Buffer, text: { key: value } }.
function decodePng(buf) {
  let off = 8, width = 0, height = 0, ctype = 0;
  const idat = [], text = {};
  while (off < buf.length) {
    const len = buf.readUInt32BE(off);
    const type = buf.toString("ascii", off + 4, off + 8);
    const data = buf.subarray(off + 8, off + 8 + len);
    if (type === "IHDR") { width = data.readUInt32BE(0); height = data.readUInt32BE(4); ctype = data[9]; }
    else if (type === "IDAT") idat.push(data);
    else if (type === "tEXt") { const z = data.indexOf(0); text[data.toString("latin1", 0, z)] = data.toString("latin1", z + 1); }
    off += 12 + len;
  }
  const channels = ctype === 6 ? 4 : ctype === 2 ? 3 : ctype === 0 ? 1 : ctype === 4 ? 2 : 0;
  const raw = zlib.inflateSync(Buffer.concat(idat));
  const stride = width * channels, out = Buffer.alloc(stride * height);
  for (let y = 0; y < height; y++) {
    const f = raw[y * (stride + 1)], line = raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1));
    for (let x = 0; x < stride; x++) {
      const a = x >= channels ? out[y * stride + x - channels] : 0;
      const b = y > 0 ? out[(y - 1) * stride + x] : 0;
      const c = x >= channels && y > 0 ? out[(y - 1) * stride + x - channels] : 0;
      let v = line[x];
      if (f === 1) v += a; else if (f === 2) v += b; else if (f === 3) v += (a + b) >> 1;
      else if (f === 4) { const p = a + b - c, pa = Math.abs(p - a), pb = Math.abs(p - b), pc = Math.abs(p - c); v += pa <= pb && pa <= pc ? a : pb <= pc ? b : c; }
      out[y * stride + x] = v & 255;
    }
  }
  return { width, height, channels, pixels: out, text };
}

module.exports = { SOURCE, latentdBin, startLatentd, request, rawRequest, waitFor, waitIdle, postPrompt,
  openWs, WsClient, multipart, pngRGBA, decodePng, removeDir, sleep, WebSocket };

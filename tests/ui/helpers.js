// helpers.js — shared by the UI tests: start a real latentd on a free port with its own
// temporary directories, drive Debian's Chromium with playwright-core, save screenshots.
// (LATENTD_UI_URL=http://host:port points the tests at an already running server instead:
// a development aid only; CTest never sets it.)
"use strict";
const fs = require("fs");
const os = require("os");
const path = require("path");
const zlib = require("zlib");
const { spawn } = require("child_process");
const { chromium } = require("../node_modules/playwright-core");
const { CHROMIUM, SOURCE, latentdBin, artifactDir } = require("./paths.js");

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Mark the whole file skipped (run.js turns this into exit 77) and stop.
function skipFile(reason) {
  if (process.env.LATENTD_UI_SKIPFILE) fs.writeFileSync(process.env.LATENTD_UI_SKIPFILE, reason);
  console.log(`skip: ${reason}`);
  process.exit(77);
}

async function startLatentd({ args = [], setup } = {}) {
  if (process.env.LATENTD_UI_URL) return { url: process.env.LATENTD_UI_URL.replace(/\/$/, ""), dir: null, stop: async () => {}, restart: null };
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "latentd-ui-"));
  for (const d of ["input", "output", "temp", "user", "models/checkpoints"]) fs.mkdirSync(path.join(dir, d), { recursive: true });
  if (setup) await setup(dir);
  const logPath = path.join(dir, "latentd.log");
  const logText = () => fs.readFileSync(logPath, "utf8");
  const srv = { dir, logText, url: null, proc: null, exited: null };
  // Spawn latentd and wait until /api/object_info answers. port 0 = any free port.
  const launch = async (port) => {
    const portFile = path.join(dir, "port");
    fs.rmSync(portFile, { force: true });
    const log = fs.openSync(logPath, "a");
    const proc = spawn(latentdBin(), [
      "--listen", "127.0.0.1", "--port", String(port), "--port-file", portFile,
      "--base-directory", dir, "--input-directory", path.join(dir, "input"),
      "--output-directory", path.join(dir, "output"), "--temp-directory", dir,
      "--user-directory", path.join(dir, "user"), "--front-end-root", path.join(SOURCE, "web"),
      "--cpu", ...args,
    ], { cwd: dir, stdio: ["ignore", log, log] });
    fs.closeSync(log);
    srv.proc = proc; srv.exited = null;
    proc.on("exit", (code, sig) => { srv.exited = { code, sig }; });
    const deadline = Date.now() + 30000;
    let url = null, ok = false;
    while (Date.now() < deadline && !srv.exited) {
      if (!url && fs.existsSync(portFile)) {
        const p = parseInt(fs.readFileSync(portFile, "utf8"), 10);
        if (p > 0) url = `http://127.0.0.1:${p}`;
      }
      if (url) {
        try { const r = await fetch(`${url}/api/object_info`); if (r.ok) { ok = true; break; } } catch { /* not yet */ }
      }
      await sleep(100);
    }
    if (!ok) {
      proc.kill("SIGKILL");
      throw new Error(`latentd did not start (${JSON.stringify(srv.exited)}):\n${logText().slice(-3000)}`);
    }
    srv.url = url;
  };
  const kill = async () => {
    if (!srv.proc || srv.exited) return;
    srv.proc.kill("SIGTERM");
    for (let i = 0; i < 50 && !srv.exited; i++) await sleep(100);
    if (!srv.exited) srv.proc.kill("SIGKILL");
    for (let i = 0; i < 20 && !srv.exited; i++) await sleep(50);
  };
  // Stop and start again on the same port with the same directories (WS reconnect tests).
  srv.restart = async () => { const port = new URL(srv.url).port; await kill(); await launch(port); };
  srv.stop = async () => {
    await kill();
    try {
      fs.mkdirSync(artifactDir(), { recursive: true });
      fs.copyFileSync(logPath, path.join(artifactDir(), `${process.env.UI_TEST_NAME || "ui"}-latentd.log`));
    } catch { /* best effort */ }
    fs.rmSync(dir, { recursive: true, force: true });
  };
  await launch(0);
  return srv;
}

const CHROME_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync"];

// Opens the page and waits until the app has loaded node definitions and its WebSocket is up.
// Collects page errors and requests to hosts other than the server (there must be none).
async function openPage(url) {
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROME_ARGS }); // fresh empty profile
  const page = await browser.newPage({ viewport: { width: 1400, height: 850 } });
  const errors = [], foreign = [], consoleLines = [];
  const origin = new URL(url).origin;
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => consoleLines.push(`${m.type()}: ${m.text()}`));
  page.on("request", (r) => { const u = r.url(); if (!u.startsWith(origin) && !u.startsWith("data:") && !u.startsWith("blob:")) foreign.push(u); });
  await page.goto(url + "/");
  await page.waitForFunction(() => window.app && window.app.ready && window.api && window.api.connected, null, { timeout: 20000 });
  // Record every WS event the page receives, for assertions.
  await page.evaluate(() => {
    window.__events = [];
    for (const t of ["status", "execution_start", "execution_cached", "executing", "progress", "progress_state",
      "executed", "execution_success", "execution_error", "execution_interrupted", "b_preview"])
      window.api.addEventListener(t, (e) => window.__events.push({ type: t, data: t === "b_preview" ? { size: e.detail.size } : e.detail }));
  });
  return { browser, page, errors, foreign, consoleLines };
}

async function screenshot(page, name) {
  fs.mkdirSync(artifactDir(), { recursive: true });
  const file = path.join(artifactDir(), `${name}.png`);
  await page.screenshot({ path: file });
  return file;
}

async function objectInfo(url) {
  const r = await fetch(`${url}/api/object_info`);
  return r.json();
}

function requireNodes(info, names) {
  const missing = names.filter((n) => !info[n]);
  if (missing.length) skipFile(`the server has no ${missing.join(", ")} node(s) yet`);
}

// Minimal RGB PNG encoder (for upload fixtures) and chunk reader (for checks).
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
  const td = Buffer.concat([Buffer.from(type, "latin1"), data]);
  const crc = Buffer.alloc(4); crc.writeUInt32BE(crc32(td));
  return Buffer.concat([len, td, crc]);
}
function encodePng(w, h, rgbAt) {
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0); ihdr.writeUInt32BE(h, 4); ihdr[8] = 8; ihdr[9] = 2;
  const raw = Buffer.alloc((w * 3 + 1) * h);
  for (let y = 0; y < h; y++) for (let x = 0; x < w; x++) {
    const o = y * (w * 3 + 1) + 1 + x * 3; const c = rgbAt(x, y);
    raw[o] = c[0]; raw[o + 1] = c[1]; raw[o + 2] = c[2];
  }
  return Buffer.concat([Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]), pngChunk("IHDR", ihdr),
    pngChunk("IDAT", zlib.deflateSync(raw)), pngChunk("IEND", Buffer.alloc(0))]);
}
function pngChunks(buf) {
  const out = []; let off = 8;
  while (off + 12 <= buf.length) {
    const len = buf.readUInt32BE(off); const type = buf.toString("latin1", off + 4, off + 8);
    out.push({ type, data: buf.subarray(off + 8, off + 8 + len), raw: buf.subarray(off, off + 12 + len) });
    off += 12 + len;
  }
  return out;
}
function pngText(buf) {
  const t = {};
  for (const c of pngChunks(buf)) if (c.type === "tEXt") { const i = c.data.indexOf(0); t[c.data.toString("latin1", 0, i)] = c.data.toString("latin1", i + 1); }
  return t;
}
function pngWithoutText(buf, key) {
  const keep = pngChunks(buf).filter((c) => !(c.type === "tEXt" && c.data.toString("latin1", 0, c.data.indexOf(0)) === key));
  return Buffer.concat([buf.subarray(0, 8), ...keep.map((c) => c.raw)]);
}

// Load an API-format prompt into the page's graph (the page lays it out).
async function loadPrompt(page, prompt) {
  await page.evaluate(async (p) => { await window.app.loadGraphData(p); }, prompt);
}

// Screen coordinates of the centre of a node's widget (by node id and widget name).
async function widgetCenter(page, nodeId, name) {
  return page.evaluate(({ nodeId, name }) => {
    const app = window.app; const node = app.graph.getNodeById(nodeId);
    const w = node.widgets.find((x) => x.name === name);
    if (w.last_y == null) throw new Error("widget not drawn yet");
    const local = [node.pos[0] + node.size[0] / 2, node.pos[1] + w.last_y + window.LiteGraph.NODE_WIDGET_HEIGHT / 2];
    const p = app.canvas.ds.convertOffsetToCanvas(local);
    const r = app.canvas.canvas.getBoundingClientRect();
    return { x: r.left + p[0], y: r.top + p[1] };
  }, { nodeId, name });
}

// Screen coordinates of a point given in graph space.
async function screenPos(page, graphPos) {
  return page.evaluate((gp) => {
    const app = window.app; const p = app.canvas.ds.convertOffsetToCanvas(gp);
    const r = app.canvas.canvas.getBoundingClientRect(); return { x: r.left + p[0], y: r.top + p[1] };
  }, graphPos);
}

// Screen coordinates of a point on a node's title bar (dx from its left edge).
async function titlePos(page, nodeId, dx = 40) {
  const gp = await page.evaluate(({ nodeId, dx }) => { const n = window.app.graph.getNodeById(nodeId); return [n.pos[0] + dx, n.pos[1] - window.LiteGraph.NODE_TITLE_HEIGHT / 2]; }, { nodeId, dx });
  return screenPos(page, gp);
}

// Screen coordinates of a node's input or output slot.
async function slotPos(page, nodeId, isInput, slot) {
  const gp = await page.evaluate(({ nodeId, isInput, slot }) => Array.from(window.app.graph.getNodeById(nodeId).getConnectionPos(isInput, slot)), { nodeId, isInput, slot });
  return screenPos(page, gp);
}

// Mouse drag in small steps (litegraph needs moves between down and up).
async function drag(page, from, to, { steps = 8 } = {}) {
  await page.mouse.move(from.x, from.y);
  await page.mouse.down();
  await page.mouse.move(to.x, to.y, { steps });
  await page.mouse.up();
}

// The graph as the change tracker (web/js/undo.js) sees it: litegraph's serialisation as a
// string, nodes in id order, execution order recomputed.
const graphJson = (page) => page.evaluate(() => window.app.tracker.snapshot());

async function waitForEvent(page, type, pred = "true", timeout = 60000) {
  return page.waitForFunction(({ type, pred }) => {
    const f = new Function("d", `return (${pred});`);
    const e = (window.__events || []).find((x) => x.type === type && f(x.data));
    return e ? e.data : null;
  }, { type, pred }, { timeout }).then((h) => h.jsonValue());
}

module.exports = { sleep, skipFile, startLatentd, openPage, screenshot, objectInfo, requireNodes, encodePng, pngText,
  pngWithoutText, loadPrompt, widgetCenter, waitForEvent, artifactDir, screenPos, titlePos, slotPos, drag, graphJson };

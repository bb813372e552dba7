// mock_server.js — DEVELOPMENT ONLY: a tiny stand-in for latentd's API (object_info, prompt,
// queue, history, view, upload, system_stats, /ws with progress + a type-1 preview frame) used
// to work on the page before the real server existed. The CTest UI tests never use it; they
// run against the real latentd binary.  Usage: node tests/ui/mock_server.js [port]
"use strict";
const http = require("http");
const fs = require("fs");
const path = require("path");
const zlib = require("zlib");
const crypto = require("crypto");
const { WebSocketServer } = require("../node_modules/ws");

const WEB = path.resolve(__dirname, "../../web");
const TMP = fs.mkdtempSync("/tmp/latentd-mock-");
const INPUT = path.join(TMP, "input"), OUTPUT = path.join(TMP, "output");
fs.mkdirSync(INPUT); fs.mkdirSync(OUTPUT);

function crc32(buf) {
  let c, crc = 0xffffffff;
  for (let n = 0; n < buf.length; n++) {
    c = (crc ^ buf[n]) & 0xff;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    crc = (crc >>> 8) ^ c;
  }
  return (crc ^ 0xffffffff) >>> 0;
}
function chunk(type, data) {
  const len = Buffer.alloc(4); len.writeUInt32BE(data.length);
  const td = Buffer.concat([Buffer.from(type, "latin1"), data]);
  const crc = Buffer.alloc(4); crc.writeUInt32BE(crc32(td));
  return Buffer.concat([len, td, crc]);
}
function png(w, h, rgb, texts = {}) {
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0); ihdr.writeUInt32BE(h, 4); ihdr[8] = 8; ihdr[9] = 2;
  const raw = Buffer.alloc((w * 3 + 1) * h);
  for (let y = 0; y < h; y++) for (let x = 0; x < w; x++) {
    const o = y * (w * 3 + 1) + 1 + x * 3;
    raw[o] = rgb[0] * (x / w); raw[o + 1] = rgb[1]; raw[o + 2] = rgb[2] * (y / h);
  }
  const parts = [Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]), chunk("IHDR", ihdr)];
  for (const [k, v] of Object.entries(texts)) parts.push(chunk("tEXt", Buffer.from(k + "\0" + v, "latin1")));
  parts.push(chunk("IDAT", zlib.deflateSync(raw)), chunk("IEND", Buffer.alloc(0)));
  return Buffer.concat(parts);
}

const IMG = ["IMAGE"];
const ckpts = () => {
  const i = process.argv.indexOf("--base-directory");
  const dir = i > 0 ? path.join(process.argv[i + 1], "models/checkpoints") : null;
  return dir && fs.existsSync(dir) ? fs.readdirSync(dir).sort() : ["tiny.safetensors"];
};
const objectInfo = () => {
  const mk = (name, display, category, required, output, outputNode = false) => ({
    input: { required }, input_order: { required: Object.keys(required) }, output, output_is_list: output.map(() => false),
    output_name: output, name, display_name: display, description: "", python_module: "nodes", category, output_node: outputNode,
  });
  const files = fs.readdirSync(INPUT).sort();
  const sd = process.env.MOCK_SD ? {
    CheckpointLoaderSimple: mk("CheckpointLoaderSimple", "Load Checkpoint", "loaders", { ckpt_name: [ckpts()] }, ["MODEL", "CLIP", "VAE"]),
    CLIPTextEncode: mk("CLIPTextEncode", "CLIP Text Encode (Prompt)", "conditioning", { text: ["STRING", { multiline: true, dynamicPrompts: true }], clip: ["CLIP"] }, ["CONDITIONING"]),
    EmptyLatentImage: mk("EmptyLatentImage", "Empty Latent Image", "latent", { width: ["INT", { default: 512, min: 16, max: 16384, step: 8 }], height: ["INT", { default: 512, min: 16, max: 16384, step: 8 }], batch_size: ["INT", { default: 1, min: 1, max: 4096 }] }, ["LATENT"]),
    KSampler: mk("KSampler", "KSampler", "sampling", { model: ["MODEL"], seed: ["INT", { default: 0, min: 0, max: 18446744073709551615, control_after_generate: true }], steps: ["INT", { default: 20, min: 1, max: 10000 }], cfg: ["FLOAT", { default: 8.0, min: 0.0, max: 100.0, step: 0.1, round: 0.01 }], sampler_name: [["euler", "ddim"]], scheduler: [["normal", "karras"]], positive: ["CONDITIONING"], negative: ["CONDITIONING"], latent_image: ["LATENT"], denoise: ["FLOAT", { default: 1.0, min: 0.0, max: 1.0, step: 0.01 }] }, ["LATENT"]),
    VAEDecode: mk("VAEDecode", "VAE Decode", "latent", { samples: ["LATENT"], vae: ["VAE"] }, ["IMAGE"]),
  } : {};
  return {
    ...sd,
    EmptyImage: mk("EmptyImage", "EmptyImage", "image", { width: ["INT", { default: 512, min: 1, max: 16384, step: 1 }], height: ["INT", { default: 512, min: 1, max: 16384, step: 1 }], batch_size: ["INT", { default: 1, min: 1, max: 4096 }], color: ["INT", { default: 0, min: 0, max: 0xffffff, step: 1 }] }, IMG),
    ImageInvert: mk("ImageInvert", "Invert Image", "image", { image: IMG }, IMG),
    ImageScale: mk("ImageScale", "Upscale Image", "image/upscaling", { image: IMG, upscale_method: [["nearest-exact", "bilinear", "area", "bicubic", "lanczos"]], width: ["INT", { default: 512, min: 0, max: 16384, step: 1 }], height: ["INT", { default: 512, min: 0, max: 16384, step: 1 }], crop: [["disabled", "center"]] }, IMG),
    LoadImage: mk("LoadImage", "Load Image", "image", { image: [files, { image_upload: true }] }, ["IMAGE", "MASK"]),
    SaveImage: mk("SaveImage", "Save Image", "image", { images: IMG, filename_prefix: ["STRING", { default: "ComfyUI" }] }, [], true),
    PreviewImage: mk("PreviewImage", "Preview Image", "image", { images: IMG }, [], true),
    SlowSampler: mk("SlowSampler", "Slow Sampler (mock)", "sampling", { image: IMG, seed: ["INT", { default: 0, min: 0, max: 18446744073709551615, control_after_generate: true }], steps: ["INT", { default: 10, min: 1, max: 1000 }], cfg: ["FLOAT", { default: 8.0, min: 0, max: 100, step: 0.1, round: 0.01 }], text: ["STRING", { multiline: true }], flag: ["BOOLEAN", { default: true }] }, IMG),
  };
};

const sockets = new Map();
let running = null; const pending = []; const history = {}; let counter = 0; let interrupted = false; let fileCounter = 1;
const send = (sid, msg) => { const s = sid && sockets.get(sid); if (s && s.readyState === 1) s.send(typeof msg === "string" || Buffer.isBuffer(msg) ? msg : JSON.stringify(msg)); };
const broadcast = (msg) => { for (const s of sockets.values()) if (s.readyState === 1) s.send(JSON.stringify(msg)); };
const status = () => broadcast({ type: "status", data: { status: { exec_info: { queue_remaining: pending.length + (running ? 1 : 0) } } } });

function validate(prompt) {
  const info = objectInfo(); const node_errors = {};
  for (const [id, n] of Object.entries(prompt)) {
    if (!info[n.class_type]) return { error: { type: "invalid_prompt", message: `Cannot execute because node ${n.class_type} does not exist.`, details: `Node ID '#${id}'`, extra_info: {} }, node_errors: {} };
    for (const [name, spec] of Object.entries(info[n.class_type].input.required)) {
      const v = n.inputs[name];
      const errs = [];
      if (v === undefined) errs.push({ type: "required_input_missing", message: "Required input is missing", details: name, extra_info: { input_name: name } });
      else if (Array.isArray(spec[0]) && !spec[0].includes(v)) errs.push({ type: "value_not_in_list", message: "Value not in list", details: `${name}: '${v}' not in list`, extra_info: { input_name: name } });
      else if (spec[1] && spec[1].max != null && v > spec[1].max) errs.push({ type: "value_bigger_than_max", message: `Value ${v} bigger than max of ${spec[1].max}`, details: name, extra_info: { input_name: name } });
      if (errs.length) (node_errors[id] ||= { errors: [], dependent_outputs: [], class_type: n.class_type }).errors.push(...errs);
    }
  }
  if (Object.keys(node_errors).length) return { error: { type: "prompt_outputs_failed_validation", message: "Prompt outputs failed validation", details: "", extra_info: {} }, node_errors };
  return null;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function worker() {
  if (running || !pending.length) return;
  running = pending.shift(); status();
  const [number, pid, prompt, extra] = running; const sid = extra.client_id; const ts = () => Date.now();
  const messages = [["execution_start", { prompt_id: pid, timestamp: ts() }], ["execution_cached", { nodes: [], prompt_id: pid, timestamp: ts() }]];
  messages.forEach(([t, d]) => send(sid, { type: t, data: d }));
  interrupted = false; const outputs = {}; let result = "success";
  for (const [id, n] of Object.entries(prompt)) {
    send(sid, { type: "executing", data: { node: id, display_node: id, prompt_id: pid } });
    if (n.class_type === "SlowSampler" || n.class_type === "KSampler") {
      for (let i = 1; i <= n.inputs.steps; i++) {
        await sleep(150);
        if (interrupted) break;
        send(sid, { type: "progress", data: { value: i, max: n.inputs.steps, prompt_id: pid, node: id } });
        const head = Buffer.alloc(8); head.writeUInt32BE(1, 0); head.writeUInt32BE(2, 4);
        send(sid, Buffer.concat([head, png(64, 64, [255 * i / n.inputs.steps, 100, 200])]));
      }
    } else await sleep(50);
    if (interrupted) { result = "interrupted"; const d = { prompt_id: pid, node_id: id, node_type: n.class_type, executed: [], timestamp: ts() }; messages.push(["execution_interrupted", d]); send(sid, { type: "execution_interrupted", data: d }); break; }
    if (n.class_type === "SaveImage" || n.class_type === "PreviewImage") {
      const name = `ComfyUI_${String(fileCounter++).padStart(5, "0")}_.png`;
      const side = prompt["5"] && prompt["5"].class_type === "EmptyLatentImage" ? prompt["5"].inputs.width : 128;
      fs.writeFileSync(path.join(OUTPUT, name), png(side, side, [200, 80, 255], { prompt: JSON.stringify(prompt), ...Object.fromEntries(Object.entries(extra.extra_pnginfo || {}).map(([k, v]) => [k, JSON.stringify(v)])) }));
      outputs[id] = { images: [{ filename: name, subfolder: "", type: "output" }] };
      send(sid, { type: "executed", data: { node: id, display_node: id, output: outputs[id], prompt_id: pid } });
    }
  }
  if (result === "success") { const d = { prompt_id: pid, timestamp: ts() }; messages.push(["execution_success", d]); send(sid, { type: "execution_success", data: d }); }
  history[pid] = { prompt: running, outputs, status: { status_str: result === "success" ? "success" : "error", completed: result === "success", messages }, meta: {} };
  running = null; status();
  send(sid, { type: "executing", data: { node: null, prompt_id: pid } });
  setTimeout(worker, 0);
}

function body(req) { return new Promise((r) => { const b = []; req.on("data", (c) => b.push(c)); req.on("end", () => r(Buffer.concat(b))); }); }
function json(res, code, obj) { res.writeHead(code, { "Content-Type": "application/json" }); res.end(JSON.stringify(obj)); }

const server = http.createServer(async (req, res) => {
  const u = new URL(req.url, "http://x"); let p = u.pathname.replace(/^\/api(?=\/)/, "");
  const b = await body(req);
  if (p === "/object_info") return json(res, 200, objectInfo());
  if (p === "/system_stats") return json(res, 200, { system: { os: "posix", ram_total: 8e9, ram_free: 4e9, comfyui_version: "0.3.64" }, devices: [{ name: "cpu", type: "cpu", index: null, vram_total: 8e9, vram_free: 4e9, torch_vram_total: 0, torch_vram_free: 0 }] });
  if (p === "/queue" && req.method === "GET") return json(res, 200, { queue_running: running ? [running] : [], queue_pending: pending });
  if (p === "/queue") { const j = JSON.parse(b || "{}"); if (j.clear) pending.length = 0; for (const id of j.delete || []) { const i = pending.findIndex((x) => x[1] === id); if (i >= 0) pending.splice(i, 1); } status(); res.end(); return; }
  if (p === "/history" && req.method === "GET") return json(res, 200, history);
  if (p === "/history") { const j = JSON.parse(b || "{}"); if (j.clear) for (const k of Object.keys(history)) delete history[k]; for (const id of j.delete || []) delete history[id]; res.end(); return; }
  if (p === "/interrupt") { interrupted = true; res.end(); return; }
  if (p === "/free") { res.end(); return; }
  if (p === "/prompt" && req.method === "POST") {
    const j = JSON.parse(b); const err = validate(j.prompt);
    if (err) return json(res, 400, err);
    const pid = crypto.randomUUID(); pending.push([counter++, pid, j.prompt, { ...j.extra_data, client_id: j.client_id }, []]); status(); setTimeout(worker, 0);
    return json(res, 200, { prompt_id: pid, number: counter - 1, node_errors: {} });
  }
  if (p === "/view") { const dir = u.searchParams.get("type") === "input" ? INPUT : OUTPUT; const f = path.join(dir, path.basename(u.searchParams.get("filename") || "")); if (!fs.existsSync(f)) { res.writeHead(404); return res.end(); } res.writeHead(200, { "Content-Type": "image/png" }); return res.end(fs.readFileSync(f)); }
  if (p === "/upload/image") {
    const boundary = /boundary=(.+)$/.exec(req.headers["content-type"])[1]; const s = b.toString("latin1");
    const part = s.split("--" + boundary).find((x) => /name="image"/.test(x)); const name = /filename="([^"]+)"/.exec(part)[1];
    const data = part.slice(part.indexOf("\r\n\r\n") + 4, part.length - 2); fs.writeFileSync(path.join(INPUT, name), Buffer.from(data, "latin1"));
    return json(res, 200, { name, subfolder: "", type: "input" });
  }
  let f = path.join(WEB, p === "/" ? "index.html" : path.normalize(p));
  if (!f.startsWith(WEB) || !fs.existsSync(f) || fs.statSync(f).isDirectory()) { res.writeHead(404); return res.end(); }
  const types = { ".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".json": "application/json", ".png": "image/png" };
  res.writeHead(200, { "Content-Type": types[path.extname(f)] || "application/octet-stream" }); res.end(fs.readFileSync(f));
});
const wss = new WebSocketServer({ noServer: true });
server.on("upgrade", (req, sock, head) => wss.handleUpgrade(req, sock, head, (ws) => {
  const sid = new URL(req.url, "http://x").searchParams.get("clientId") || crypto.randomUUID().replace(/-/g, "");
  sockets.set(sid, ws); ws.on("close", () => { if (sockets.get(sid) === ws) sockets.delete(sid); });
  ws.send(JSON.stringify({ type: "status", data: { status: { exec_info: { queue_remaining: pending.length } }, sid } }));
}));
// Accepts latentd's --port/--port-file so that LATENTD_BIN can point at a wrapper of this file.
const argv = process.argv.slice(2);
const flag = (name) => { const i = argv.indexOf(name); return i >= 0 ? argv[i + 1] : null; };
const port = Number(flag("--port") ?? (argv[0] && !argv[0].startsWith("--") ? argv[0] : 8199));
server.listen(port, "127.0.0.1", () => {
  console.log(`mock on ${server.address().port}, files in ${TMP}`);
  if (flag("--port-file")) fs.writeFileSync(flag("--port-file"), `${server.address().port}\n`);
});
process.on("SIGTERM", () => process.exit(0));

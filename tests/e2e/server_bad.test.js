// e2e: hostile and broken clients. Malformed HTTP (4xx, or 505 for an unknown version), slow heads, idle sockets, vanished
// clients, wrong JSON types, descriptor exhaustion: each gets a clear error (or a closed
// socket) and the server keeps serving (h2o t/40bad-request.t in spirit).
"use strict";
const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("fs");
const net = require("net");
const path = require("path");
const L = require("./lib/latentd.js");

let srv;
test.before(async () => {
  srv = await L.startLatentd({
    setup(dir) { fs.writeFileSync(path.join(dir, "output", "big.bin"), Buffer.alloc(32 << 20, 7)); },
  });
});
test.after(async () => {
  assert.equal((await srv.stop()).code, 0, "clean exit after all the abuse");
  L.removeDir(srv.dir);
});

async function alive() {
  const t0 = Date.now();
  const r = await L.request(srv, "GET", "/prompt");
  assert.equal(r.status, 200);
  return Date.now() - t0;
}

test("malformed HTTP requests get 4xx or a closed socket", async () => {
  const cases = [
    "GARBAGE\r\n\r\n",
    "GET / HTTP/9.9\r\n\r\n",
    "GET /prompt HTTP/1.1\r\nHost\r\n\r\n",
    "GET /prompt HTTP/1.1\r\nHost: x\r\nX: " + "a".repeat(200000) + "\r\n\r\n",
    "\0\0\0\0\r\n\r\n",
    "POST /prompt HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
    "POST /prompt HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n",
    "POST /prompt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    "GET /%00 HTTP/1.1\r\nHost: x\r\n\r\n",
    "GET " + "/a".repeat(30000) + " HTTP/1.1\r\nHost: x\r\n\r\n",
    "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + "x".repeat(100), // a TLS ClientHello
  ];
  for (const c of cases) {
    const out = (await L.rawRequest(srv, Buffer.from(c, "latin1"), { timeoutMs: 1500, halfClose: true })).toString("latin1");
    const m = out.match(/^HTTP\/1\.[01] (\d{3})/);
    assert.ok(out === "" || (m && ((+m[1] >= 400 && +m[1] < 500) || +m[1] === 505)), `${JSON.stringify(c.slice(0, 60))} -> ${JSON.stringify(out.slice(0, 80))}`);
    await alive();
  }
});

test("bad JSON types at every POST route get ComfyUI-shaped errors", async () => {
  const bodies = [
    ["/prompt", { prompt: { 1: { class_type: 5 } } }],
    ["/prompt", { prompt: { 1: { inputs: [] } } }],
    ["/prompt", { prompt: { 1: { class_type: "ImageInvert", inputs: { image: "not a link" } } } }],
    ["/prompt", { prompt: { 1: { class_type: "ImageInvert", inputs: { image: ["99", 0] } } } }],
    ["/prompt", { prompt: { 1: { class_type: "SaveImage", inputs: { images: ["1", 0] } } } }],
    ["/prompt", { prompt: [] }],
    ["/prompt", { prompt: null }],
    ["/prompt", { prompt: { 1: { class_type: "EmptyImage", inputs: {} } }, extra_data: "x", client_id: 5 }],
    ["/prompt", { prompt: {}, partial_execution_targets: "3" }],
    ["/queue", { delete: "abc" }],
    ["/queue", { clear: "yes", delete: [1, null, {}] }],
    ["/history", { delete: [1, {}] }],
    ["/interrupt", { prompt_id: { a: 1 } }],
    ["/free", { unload_models: "x", free_memory: [] }],
    ["/settings", "[]"],
    ["/users", { username: 7 }],
  ];
  for (const [route, body] of bodies) {
    const r = await L.request(srv, "POST", route, typeof body === "string" ? { body } : { json: body });
    assert.ok(r.status === 200 || (r.status >= 400 && r.status < 500), `${route} ${JSON.stringify(body)} -> ${r.status}`);
    if (r.status >= 400) assert.ok(r.json().error, `${route}: JSON error body`);
    await alive();
  }
  // Deeply nested JSON (cJSON's nesting limit) and a huge flat one.
  let r = await L.request(srv, "POST", "/prompt", { body: "[".repeat(100000) + "]".repeat(100000) });
  assert.equal(r.status, 400);
  r = await L.request(srv, "POST", "/prompt", { body: JSON.stringify({ prompt: Object.fromEntries(Array.from({ length: 20000 }, (_, i) => [String(i), { class_type: "Nope", inputs: {} }])) }) });
  assert.equal(r.status, 400);
  await alive();
});

test("a slow client cannot stall the acceptor; idle sockets cost nothing", async () => {
  // A client that dribbles its request head one byte every 50 ms...
  const slow = net.connect(srv.port, "127.0.0.1");
  await new Promise((r) => slow.once("connect", r));
  const head = "GET /prompt HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  let i = 0, slowReply = "";
  slow.on("data", (d) => { slowReply += d; });
  const dribble = setInterval(() => { if (i < head.length) slow.write(head[i++]); }, 50);
  // ... and 100 sockets that connect and send nothing.
  const idle = [];
  for (let k = 0; k < 100; k++) { const s = net.connect(srv.port, "127.0.0.1"); s.on("error", () => {}); idle.push(s); }
  await L.sleep(200);
  // Meanwhile normal clients are served promptly.
  for (let k = 0; k < 20; k++) {
    const ms = await alive();
    assert.ok(ms < 1000, `request took ${ms} ms while a slow client was dribbling`);
  }
  await L.waitFor(() => slowReply.includes("\r\n\r\n"), { timeoutMs: 10000 });
  assert.match(slowReply, /^HTTP\/1\.1 200/, "the slow client is served too");
  clearInterval(dribble);
  slow.destroy();
  for (const s of idle) s.destroy();
  await alive();
});

test("clients that vanish mid-request or mid-response", async () => {
  // Body shorter than Content-Length, then gone.
  for (let k = 0; k < 5; k++) {
    const s = net.connect(srv.port, "127.0.0.1");
    await new Promise((r) => s.once("connect", r));
    s.write("POST /prompt HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"prompt\":");
    s.destroy();
  }
  // A 32 MiB download abandoned after the first bytes.
  for (let k = 0; k < 5; k++) {
    const s = net.connect(srv.port, "127.0.0.1");
    await new Promise((r) => s.once("connect", r));
    s.write("GET /view?filename=big.bin HTTP/1.1\r\nHost: x\r\n\r\n");
    await new Promise((r) => s.once("data", r));
    s.destroy();
  }
  // Connect and close without sending anything.
  for (let k = 0; k < 20; k++) {
    const s = net.connect(srv.port, "127.0.0.1");
    await new Promise((r) => s.once("connect", r));
    s.destroy();
  }
  await alive();
  const r = await L.request(srv, "GET", "/view?filename=big.bin");
  assert.equal(r.body.length, 32 << 20, "full downloads still work");
});

test("descriptor exhaustion (EMFILE): the server recovers", async () => {
  const small = await L.startLatentd({ nofile: 64 });
  try {
    const socks = [];
    for (let k = 0; k < 150; k++) { const s = net.connect(small.port, "127.0.0.1"); s.on("error", () => {}); socks.push(s); }
    await L.sleep(500);
    for (const s of socks) s.destroy();
    await L.sleep(300);
    const r = await L.waitFor(async () => { try { const x = await L.request(small, "GET", "/prompt"); return x.status === 200 && x; } catch { return false; } }, { timeoutMs: 10000 });
    assert.equal(r.status, 200);
    assert.match(small.log(), /out of file descriptors|too many|cannot add connection/i, "the exhaustion was hit and logged");
  } finally {
    assert.equal((await small.stop()).code, 0);
    L.removeDir(small.dir);
  }
});

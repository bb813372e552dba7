// e2e: every HTTP route of comfy-api.md §2-3 (bare and under /api), happy paths and bad
// inputs, against the real latentd. The WebSocket, file and persistence tests live in
// their own files.
"use strict";
const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("fs");
const path = require("path");
const L = require("./lib/latentd.js");

let srv;
test.before(async () => {
  srv = await L.startLatentd({
    setup(dir) {
      fs.mkdirSync(path.join(dir, "models", "embeddings", "sub"), { recursive: true });
      fs.writeFileSync(path.join(dir, "models", "embeddings", "easynegative.safetensors"), "x");
      fs.writeFileSync(path.join(dir, "models", "embeddings", "sub", "foo.pt"), "x");
      fs.writeFileSync(path.join(dir, "models", "embeddings", "notes.txt"), "x");
      fs.mkdirSync(path.join(dir, "models", "loras"), { recursive: true });
      // A safetensors file with __metadata__ (8-byte little-endian header length + JSON).
      const hdr = Buffer.from(JSON.stringify({ __metadata__: { ss_name: "tiny" }, w: { dtype: "F32", shape: [1], data_offsets: [0, 4] } }));
      const len = Buffer.alloc(8); len.writeBigUInt64LE(BigInt(hdr.length));
      fs.writeFileSync(path.join(dir, "models", "loras", "tiny.safetensors"), Buffer.concat([len, hdr, Buffer.alloc(4)]));
    },
  });
});
test.after(async () => {
  const r = await srv.stop();
  assert.equal(r.code, 0, "clean exit on SIGTERM");
  L.removeDir(srv.dir);
});

async function alive() {
  const r = await L.request(srv, "GET", "/prompt");
  assert.equal(r.status, 200, "server still answers");
}

function isJsonCt(r) {
  assert.match(r.headers["content-type"], /^application\/json/);
}

for (const prefix of ["", "/api"]) {
  test(`GET ${prefix}/prompt, /queue, /history, /system_stats, /features shapes`, async () => {
    let r = await L.request(srv, "GET", `${prefix}/prompt`);
    assert.equal(r.status, 200); isJsonCt(r);
    assert.deepEqual(r.json(), { exec_info: { queue_remaining: 0 } });
    r = await L.request(srv, "GET", `${prefix}/queue?clientId=abc&rand=0.5`);
    assert.deepEqual(r.json(), { queue_running: [], queue_pending: [] });
    r = await L.request(srv, "GET", `${prefix}/history?max_items=200`);
    assert.equal(r.status, 200);
    assert.equal(typeof r.json(), "object");
    r = await L.request(srv, "GET", `${prefix}/system_stats`);
    const s = r.json();
    assert.equal(s.system.os, "posix");
    for (const k of ["python_version", "comfyui_version", "pytorch_version"]) assert.equal(typeof s.system[k], "string");
    assert.equal(s.system.embedded_python, false);
    assert.ok(Array.isArray(s.system.argv) && s.system.argv.includes("--port"));
    assert.ok(s.system.ram_total > 0 && s.system.ram_free > 0);
    assert.equal(s.devices.length, 1);
    for (const k of ["name", "type", "vram_total", "vram_free", "torch_vram_total", "torch_vram_free"]) assert.ok(k in s.devices[0], k);
    r = await L.request(srv, "GET", `${prefix}/features`);
    assert.deepEqual(r.json(), { supports_preview_metadata: true, max_upload_size: 104857600 });
  });

  test(`GET ${prefix}/object_info and unknown class`, async () => {
    let r = await L.request(srv, "GET", `${prefix}/object_info`);
    assert.equal(r.status, 200); isJsonCt(r);
    const info = r.json();
    assert.ok(Object.keys(info).length > 0, "some node classes");
    const [name] = Object.keys(info);
    r = await L.request(srv, "GET", `${prefix}/object_info/${encodeURIComponent(name)}`);
    assert.deepEqual(Object.keys(r.json()), [name]);
    r = await L.request(srv, "GET", `${prefix}/object_info/NoSuchNode`);
    assert.equal(r.status, 200);
    assert.deepEqual(r.json(), {});
  });

  test(`small listing routes under '${prefix || "/"}'`, async () => {
    let r = await L.request(srv, "GET", `${prefix}/embeddings`);
    assert.deepEqual(r.json(), ["easynegative", "sub/foo"]);
    r = await L.request(srv, "GET", `${prefix}/extensions`);
    assert.deepEqual(r.json(), []);
    r = await L.request(srv, "GET", `${prefix}/models`);
    assert.deepEqual(r.json().slice(0, 4), ["checkpoints", "configs", "loras", "vae"]);
    assert.equal(r.json().length, 20);
    r = await L.request(srv, "GET", `${prefix}/models/loras`);
    assert.deepEqual(r.json(), ["tiny.safetensors"]);
    r = await L.request(srv, "GET", `${prefix}/models/unet`);
    assert.equal(r.status, 404, "legacy alias is not a folder here");
    r = await L.request(srv, "GET", `${prefix}/models/nope`);
    assert.equal(r.status, 404);
    r = await L.request(srv, "GET", `${prefix}/experiment/models`);
    const em = r.json();
    assert.ok(em.find((f) => f.name === "checkpoints" && f.folders.length >= 1));
    assert.ok(!em.find((f) => f.name === "configs" || f.name === "custom_nodes"));
    r = await L.request(srv, "GET", `${prefix}/experiment/models/loras`);
    const lo = r.json();
    assert.equal(lo.length, 1);
    assert.equal(lo[0].name, "tiny.safetensors");
    assert.equal(lo[0].pathIndex, 0);
    assert.equal(typeof lo[0].modified, "number");
    r = await L.request(srv, "GET", `${prefix}/experiment/models/nope`);
    assert.equal(r.status, 404);
    r = await L.request(srv, "GET", `${prefix}/view_metadata/loras?filename=tiny.safetensors`);
    assert.deepEqual(r.json(), { ss_name: "tiny" });
    for (const q of ["filename=missing.safetensors", "filename=../x.safetensors", "filename=tiny.txt", ""]) {
      r = await L.request(srv, "GET", `${prefix}/view_metadata/loras?${q}`);
      assert.equal(r.status, 404, q);
    }
    r = await L.request(srv, "GET", `${prefix}/workflow_templates`);
    assert.deepEqual(r.json(), {});
    r = await L.request(srv, "GET", `${prefix}/i18n`);
    assert.deepEqual(r.json(), {});
  });
}

test("/internal routes exist only without /api", async () => {
  let r = await L.request(srv, "GET", "/internal/logs/raw");
  assert.deepEqual(r.json().size, { cols: 80, rows: 24 });
  r = await L.request(srv, "GET", "/internal/logs");
  assert.equal(typeof r.json(), "string");
  r = await L.request(srv, "PATCH", "/internal/logs/subscribe", { json: { clientId: "x", enabled: true } });
  assert.equal(r.status, 200);
  r = await L.request(srv, "GET", "/internal/folder_paths");
  assert.ok(Array.isArray(r.json().checkpoints));
  fs.writeFileSync(path.join(srv.dir, "output", "a.png"), "1");
  await L.sleep(20);
  fs.writeFileSync(path.join(srv.dir, "output", "b.png"), "2");
  r = await L.request(srv, "GET", "/internal/files/output");
  assert.deepEqual(r.json().slice(0, 2), ["b.png", "a.png"], "newest first");
  r = await L.request(srv, "GET", "/internal/files/models");
  assert.equal(r.status, 400);
  r = await L.request(srv, "GET", "/api/internal/logs/raw");
  assert.equal(r.status, 404);
});

test("POST /prompt bad inputs give ComfyUI-shaped 400s and create nothing", async () => {
  const cases = [
    ["not json", "{oops", "invalid_json"],
    ["empty body", "", "invalid_json"],
    ["array", "[1,2]", "invalid_json"],
    ["no prompt", JSON.stringify({ client_id: "x" }), "no_prompt"],
    ["prompt is a string", JSON.stringify({ prompt: "hello" }), "invalid_prompt"],
    ["bad number", JSON.stringify({ prompt: {}, number: "abc" }), "invalid_prompt"],
    ["empty prompt", JSON.stringify({ prompt: {} }), "prompt_no_outputs"],
    ["unknown class", JSON.stringify({ prompt: { 1: { class_type: "NoSuchNode", inputs: {} } } }), "invalid_prompt"],
    ["node not an object", JSON.stringify({ prompt: { 1: 5 } }), null],
  ];
  for (const [what, body, type] of cases) {
    const r = await L.request(srv, "POST", "/prompt", { body, headers: { "Content-Type": "text/plain" } });
    assert.equal(r.status, 400, what);
    isJsonCt(r);
    const j = r.json();
    assert.equal(typeof j.error.message, "string", what);
    assert.ok("details" in j.error && "extra_info" in j.error, what);
    assert.equal(typeof j.node_errors, "object", what);
    if (type) assert.equal(j.error.type, type, what);
  }
  const q = (await L.request(srv, "GET", "/queue")).json();
  assert.equal(q.queue_pending.length + q.queue_running.length, 0);
  await alive();
});

test("POST /queue, /history, /interrupt, /free accept empty bodies and reject malformed JSON", async () => {
  for (const p of ["/interrupt", "/free", "/api/interrupt", "/api/free"]) {
    let r = await L.request(srv, "POST", p);
    assert.equal(r.status, 200, p);
    assert.equal(r.body.length, 0, p);
    r = await L.request(srv, "POST", p, { body: "{garbage" });
    assert.equal(r.status, 200, `${p} tolerates invalid JSON`);
  }
  let r = await L.request(srv, "POST", "/interrupt", { json: { prompt_id: "not-running" } });
  assert.equal(r.status, 200);
  r = await L.request(srv, "POST", "/free", { json: { unload_models: true, free_memory: true } });
  assert.equal(r.status, 200);
  for (const p of ["/queue", "/history"]) {
    r = await L.request(srv, "POST", p, { json: { clear: true } });
    assert.equal(r.status, 200); assert.equal(r.body.length, 0);
    r = await L.request(srv, "POST", p, { json: { delete: ["nope"] } });
    assert.equal(r.status, 200);
    r = await L.request(srv, "POST", p, { body: "{bad" });
    assert.equal(r.status, 400); isJsonCt(r);
    assert.equal(r.json().error.type, "invalid_json");
  }
  await alive();
});

test("GET /history query validation and unknown ids", async () => {
  let r = await L.request(srv, "GET", "/history/does-not-exist");
  assert.equal(r.status, 200);
  assert.deepEqual(r.json(), {});
  for (const q of ["max_items=abc", "offset=1.5", "max_items="]) {
    r = await L.request(srv, "GET", `/history?${q}`);
    assert.equal(r.status, 400, q);
    assert.equal(r.json().error.type, "invalid_query");
  }
  r = await L.request(srv, "GET", "/history?offset=1000&unknown=1");
  assert.deepEqual(r.json(), {});
});

test("unknown routes, wrong methods, HEAD and OPTIONS", async () => {
  let r = await L.request(srv, "GET", "/api/nope");
  assert.equal(r.status, 404); isJsonCt(r);
  assert.equal(r.json().error.type, "not_found");
  r = await L.request(srv, "DELETE", "/prompt");
  assert.equal(r.status, 405);
  assert.match(r.headers.allow, /GET/);
  assert.equal(r.json().error.type, "method_not_allowed");
  r = await L.request(srv, "PUT", "/queue", { json: {} });
  assert.equal(r.status, 405);
  r = await L.request(srv, "HEAD", "/system_stats");
  assert.equal(r.status, 200);
  assert.equal(r.body.length, 0);
  r = await L.request(srv, "OPTIONS", "/prompt");
  assert.equal(r.status, 200);
  r = await L.request(srv, "BREW", "/prompt");
  assert.ok(r.status >= 400 && r.status < 500 || r.status === 501, `odd method -> ${r.status}`);
  r = await L.request(srv, "GET", "/%zz");
  assert.equal(r.status, 400);
  r = await L.request(srv, "GET", "/ws");
  assert.equal(r.status, 400, "plain GET /ws without upgrade");
  await alive();
});

test("origin guard: loopback Host with a foreign Origin is refused", async () => {
  const host = `127.0.0.1:${srv.port}`;
  let r = await L.request(srv, "GET", "/prompt", { headers: { Host: host, Origin: "http://evil.com" } });
  assert.equal(r.status, 403);
  assert.equal(r.body.length, 0);
  r = await L.request(srv, "POST", "/prompt", { headers: { Host: host, Origin: "http://evil.com" }, json: { prompt: {} } });
  assert.equal(r.status, 403);
  r = await L.request(srv, "GET", "/prompt", { headers: { Host: host, Origin: `http://${host}` } });
  assert.equal(r.status, 200);
  r = await L.request(srv, "GET", "/prompt", { headers: { Host: "localhost:1", Origin: "http://localhost" } });
  assert.equal(r.status, 200, "Origin without port compares hostnames only");
  r = await L.request(srv, "GET", "/prompt", { headers: { Host: "example.com", Origin: "http://evil.com" } });
  assert.equal(r.status, 200, "non-loopback Host is not guarded");
  await assert.rejects(L.openWs(srv, { headers: { Origin: "http://evil.com" } }), /403|refused|Unexpected|socket/i);
});

test("413 over --max-upload-size (declared and streamed), server keeps serving", async () => {
  const big = Buffer.alloc(104857600 + 10, 0x20);
  let r = await L.rawRequest(srv, Buffer.from(`POST /prompt HTTP/1.1\r\nHost: x\r\nContent-Length: ${big.length}\r\n\r\n`), { timeoutMs: 2000 });
  assert.match(r.toString(), /^HTTP\/1\.1 413/);
  assert.match(r.toString(), /request_too_large/);
  // Chunked upload with no Content-Length: counted as it arrives.
  const chunk = Buffer.alloc(1 << 20, 0x20);
  const res = await new Promise((resolve, reject) => {
    const http = require("http");
    const req = http.request({ host: "127.0.0.1", port: srv.port, method: "POST", path: "/upload/image", headers: { "Transfer-Encoding": "chunked", "Content-Type": "multipart/form-data; boundary=x" } }, (res2) => {
      const cs = []; res2.on("data", (c) => cs.push(c)); res2.on("end", () => resolve({ status: res2.statusCode, body: Buffer.concat(cs).toString() }));
    });
    req.on("error", reject);
    let sent = 0;
    const pump = () => { while (sent < 101) { sent++; if (!req.write(chunk)) { req.once("drain", pump); return; } } req.end(); };
    pump();
  });
  assert.equal(res.status, 413);
  await alive();
});

test("settings, users, userdata round trip (single-user)", async () => {
  let r = await L.request(srv, "GET", "/api/users");
  assert.equal(r.json().storage, "server");
  r = await L.request(srv, "GET", "/api/settings");
  assert.deepEqual(r.json(), {});
  r = await L.request(srv, "POST", "/api/settings", { json: { "Comfy.A": 1, "Comfy.B": "x" } });
  assert.equal(r.status, 200);
  r = await L.request(srv, "POST", "/api/settings/Comfy.C", { json: [1, 2] });
  assert.equal(r.status, 200);
  r = await L.request(srv, "GET", "/api/settings");
  assert.deepEqual(r.json(), { "Comfy.A": 1, "Comfy.B": "x", "Comfy.C": [1, 2] });
  r = await L.request(srv, "GET", "/api/settings/Comfy.B");
  assert.equal(r.json(), "x");
  r = await L.request(srv, "GET", "/api/settings/Missing");
  assert.equal(r.json(), null);
  r = await L.request(srv, "POST", "/api/settings", { body: "[1]" });
  assert.equal(r.status, 400);
  r = await L.request(srv, "GET", "/api/users");
  assert.equal(r.json().migrated, true);

  r = await L.request(srv, "POST", "/api/userdata/workflows%2Fa.json", { body: '{"w":1}' });
  assert.equal(r.status, 200);
  assert.equal(r.json(), "workflows/a.json");
  r = await L.request(srv, "POST", "/api/userdata/workflows%2Fa.json?overwrite=false", { body: "{}" });
  assert.equal(r.status, 409);
  r = await L.request(srv, "GET", "/api/userdata/workflows%2Fa.json");
  assert.equal(r.text, '{"w":1}');
  r = await L.request(srv, "GET", "/api/userdata?dir=workflows&recurse=true&split=false&full_info=true");
  const list = r.json();
  assert.equal(list.length, 1);
  assert.equal(list[0].path, "a.json");
  assert.equal(list[0].size, 7);
  r = await L.request(srv, "GET", "/api/userdata?dir=workflows");
  assert.deepEqual(r.json(), ["a.json"]);
  r = await L.request(srv, "GET", "/api/v2/userdata?path=workflows");
  assert.equal(r.json()[0].type, "file");
  r = await L.request(srv, "POST", "/api/userdata/workflows%2Fa.json/move/workflows%2Fb.json?full_info=true");
  assert.equal(r.status, 200);
  assert.equal(r.json().path, "workflows/b.json");
  r = await L.request(srv, "DELETE", "/api/userdata/workflows%2Fb.json");
  assert.equal(r.status, 204);
  r = await L.request(srv, "DELETE", "/api/userdata/workflows%2Fb.json");
  assert.equal(r.status, 404);
  r = await L.request(srv, "GET", "/api/userdata?dir=nope");
  assert.equal(r.status, 404);
  r = await L.request(srv, "GET", "/api/userdata");
  assert.equal(r.status, 400);
  for (const bad of ["..%2F..%2Fetc%2Fpasswd", "%2Fetc%2Fpasswd", "..", "a%2F..%2F..%2Fx"]) {
    r = await L.request(srv, "GET", `/api/userdata/${bad}`);
    assert.equal(r.status, 403, bad);
    r = await L.request(srv, "POST", `/api/userdata/${bad}`, { body: "x" });
    assert.equal(r.status, 403, bad);
  }
  r = await L.request(srv, "GET", "/api/userdata?dir=..%2F..");
  assert.equal(r.status, 403);
  await alive();
});

test("static files: web root at /, litegraph from node_modules, no escape", async () => {
  const web = path.join(L.SOURCE, "web");
  let r = await L.request(srv, "GET", "/");
  assert.equal(r.status, 200);
  assert.match(r.headers["content-type"], /text\/html/);
  assert.equal(r.headers["cache-control"], "no-cache");
  if (fs.existsSync(path.join(web, "index.html"))) {
    assert.equal(r.text, fs.readFileSync(path.join(web, "index.html"), "utf8"));
  }
  const lg = path.join(web, "node_modules", "litegraph.js", "build", "litegraph.core.js");
  if (fs.existsSync(lg)) {
    r = await L.request(srv, "GET", "/node_modules/litegraph.js/build/litegraph.core.js");
    assert.equal(r.status, 200);
    assert.match(r.headers["content-type"], /javascript/);
    r = await L.request(srv, "GET", "/lib/litegraph/litegraph.core.js");
    assert.equal(r.status, 200);
  }
  for (const p of ["/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/..%2f..%2fetc%2fpasswd", "/node_modules/../../../etc/passwd"]) {
    r = await L.request(srv, "GET", p);
    assert.equal(r.status, 404, p);
    assert.ok(!r.text.includes("root:"), p);
  }
  r = await L.request(srv, "GET", "/missing.png");
  assert.equal(r.status, 404);
  assert.equal(r.headers["cache-control"], "public, max-age=3600");
});

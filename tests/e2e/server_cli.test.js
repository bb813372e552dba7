// e2e: the command line. Every ComfyUI 0.3.64 flag of comfy-api.md §10 is accepted (the
// inapplicable ones with a one-line notice), --help lists them, bad values and unknown
// flags fail with a clear message, and the directory flags move the folders.
"use strict";
const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("fs");
const os = require("os");
const path = require("path");
const { spawnSync } = require("child_process");
const L = require("./lib/latentd.js");

function run(args, opts = {}) {
  return spawnSync(L.latentdBin(), args, { encoding: "utf8", timeout: 20000, ...opts });
}

const ALL_FLAGS = [
  ["--listen", "127.0.0.1"], ["--port", "0"], ["--tls-keyfile", "k.pem"], ["--tls-certfile", "c.pem"],
  ["--enable-cors-header"], ["--max-upload-size", "50"], ["--enable-compress-response-body"],
  ["--multi-user"], ["--dont-print-server"], ["--verbose", "WARNING"], ["--log-stdout"],
  ["--auto-launch"], ["--disable-auto-launch"], ["--extra-model-paths-config", "a.yaml", "b.yaml"],
  ["--front-end-version", "Comfy-Org/ComfyUI_frontend@latest"], ["--cpu"], ["--gpu-only"], ["--highvram"],
  ["--normalvram"], ["--lowvram"], ["--novram"], ["--reserve-vram", "0.5"], ["--disable-smart-memory"],
  ["--default-device", "0"], ["--cuda-malloc"], ["--disable-cuda-malloc"], ["--async-offload"],
  ["--disable-async-offload"], ["--force-non-blocking"], ["--deterministic"], ["--fast", "fp16_accumulation", "cublas_ops"],
  // one flag of each dtype group: ComfyUI's argparse refuses two of a group (DTYPE_FLAGS below)
  ["--force-fp32"], ["--bf16-unet"], ["--fp16-vae"], ["--cpu-vae"], ["--fp8_e4m3fn-text-enc"],
  ["--force-channels-last"], ["--use-split-cross-attention"],
  ["--use-quad-cross-attention"], ["--use-pytorch-cross-attention"], ["--use-sage-attention"],
  ["--use-flash-attention"], ["--disable-xformers"], ["--force-upcast-attention"], ["--dont-upcast-attention"],
  ["--cache-classic"], ["--cache-lru", "10"], ["--cache-none"], ["--preview-method", "auto"], ["--preview-size", "256"],
  ["--disable-metadata"], ["--default-hashing-function", "md5"], ["--disable-all-custom-nodes"],
  ["--whitelist-custom-nodes", "a", "b"], ["--disable-api-nodes"], ["--directml"], ["--oneapi-device-selector", "x"],
  ["--disable-ipex-optimize"], ["--supports-fp8-compute"], ["--mmap-torch-files"], ["--disable-mmap"],
  ["--windows-standalone-build"], ["--comfy-api-base", "https://api.comfy.org"], ["--quick-test-for-ci"],
];

// ComfyUI's mutually exclusive dtype groups (cli_args.py fp_group, fpunet_group, fpvae_group,
// fpte_group); latentd runs --bf16-* as bf16 GEMMs, the rest as fp32 (srv_precision.h).
const DTYPE_FLAGS = [
  ["--force-fp32", "--force-fp16"],
  ["--fp32-unet", "--fp64-unet", "--bf16-unet", "--fp16-unet", "--fp8_e4m3fn-unet", "--fp8_e5m2-unet", "--fp8_e8m0fnu-unet"],
  ["--fp16-vae", "--fp32-vae", "--bf16-vae"],
  ["--fp8_e4m3fn-text-enc", "--fp8_e5m2-text-enc", "--fp16-text-enc", "--fp32-text-enc", "--bf16-text-enc"],
];

test("each dtype flag is accepted; two of one group fail as ComfyUI's argparse does", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "latentd-cli-"));
  try {
    for (const group of DTYPE_FLAGS) {
      // one of each group at once is fine: latentd --force-fp32 --bf16-unet --bf16-vae ...
      const r = run([group[0], "--base-directory", dir, "--quick-test-for-ci"], { cwd: dir });
      assert.equal(r.status, 0, group[0] + ": " + r.stderr);
    }
    const all = run(["--force-fp32", "--bf16-unet", "--bf16-vae", "--bf16-text-enc", "--base-directory", dir,
      "--quick-test-for-ci", "--verbose", "INFO"], { cwd: dir });
    assert.equal(all.status, 0, all.stderr);
    assert.match(all.stdout + all.stderr, /compute precision: unet bf16, vae bf16, text encoder bf16; bf16 GEMM: /);
    for (const group of DTYPE_FLAGS) {
      const r = run([group[group.length - 1], group[0]]);
      assert.equal(r.status, 2, group.join(" "));
      assert.match(r.stderr, new RegExp(`argument ${group[0]}: not allowed with argument ${group[group.length - 1]}`));
    }
  } finally { L.removeDir(dir); }
});

test("--help lists the flags and exits 0", () => {
  const r = run(["--help"]);
  assert.equal(r.status, 0);
  for (const f of ["--listen", "--port", "--port-file", "--base-directory", "--max-upload-size", "--preview-method", "--database-url", "--use-sage-attention"]) assert.ok(r.stdout.includes(f), f);
});

test("every ComfyUI flag is accepted (with notices for inapplicable ones)", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "latentd-cli-"));
  try {
    const r = run([...ALL_FLAGS.flat(), "--base-directory", dir, "--verbose", "INFO"], { cwd: dir });
    const out = r.stdout + r.stderr;
    assert.equal(r.status, 0, out);
    assert.match(out, /'--use-sage-attention' accepted for ComfyUI compatibility/);
    assert.match(out, /'--fast' accepted/);
    assert.match(out, /TLS flags accepted/);
    assert.match(out, /--quick-test-for-ci: exiting/);
    for (const d of ["models/checkpoints", "models/loras", "models/vae", "models/embeddings", "input", "output", "user"]) {
      assert.ok(fs.existsSync(path.join(dir, d)), d);
    }
  } finally { L.removeDir(dir); }
});

test("bad values and unknown flags fail clearly", () => {
  for (const [args, re] of [[["--bogus"], /unknown flag '--bogus'/], [["--port", "x"], /invalid port 'x'/],
    [["--port", "70000"], /invalid port/], [["--preview-method", "magic"], /invalid --preview-method/],
    [["--max-upload-size"], /needs a value/], [["--cache-lru", "-1"], /invalid --cache-lru/],
    [["--verbose", "LOUD"], /invalid --verbose/], [["--user-directory", "/nonexistent/xyz"], /does not exist/],
    [["--cpu=yes"], /takes no value/]]) {
    const r = run(args);
    assert.equal(r.status, 2, args.join(" "));
    assert.match(r.stderr, re, args.join(" "));
  }
});

test("directory flags, --database-url, --max-upload-size, --enable-cors-header", async () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), "latentd-dirs-"));
  for (const d of ["in", "out", "usr"]) fs.mkdirSync(path.join(root, d));
  const srv = await L.startLatentd({ args: ["--input-directory", path.join(root, "in"), "--output-directory", path.join(root, "out"),
    "--temp-directory", path.join(root, "tmpbase"), "--user-directory", path.join(root, "usr"),
    "--database-url", `sqlite:///${path.join(root, "db", "jobs.sqlite")}`, "--max-upload-size", "0.001",
    "--enable-cors-header", "http://example.org", "--verbose"] });
  try {
    fs.writeFileSync(path.join(root, "out", "o.png"), "o");
    let r = await L.request(srv, "GET", "/view?filename=o.png");
    assert.equal(r.status, 200);
    assert.equal(r.headers["access-control-allow-origin"], "http://example.org");
    r = await L.request(srv, "GET", "/prompt", { headers: { Origin: "http://evil.com", Host: `127.0.0.1:${srv.port}` } });
    assert.equal(r.status, 200, "CORS mode turns the origin guard off");
    r = await L.request(srv, "OPTIONS", "/api/prompt", { headers: { Origin: "http://example.org", "Access-Control-Request-Method": "POST" } });
    assert.equal(r.status, 200, "preflight");
    assert.equal(r.headers["access-control-allow-methods"], "POST, GET, DELETE, PUT, OPTIONS");
    assert.equal(r.headers["access-control-allow-headers"], "Content-Type, Authorization");
    assert.equal(r.headers["access-control-allow-credentials"], "true");
    const m = L.multipart({ image: { filename: "x.png", data: Buffer.alloc(4096) } });
    r = await L.request(srv, "POST", "/upload/image", { body: m.body, headers: { "Content-Type": m.contentType } });
    assert.equal(r.status, 413, "1 KB limit");
    r = await L.request(srv, "GET", "/features");
    assert.equal(r.json().max_upload_size, 1048);
    const m2 = L.multipart({ image: { filename: "y.png", data: Buffer.alloc(10) } });
    r = await L.request(srv, "POST", "/upload/image", { body: m2.body, headers: { "Content-Type": m2.contentType } });
    assert.equal(r.status, 200);
    assert.ok(fs.existsSync(path.join(root, "in", "y.png")), "uploads go to --input-directory");
    assert.ok(fs.existsSync(path.join(root, "tmpbase", "temp")), "--temp-directory gets temp/ appended");
    assert.ok(fs.existsSync(path.join(root, "db", "jobs.sqlite")), "--database-url");
    await L.request(srv, "POST", "/settings", { json: { a: 1 } });
    assert.ok(fs.existsSync(path.join(root, "usr", "default", "comfy.settings.json")), "--user-directory");
    assert.match(srv.log(), /DEBUG\s+GET \/view/, "request log at --verbose DEBUG");
  } finally {
    assert.equal((await srv.stop()).code, 0);
    L.removeDir(srv.dir); L.removeDir(root);
  }
});

test("--enable-compress-response-body gzips JSON for clients that accept it", async () => {
  const zlib = require("zlib");
  const srv = await L.startLatentd({ args: ["--enable-compress-response-body"] });
  try {
    let r = await L.request(srv, "GET", "/object_info", { headers: { "Accept-Encoding": "gzip, deflate" } });
    assert.equal(r.headers["content-encoding"], "gzip");
    const plain = JSON.parse(zlib.gunzipSync(r.body).toString());
    assert.ok(Object.keys(plain).length > 0);
    r = await L.request(srv, "GET", "/object_info");
    assert.equal(r.headers["content-encoding"], undefined, "no gzip unless accepted");
    assert.deepEqual(r.json(), plain);
  } finally {
    await srv.stop();
    L.removeDir(srv.dir);
  }
});

test("--multi-user: users are created and picked by the comfy-user header", async () => {
  const srv = await L.startLatentd({ args: ["--multi-user"] });
  try {
    let r = await L.request(srv, "GET", "/api/users");
    assert.deepEqual(r.json(), { storage: "server", users: {} });
    r = await L.request(srv, "POST", "/api/users", { json: { username: "ann" } });
    assert.equal(r.status, 200);
    const id = r.json();
    assert.match(id, /^ann_/);
    r = await L.request(srv, "POST", "/api/users", { json: { username: "ann" } });
    assert.equal(r.status, 400);
    assert.deepEqual(r.json(), { error: "Duplicate username." });
    r = await L.request(srv, "GET", "/api/users");
    assert.deepEqual(r.json().users, { [id]: "ann" });
    r = await L.request(srv, "POST", "/api/settings", { json: { x: 1 }, headers: { "comfy-user": id } });
    assert.equal(r.status, 200);
    assert.ok(fs.existsSync(path.join(srv.dir, "user", id, "comfy.settings.json")));
    r = await L.request(srv, "GET", "/api/settings", { headers: { "comfy-user": id } });
    assert.deepEqual(r.json(), { x: 1 });
    r = await L.request(srv, "GET", "/api/settings", { headers: { "comfy-user": "nobody" } });
    assert.equal(r.status, 400);
    r = await L.request(srv, "GET", "/api/settings", { headers: { "comfy-user": "../../etc" } });
    assert.equal(r.status, 400);
  } finally {
    await srv.stop();
    L.removeDir(srv.dir);
  }
});

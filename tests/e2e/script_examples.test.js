// e2e: ComfyUI's own API clients, script_examples/basic_api_example.py,
// websockets_api_example.py and websockets_api_example_ws_images.py, run unchanged against
// the real latentd. They are read from a ComfyUI source tree at test time (not copied into
// this repository): LATENTD_COMFYUI_DIR (a checkout) or LATENTD_COMFYUI_GIT (a git dir,
// read with `git show HEAD:...`). There is no default location: without either variable the
// test skips, saying so (CI has no ComfyUI tree; set one to run it).
// The only substitution is the server address (127.0.0.1:8188 -> the test server's port);
// the model name needs none, since the tiny random-weight checkpoint from gen_ckpt is saved
// under the scripts' own name, v1-5-pruned-emaonly.safetensors. Their workflow runs as
// written: 512x512, 20 steps, euler/normal.
//   - basic_api_example.py queues the default workflow over HTTP: the job succeeds and its
//     SaveImage PNG is in output/;
//   - websockets_api_example.py waits on /ws for `executing` null and downloads its images
//     through /history and /view: the `images` it ends with (read from the script's globals
//     after runpy runs it) hold one PNG of 512x512 for node "9";
//   - websockets_api_example_ws_images.py collects SaveImageWebsocket's binary frames: one
//     PNG of 512x512 for its node, nothing saved to disk.
// The scripts need Python with websocket-client (Debian's python3-websocket, in
// tools/install.sh); the test skips, saying why, without it or without a ComfyUI tree.
"use strict";
const { describe, it, before, after } = require("node:test");
const assert = require("node:assert/strict");
const fs = require("fs");
const os = require("os");
const path = require("path");
const { spawn, spawnSync } = require("child_process");
const L = require("./lib/latentd.js");

const gen = process.env.LATENTD_GEN_CKPT || path.join(path.dirname(L.latentdBin()), "gen_ckpt");
const CKPT = "v1-5-pruned-emaonly.safetensors";
const SCRIPTS = ["basic_api_example.py", "websockets_api_example.py", "websockets_api_example_ws_images.py"];

// The script's source from a ComfyUI checkout or git dir; null when neither is there.
function scriptSource(name) {
  const dir = process.env.LATENTD_COMFYUI_DIR;
  if (dir) {
    const p = path.join(dir, "script_examples", name);
    return fs.existsSync(p) ? fs.readFileSync(p, "utf8") : null;
  }
  const git = process.env.LATENTD_COMFYUI_GIT;
  if (!git || !fs.existsSync(git)) return null;
  const r = spawnSync("git", ["--git-dir", git, "show", `HEAD:script_examples/${name}`], { encoding: "utf8" });
  return r.status === 0 ? r.stdout : null;
}

// A Python that can `import websocket` (websocket-client), or null.
function findPython() {
  for (const py of [process.env.LATENTD_PYTHON_WS, "/usr/bin/python3", "python3"].filter(Boolean)) {
    const r = spawnSync(py, ["-c", "import websocket"], { encoding: "utf8" });
    if (r.status === 0) return py;
  }
  return null;
}

// Run the script with runpy (unchanged; its globals come back) and print what it collected:
// for each node of `images`, the PNG sizes and dimensions (IHDR).
const RUNNER = `
import json, runpy, struct, sys
g = runpy.run_path(sys.argv[1], run_name="__main__")
out = {}
for node, imgs in (g.get("images") or {}).items():
    out[node] = [[len(b), b[:8] == b"\\x89PNG\\r\\n\\x1a\\n", struct.unpack(">II", b[16:24])] for b in imgs]
print("IMAGES " + json.dumps(out))
`;

function runScript(py, file, timeoutMs) {
  return new Promise((resolve) => {
    const p = spawn(py, ["-c", RUNNER, file], { stdio: ["ignore", "pipe", "pipe"] });
    let out = "", err = "";
    p.stdout.on("data", (d) => (out += d));
    p.stderr.on("data", (d) => (err += d));
    const t = setTimeout(() => p.kill("SIGKILL"), timeoutMs);
    p.on("exit", (code) => {
      clearTimeout(t);
      const m = out.match(/^IMAGES (.*)$/m);
      resolve({ code, out, err, images: m ? JSON.parse(m[1]) : null });
    });
  });
}

const sources = Object.fromEntries(SCRIPTS.map((s) => [s, scriptSource(s)]));
const py = findPython();
const skip = !fs.existsSync(gen) ? `gen_ckpt not built (${gen})`
  : !py ? "no Python with websocket-client (apt install python3-websocket)"
    : SCRIPTS.some((s) => !sources[s]) ? "ComfyUI's script_examples not found (set LATENTD_COMFYUI_DIR or LATENTD_COMFYUI_GIT)" : false;

let S = null, work = null;

describe("ComfyUI script_examples", { skip }, () => {
  before(async () => {
    work = fs.mkdtempSync(path.join(os.tmpdir(), "latentd-scripts-"));
    S = await L.startLatentd({
      setup(dir) {
        const r = spawnSync(gen, ["--tiny", path.join(dir, "models", "checkpoints", CKPT)], { encoding: "utf8" });
        if (r.status !== 0) throw new Error(`gen_ckpt failed: ${r.stderr}`);
      },
    });
    for (const s of SCRIPTS)
      fs.writeFileSync(path.join(work, s), sources[s].replaceAll("127.0.0.1:8188", `127.0.0.1:${S.port}`));
  });
  after(async () => {
    if (work) fs.rmSync(work, { recursive: true, force: true });
    if (!S) return;
    const r = await S.stop();
    const log = S.log();
    L.removeDir(S.dir);
    assert.deepEqual(r, { code: 0, signal: null }, log.slice(-3000));
  });

  it("basic_api_example.py queues the default workflow, which succeeds", async () => {
    const r = await runScript(py, path.join(work, SCRIPTS[0]), 60000);
    assert.equal(r.code, 0, r.err);
    await L.waitIdle(S, 240000);
    const hist = (await L.request(S, "GET", "/history")).json();
    const jobs = Object.values(hist);
    assert.equal(jobs.length, 1);
    assert.equal(jobs[0].status.status_str, "success", JSON.stringify(jobs[0].status));
    const img = jobs[0].outputs["9"].images[0];
    assert.ok(fs.existsSync(path.join(S.dir, "output", img.subfolder, img.filename)), img.filename);
  });

  it("websockets_api_example.py gets its image through /ws, /history and /view", async () => {
    const r = await runScript(py, path.join(work, SCRIPTS[1]), 240000);
    assert.equal(r.code, 0, r.err);
    assert.ok(r.images && r.images["9"], r.out);
    assert.equal(r.images["9"].length, 1);
    const [bytes, isPng, dims] = r.images["9"][0];
    assert.ok(isPng && bytes > 1000);
    assert.deepEqual(dims, [512, 512]);
  });

  it("websockets_api_example_ws_images.py gets SaveImageWebsocket's PNG frames", async () => {
    const before = fs.readdirSync(path.join(S.dir, "output")).length;
    const r = await runScript(py, path.join(work, SCRIPTS[2]), 240000);
    assert.equal(r.code, 0, r.err);
    const frames = r.images && r.images.save_image_websocket_node;
    assert.ok(frames, r.out);
    assert.equal(frames.length, 1);
    assert.ok(frames[0][1], "a PNG");
    assert.deepEqual(frames[0][2], [512, 512]);
    assert.equal(fs.readdirSync(path.join(S.dir, "output")).length, before, "nothing saved to disk");
  });
});

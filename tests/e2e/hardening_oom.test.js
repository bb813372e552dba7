// e2e (issue 11, item 2): no valid prompt can end the process, and nothing crash-loops.
//   - EmptyLatentImage 16384x16384 batch 4096 (256 GiB of latent) -> VAEDecode -> SaveImage
//     is an execution_error in ComfyUI's out-of-memory shape (torch.OutOfMemoryError, the
//     size asked for) and the server keeps answering; three queued copies all fail the same
//     way and a small txt2img prompt after them succeeds;
//   - a latent that fits but whose decoded image and activations do not fails at VAEDecode,
//     and a huge EmptyImage fails the same way;
//   - a job running at two kill -9s in a row is queued again once, then reported failed with
//     the reason at the next start instead of being run a third time.
// The tiny random-weight checkpoint comes from gen_ckpt (LATENTD_GEN_CKPT). Under ASan the
// server gets allocator_may_return_null=1, so that a huge malloc behaves as in a release
// build (NULL, not an abort); the sizes here are refused before any malloc anyway.
"use strict";
const { describe, it, before, after } = require("node:test");
const assert = require("node:assert/strict");
const fs = require("fs");
const path = require("path");
const { spawnSync } = require("child_process");
const L = require("./lib/latentd.js");

const gen = process.env.LATENTD_GEN_CKPT || path.join(path.dirname(L.latentdBin()), "gen_ckpt");
const DEFAULT_WORKFLOW = path.join(L.SOURCE, "tests", "fixtures", "default_workflow_api.json");
const asanEnv = { ASAN_OPTIONS: [process.env.ASAN_OPTIONS, "allocator_may_return_null=1"].filter(Boolean).join(":") };

function setup(dir) {
  const out = path.join(dir, "models", "checkpoints", "tiny.safetensors");
  const r = spawnSync(gen, ["--tiny", out], { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`gen_ckpt failed: ${r.stderr}`);
}

function hugeDecode(w, h, batch, prefix = "huge") {
  return {
    4: { class_type: "CheckpointLoaderSimple", inputs: { ckpt_name: "tiny.safetensors" } },
    5: { class_type: "EmptyLatentImage", inputs: { width: w, height: h, batch_size: batch } },
    8: { class_type: "VAEDecode", inputs: { samples: ["5", 0], vae: ["4", 2] } },
    9: { class_type: "SaveImage", inputs: { images: ["8", 0], filename_prefix: prefix } },
  };
}

// The default workflow on the tiny checkpoint at 64x64.
function txt2img({ steps = 2, seed = 1, prefix = "small" } = {}) {
  const w = JSON.parse(fs.readFileSync(DEFAULT_WORKFLOW, "utf8"));
  w["3"].inputs.steps = steps;
  w["3"].inputs.seed = seed;
  w["4"].inputs.ckpt_name = "tiny.safetensors";
  w["5"].inputs.width = 64;
  w["5"].inputs.height = 64;
  w["9"].inputs.filename_prefix = prefix;
  return w;
}

async function history(srv, pid) {
  return (await L.request(srv, "GET", `/history/${pid}`)).json()[pid];
}

async function finished(srv, pid, timeoutMs = 60000) {
  return L.waitFor(() => history(srv, pid), { timeoutMs });
}

function executionError(entry) {
  const m = entry.status.messages.find((x) => x[0] === "execution_error");
  assert.ok(m, `an execution_error in ${JSON.stringify(entry.status)}`);
  return m[1];
}

// ComfyUI's OOM shape: torch.OutOfMemoryError, "Allocation on device ... tried to allocate X".
function assertOom(entry, nodeId, nodeType, size) {
  assert.equal(entry.status.status_str, "error");
  assert.equal(entry.status.completed, false);
  const e = executionError(entry);
  assert.equal(e.node_id, nodeId);
  assert.equal(e.node_type, nodeType);
  assert.equal(e.exception_type, "torch.OutOfMemoryError");
  assert.match(e.exception_message, /^Allocation on device \S+ .*tried to allocate \d+\.\d\d GiB \(\d+ bytes\)/);
  if (size) assert.match(e.exception_message, size);
  assert.match(e.exception_message, /\n$/);
  assert.deepEqual(entry.outputs, {});
}

function memAvailableGiB() {
  try {
    const m = /MemAvailable:\s+(\d+) kB/.exec(fs.readFileSync("/proc/meminfo", "utf8"));
    return m ? Number(m[1]) / (1 << 20) : Infinity;
  } catch { return Infinity; }
}

describe("request-sized allocations", { skip: !fs.existsSync(gen) && "gen_ckpt not built" }, () => {
  let srv;
  before(async () => { srv = await L.startLatentd({ setup, env: asanEnv }); });
  after(async () => {
    if (!srv) return;
    const r = await srv.stop();
    const log = srv.log();
    L.removeDir(srv.dir);
    assert.equal(r.signal, null, `latentd exited on ${r.signal}`);
    assert.equal(r.code, 0, log.slice(-4000));
    assert.doesNotMatch(log, /runtime error:|AddressSanitizer|PANIC/, "no sanitizer report or panic");
  });

  it("EmptyLatentImage 16384x16384 batch 4096 is an OOM execution_error, not an abort", async () => {
    const r = await L.postPrompt(srv, hugeDecode(16384, 16384, 4096));
    assert.equal(r.status, 200, "valid per validation: the limits are ComfyUI's");
    assertOom(await finished(srv, r.json.prompt_id), "5", "EmptyLatentImage", /tried to allocate 256\.00 GiB \(274877906944 bytes\)/);
    assert.equal((await L.request(srv, "GET", "/system_stats")).status, 200, "still answering");
    assert.equal(srv.exitSignal, null);
  });

  it("three queued copies fail the same way and a small prompt after them succeeds", async () => {
    const ids = [];
    for (let i = 0; i < 3; i++) ids.push((await L.postPrompt(srv, hugeDecode(16384, 16384, 4096, `copy${i}`))).json.prompt_id);
    const small = await L.postPrompt(srv, txt2img());
    assert.equal(small.status, 200, small.text);
    for (const id of ids) assertOom(await finished(srv, id), "5", "EmptyLatentImage");
    const ok = await finished(srv, small.json.prompt_id);
    assert.equal(ok.status.status_str, "success", JSON.stringify(ok.status));
    assert.equal(ok.outputs["9"].images.length, 1);
    assert.ok(fs.existsSync(path.join(srv.dir, "output", ok.outputs["9"].images[0].filename)));
  });

  it("a latent that fits but decodes to too much fails at VAEDecode", async (t) => {
    // 64 MiB of latent, 3 GiB of image and the VAE's activations at 16384x16384.
    if (memAvailableGiB() > 256) return t.skip("this host could decode it");
    const r = await L.postPrompt(srv, hugeDecode(16384, 16384, 1));
    assertOom(await finished(srv, r.json.prompt_id), "8", "VAEDecode");
  });

  it("a huge EmptyImage is an OOM execution_error too", async () => {
    const p = {
      1: { class_type: "EmptyImage", inputs: { width: 16384, height: 16384, batch_size: 4096, color: 0 } },
      2: { class_type: "SaveImage", inputs: { images: ["1", 0], filename_prefix: "empty" } },
    };
    const r = await L.postPrompt(srv, p);
    assert.equal(r.status, 200, r.text);
    assertOom(await finished(srv, r.json.prompt_id), "1", "EmptyImage", /tried to allocate 12288\.00 GiB/);
  });
});

describe("crash loop", { skip: !fs.existsSync(gen) && "gen_ckpt not built" }, () => {
  it("a job running at two kill -9s is reported failed at the next start, not run a third time", async () => {
    let srv = await L.startLatentd({ setup, env: asanEnv });
    const dir = srv.dir;
    try {
      // Long enough to be running at both kills: 10000 sampler steps on the tiny model.
      const slow = await L.postPrompt(srv, txt2img({ steps: 10000, prefix: "slow" }), { prompt_id: "slow", client_id: "crash" });
      assert.equal(slow.status, 200, slow.text);
      const after = await L.postPrompt(srv, txt2img({ seed: 2, prefix: "after" }), { prompt_id: "after" });
      assert.equal(after.status, 200, after.text);
      for (let kill = 1; kill <= 2; kill++) {
        // Sampling progress means the start was counted (it is committed before the run).
        const ws = await L.openWs(srv, { clientId: "crash" });
        await ws.waitFor((m) => m.type === "progress" && m.data.prompt_id === "slow" && m.data.node === "3", 60000);
        await srv.kill9();
        assert.equal(srv.exitSignal, "SIGKILL");
        srv = await L.startLatentd({ baseDir: dir, env: asanEnv });
        if (kill === 1) {
          // Queued again, in its place ahead of the job behind it.
          const q = (await L.request(srv, "GET", "/queue")).json();
          assert.deepEqual([...q.queue_running, ...q.queue_pending].map((i) => i[1]), ["slow", "after"]);
          assert.equal(await history(srv, "slow"), undefined, "not in history after one crash");
        }
      }
      // Third start: not run again, reported failed with the reason; the queue goes on.
      const h = await finished(srv, "slow", 10000);
      assert.equal(h.status.status_str, "error");
      const e = executionError(h);
      assert.equal(e.exception_type, "RuntimeError");
      assert.match(e.exception_message, /stopped while this prompt was running, each of the 2 times it started; it is not run again\n$/);
      const q = (await L.request(srv, "GET", "/queue")).json();
      assert.ok(!q.queue_running.some((i) => i[1] === "slow"), "not running a third time");
      const next = await finished(srv, "after");
      assert.equal(next.status.status_str, "success", JSON.stringify(next.status));
      assert.ok(!fs.readdirSync(path.join(dir, "output")).some((f) => f.startsWith("slow")), "slow never finished");
      const r = await srv.stop();
      assert.equal(r.code, 0);
      assert.doesNotMatch(srv.log(), /runtime error:|AddressSanitizer|PANIC/, "no sanitizer report or panic");
    } finally {
      await srv.stop();
      L.removeDir(dir);
    }
  });
});

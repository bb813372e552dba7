// e2e: model files that change under a running server (issue 11, item 3 and the paths item).
// A tiny gen_ckpt checkpoint (f32, so the CPU computes straight from the mapped file) is
// loaded, then changed on disk the way people do it:
//   - overwritten in place while idle (same inode: `cp new old`), once with a same-size
//     file of other weights and once with a smaller file: the next prompt runs with the
//     NEW weights (pixels equal to what the new file gives under its own name) and the
//     server lives (before: the cached model kept reading the rewritten mapping, and the
//     smaller file killed the server with SIGBUS);
//   - truncated in place during sampling: that prompt ends in execution_error (or, where
//     the weights were already copied, a correct finish), the server lives, and once the
//     file is restored the same prompt gives the original pixels;
//   - error messages for a broken model file name it relative to its models folder, never
//     with the server's absolute base path.
// Skips when gen_ckpt or the SD1.5 nodes are not built.
"use strict";
const { describe, it, before, after } = require("node:test");
const assert = require("node:assert/strict");
const fs = require("fs");
const os = require("os");
const path = require("path");
const { spawnSync } = require("child_process");
const L = require("./lib/latentd.js");

const gen = process.env.LATENTD_GEN_CKPT || path.join(path.dirname(L.latentdBin()), "gen_ckpt");
const DEFAULT_WORKFLOW = path.join(L.SOURCE, "tests", "fixtures", "default_workflow_api.json");
const SEED = 156680208700286;

function workflow({ seed = SEED, steps = 3, size = 64, ckpt = "m.safetensors" } = {}) {
  const w = JSON.parse(fs.readFileSync(DEFAULT_WORKFLOW, "utf8"));
  w["3"].inputs.seed = seed;
  w["3"].inputs.steps = steps;
  w["4"].inputs.ckpt_name = ckpt;
  w["5"].inputs.width = size;
  w["5"].inputs.height = size;
  return w;
}

function genCkpt(out, ...extra) {
  const r = spawnSync(gen, [...extra, out], { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`gen_ckpt ${extra.join(" ")} failed: ${r.stderr}`);
}

const isDone = (pid) => (m) => m.type === "executing" && m.data && m.data.node === null && m.data.prompt_id === pid;

// POSTs `prompt` and resolves with this client's messages for it, up to executing{null}.
// `during(pid, from)` runs once the prompt is queued (to act while it runs).
async function run(srv, c, prompt, during) {
  const from = c.ws.messages.length;
  const r = await L.postPrompt(srv, prompt, { client_id: c.id });
  assert.equal(r.status, 200, r.text);
  const pid = r.json.prompt_id;
  if (during) await during(pid, from);
  await c.ws.waitFor(isDone(pid), 120000, from);
  const msgs = c.ws.messages.slice(from).filter((m) => !m.binary && m.data && m.data.prompt_id === pid);
  const out = msgs.find((m) => m.type === "executed");
  const err = msgs.find((m) => m.type === "execution_error");
  return { pid, msgs, err: err && err.data, image: out && out.data.output.images[0].filename };
}

function pixels(srv, name) {
  return L.decodePng(fs.readFileSync(path.join(srv.dir, "output", name))).pixels;
}

// Write `bytes` into the existing file: same inode, as `cp` does (O_TRUNC, then write).
function overwriteInPlace(file, bytes) {
  const ino = fs.statSync(file).ino;
  fs.writeFileSync(file, bytes);
  assert.equal(fs.statSync(file).ino, ino, "rewritten in place, not replaced");
}

describe("model files changing under a running server", () => {
  let S = null, c = null, skip = null, tmp = null;
  const bytes = {}; // name -> Buffer: orig (seed 42), seed7 (same size), small (--small)
  let mPath = null;
  const ref = {}; // name -> pixels of SEED on that content under its own name

  before(async () => {
    if (!fs.existsSync(gen)) { skip = `no ${gen}`; return; }
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), "latentd-hm-"));
    genCkpt(path.join(tmp, "orig.safetensors"), "--tiny");
    genCkpt(path.join(tmp, "seed7.safetensors"), "--tiny", "--seed", "7");
    genCkpt(path.join(tmp, "small.safetensors"), "--small", "--seed", "9");
    for (const n of ["orig", "seed7", "small"]) bytes[n] = fs.readFileSync(path.join(tmp, `${n}.safetensors`));
    assert.equal(bytes.seed7.length, bytes.orig.length);
    assert.ok(bytes.small.length < bytes.orig.length / 2, "the small file is much smaller");
    S = await L.startLatentd({
      setup: (dir) => {
        const ck = path.join(dir, "models", "checkpoints");
        for (const n of ["orig", "seed7", "small"]) fs.writeFileSync(path.join(ck, `ref_${n}.safetensors`), bytes[n]);
        fs.writeFileSync(path.join(ck, "m.safetensors"), bytes.orig);
        genCkpt(path.join(ck, "broken.safetensors"), "--tiny", "--truncate", "1000000");
        fs.mkdirSync(path.join(dir, "models", "vae"), { recursive: true });
        fs.writeFileSync(path.join(dir, "models", "vae", "notvae.safetensors"), bytes.orig.subarray(0, 4096));
      },
    });
    mPath = path.join(S.dir, "models", "checkpoints", "m.safetensors");
    const info = (await L.request(S, "GET", "/object_info")).json();
    if (!info.CheckpointLoaderSimple || !info.KSampler) { skip = "SD1.5 nodes not registered"; return; }
    c = { id: "hm", ws: await L.openWs(S, { clientId: "hm" }) };
  });

  after(async () => {
    if (c) await c.ws.close();
    if (tmp) L.removeDir(tmp);
    if (!S) return;
    const r = await S.stop();
    const log = S.log();
    L.removeDir(S.dir);
    assert.deepEqual(r, { code: 0, signal: null }, log.slice(-3000));
    assert.ok(!/AddressSanitizer|LeakSanitizer|runtime error:/.test(log), log.slice(-6000));
  });

  async function alive() {
    assert.equal(S.exitSignal, null, `server died: ${S.log().slice(-2000)}`);
    assert.equal((await L.request(S, "GET", "/system_stats")).status, 200);
  }

  it("reference images: each file under its own name", async (t) => {
    if (skip) { t.skip(skip); return; }
    for (const [n, seed] of [["orig", SEED], ["seed7", SEED], ["small", SEED + 1]]) {
      const r = await run(S, c, workflow({ ckpt: `ref_${n}.safetensors`, seed }));
      assert.equal(r.err, undefined, JSON.stringify(r.err));
      ref[n] = pixels(S, r.image);
    }
    assert.ok(!ref.orig.equals(ref.seed7), "other weights give other pixels");
  });

  it("a checkpoint overwritten in place while idle is reloaded: the next prompt uses the new weights", async (t) => {
    if (skip || !ref.orig) { t.skip(skip || "no references"); return; }
    const r0 = await run(S, c, workflow());
    assert.equal(r0.err, undefined, JSON.stringify(r0.err));
    assert.ok(pixels(S, r0.image).equals(ref.orig), "m.safetensors holds the seed-42 weights");

    // Same size, other weights; the identical prompt must not come from the cache.
    overwriteInPlace(mPath, bytes.seed7);
    const r1 = await run(S, c, workflow());
    assert.equal(r1.err, undefined, JSON.stringify(r1.err));
    assert.ok(r1.msgs.some((m) => m.type === "executing" && m.data.node === "4"), "the loader ran again");
    assert.ok(pixels(S, r1.image).equals(ref.seed7), "the image is the new file's");
    await alive();

    // A smaller file (other widths): the old mapping now ends early.
    overwriteInPlace(mPath, bytes.small);
    const r2 = await run(S, c, workflow({ seed: SEED + 1 }));
    assert.equal(r2.err, undefined, JSON.stringify(r2.err));
    assert.ok(pixels(S, r2.image).equals(ref.small), "the image is the small file's");
    await alive();
  });

  it("a checkpoint truncated in place mid-run fails that prompt, not the server; restored, it runs again", async (t) => {
    if (skip || !ref.orig) { t.skip(skip || "no references"); return; }
    overwriteInPlace(mPath, bytes.orig);
    const slow = workflow({ seed: SEED + 2, steps: 60, size: 128 });
    const r = await run(S, c, slow, async (pid, from) => {
      await c.ws.waitFor((m) => m.type === "progress" && m.data.prompt_id === pid && m.data.value >= 2, 60000, from);
      fs.truncateSync(mPath, 64 * 1024);
    });
    const types = r.msgs.map((m) => m.type);
    assert.ok(!r.msgs.some((m) => m.type === "progress" && m.data.value === 60) || types.includes("execution_success"),
      "the run stopped early or finished correctly");
    if (r.err) {
      assert.equal(r.err.node_type, "KSampler", JSON.stringify(r.err));
      assert.match(r.err.exception_message, /checkpoints\/m\.safetensors/);
      assert.ok(!r.err.exception_message.includes(S.dir), r.err.exception_message);
    } else {
      assert.ok(types.includes("execution_success"), types.join(" "));
    }
    await alive();

    // Restored (same inode, same bytes as at first): the next prompt reloads and matches.
    overwriteInPlace(mPath, bytes.orig);
    const ok = await run(S, c, workflow());
    assert.equal(ok.err, undefined, JSON.stringify(ok.err));
    assert.ok(pixels(S, ok.image).equals(ref.orig), "the restored file gives the original pixels");
    await alive();
  });

  it("load errors name the model file relative to its folder, not by the server's path", async (t) => {
    if (skip) { t.skip(skip); return; }
    const r = await run(S, c, workflow({ ckpt: "broken.safetensors" }));
    assert.ok(r.err, "a truncated checkpoint fails");
    assert.equal(r.err.node_type, "CheckpointLoaderSimple");
    assert.match(r.err.exception_message, /'checkpoints\/broken\.safetensors'/);
    assert.ok(!r.err.exception_message.includes(S.dir), r.err.exception_message);

    const w = workflow();
    w["10"] = { class_type: "VAELoader", inputs: { vae_name: "notvae.safetensors" } };
    w["8"].inputs.vae = ["10", 0];
    const v = await run(S, c, w);
    assert.ok(v.err, "a VAE file that is no VAE fails");
    assert.equal(v.err.node_type, "VAELoader");
    assert.match(v.err.exception_message, /vae\/notvae\.safetensors/);
    assert.ok(!v.err.exception_message.includes(S.dir), v.err.exception_message);
    const h = (await L.request(S, "GET", `/history/${v.pid}`)).json()[v.pid];
    assert.ok(!JSON.stringify(h.status).includes(S.dir), "history messages carry no server path");
    await alive();
  });
});

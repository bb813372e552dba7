// e2e: bf16 compute (issue 15). The same tiny txt2img (ComfyUI's default workflow at 64x64,
// 3 steps, a tiny f16 random checkpoint from gen_ckpt) on a server started with
// --bf16-unet --bf16-vae and on a default (fp32) one:
//   - the bf16 server says so at start (compute precision, the bf16 GEMM path) and when it
//     loads the UNet and VAE ("bf16 compute"), the text encoder stays fp32;
//   - both runs succeed and save a 64x64 PNG; the bf16 image differs from the fp32 one
//     (bf16 really ran) and is close to it: PSNR >= 30 dB on the 8-bit pixels (the unit
//     test test_models_bf16 holds the float images to >= 35 dB);
//   - a second bf16 run of a new seed works off the cached bf16 weights.
"use strict";
const { describe, it, before, after } = require("node:test");
const assert = require("node:assert/strict");
const fs = require("fs");
const path = require("path");
const { spawnSync } = require("child_process");
const L = require("./lib/latentd.js");

const gen = process.env.LATENTD_GEN_CKPT || path.join(path.dirname(L.latentdBin()), "gen_ckpt");
const DEFAULT_WORKFLOW = path.join(L.SOURCE, "tests", "fixtures", "default_workflow_api.json");

function workflow(seed) {
  const w = JSON.parse(fs.readFileSync(DEFAULT_WORKFLOW, "utf8"));
  w["3"].inputs.seed = seed;
  w["3"].inputs.steps = 3;
  w["4"].inputs.ckpt_name = "tiny.safetensors";
  w["5"].inputs.width = 64;
  w["5"].inputs.height = 64;
  return w;
}

async function txt2img(srv, seed) {
  const r = await L.postPrompt(srv, workflow(seed));
  assert.equal(r.status, 200, r.text);
  const pid = r.json.prompt_id;
  let h = null;
  await L.waitFor(async () => {
    const j = (await L.request(srv, "GET", `/history/${pid}`)).json();
    h = j[pid];
    return h && h.status && h.status.completed !== undefined && (h.status.completed || h.status.status_str === "error");
  }, { timeoutMs: 60000 });
  assert.equal(h.status.status_str, "success", JSON.stringify(h.status));
  const img = h.outputs["9"].images[0];
  return L.decodePng(fs.readFileSync(path.join(srv.dir, "output", img.subfolder || "", img.filename)));
}

function psnr(a, b) {
  let mse = 0;
  for (let i = 0; i < a.length; i++) mse += (a[i] - b[i]) ** 2;
  mse /= a.length;
  return mse === 0 ? Infinity : 10 * Math.log10((255 * 255) / mse);
}

describe("--bf16-unet --bf16-vae", () => {
  let f32, b16;
  const setup = (dir) => {
    const r = spawnSync(gen, ["--tiny", "--dtype", "f16", path.join(dir, "models", "checkpoints", "tiny.safetensors")], { encoding: "utf8" });
    if (r.status !== 0) throw new Error(`gen_ckpt failed: ${r.stderr}`);
  };
  before(async () => {
    [f32, b16] = await Promise.all([
      L.startLatentd({ setup }),
      L.startLatentd({ args: ["--bf16-unet", "--bf16-vae", "--verbose", "INFO"], setup }),
    ]);
  });
  after(async () => {
    for (const s of [f32, b16]) if (s) { await s.stop(); L.removeDir(s.dir); }
  });

  it("runs a tiny txt2img in bf16, close to fp32", async () => {
    const a = await txt2img(f32, 42);
    const b = await txt2img(b16, 42);
    assert.equal(b.width, 64);
    assert.equal(b.height, 64);
    assert.equal(a.pixels.length, b.pixels.length);
    assert.ok(!a.pixels.equals(b.pixels), "the bf16 image differs from the fp32 one");
    const p = psnr(a.pixels, b.pixels);
    console.log(`# 64x64 8-bit PSNR bf16 vs fp32: ${p.toFixed(1)} dB`);
    assert.ok(p >= 30, `PSNR ${p.toFixed(1)} dB`);
    const log = b16.log();
    assert.match(log, /compute precision: unet bf16, vae bf16, text encoder fp32; bf16 GEMM: /);
    assert.match(log, /loaded completely 'unet': .* bf16 compute/);
    assert.match(log, /loaded completely 'vae': .* bf16 compute/);
    assert.match(log, /loaded completely 'clip': .* fp32 compute/);
    assert.doesNotMatch(f32.log(), /bf16 compute/);
    const c = await txt2img(b16, 43);
    assert.ok(!c.pixels.equals(b.pixels), "a new seed gives a new image");
  });
});

// e2e: VAELoader through the real server (comfy-api.md §7.3). models/vae holds a standalone
// VAE generated with seed 7 (gen_ckpt --vae-only, bare LDM keys) and a UNet-only file; the
// checkpoints are the tiny seed-42 one and a seed-7 one.
//   - /object_info/VAELoader lists models/vae then pixel_space, output VAE, category loaders;
//   - the default workflow decoding with VAELoader's VAE saves exactly the pixels of the same
//     workflow decoding with the seed-7 checkpoint's VAE, and other pixels than with the
//     seed-42 checkpoint's own VAE;
//   - a UNet file as vae_name fails node 10 with execution_error saying it is not a VAE;
//     a name not in models/vae is value_not_in_list.
// Skips when gen_ckpt or the SD1.5 nodes are not built.
"use strict";
const { describe, it, before, after } = require("node:test");
const assert = require("node:assert/strict");
const fs = require("fs");
const path = require("path");
const { spawnSync } = require("child_process");
const L = require("./lib/latentd.js");

const gen = process.env.LATENTD_GEN_CKPT || path.join(path.dirname(L.latentdBin()), "gen_ckpt");

function genCkpt(out, ...extra) {
  const r = spawnSync(gen, ["--tiny", ...extra, out], { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`gen_ckpt ${extra.join(" ")} failed: ${r.stderr}`);
}

// The default txt2img graph at 64x64, 3 steps; node 8 decodes with `vae` (a link).
function workflow(prefix, vae, extra = {}) {
  const n = (class_type, inputs) => ({ inputs, class_type });
  return {
    3: n("KSampler", { seed: 5, steps: 3, cfg: 8, sampler_name: "euler", scheduler: "normal", denoise: 1,
      model: ["4", 0], positive: ["6", 0], negative: ["7", 0], latent_image: ["5", 0] }),
    4: n("CheckpointLoaderSimple", { ckpt_name: "tiny.safetensors" }),
    5: n("EmptyLatentImage", { width: 64, height: 64, batch_size: 1 }),
    6: n("CLIPTextEncode", { text: "a glass bottle", clip: ["4", 1] }),
    7: n("CLIPTextEncode", { text: "text, watermark", clip: ["4", 1] }),
    8: n("VAEDecode", { samples: ["3", 0], vae }),
    9: n("SaveImage", { filename_prefix: prefix, images: ["8", 0] }),
    ...extra,
  };
}

async function runToEnd(srv, prompt) {
  const r = await L.postPrompt(srv, prompt);
  assert.equal(r.status, 200, r.text);
  const pid = r.json.prompt_id;
  return L.waitFor(async () => {
    const h = (await L.request(srv, "GET", `/history/${pid}`)).json()[pid];
    return h && h.status && h.status.completed !== undefined && h.status.status_str ? h : null;
  }, { timeoutMs: 60000 });
}

function savedPixels(srv, h) {
  const img = h.outputs["9"].images[0];
  return L.decodePng(fs.readFileSync(path.join(srv.dir, "output", img.subfolder, img.filename))).pixels;
}

describe("VAELoader end to end", () => {
  let S = null, skip = null;

  before(async () => {
    if (!fs.existsSync(gen)) { skip = `no ${gen}`; return; }
    S = await L.startLatentd({
      setup: (dir) => {
        const ck = path.join(dir, "models", "checkpoints"), vae = path.join(dir, "models", "vae");
        fs.mkdirSync(vae, { recursive: true });
        genCkpt(path.join(ck, "tiny.safetensors"));
        genCkpt(path.join(ck, "seed7.safetensors"), "--seed", "7", "--dtype", "f16"); // same rounding as the VAE file
        genCkpt(path.join(vae, "mine.safetensors"), "--vae-only", "--seed", "7", "--dtype", "f16");
        genCkpt(path.join(vae, "unet.safetensors"), "--no-vae", "--no-clip", "--dtype", "f16");
      },
    });
    const info = (await L.request(S, "GET", "/object_info")).json();
    if (!info.VAELoader || !info.VAEDecode) skip = "SD1.5 nodes not registered";
  });

  after(async () => {
    if (!S) return;
    const r = await S.stop();
    const log = S.log();
    L.removeDir(S.dir);
    assert.deepEqual(r, { code: 0, signal: null }, log.slice(-3000));
  });

  it("/object_info lists models/vae then pixel_space", async (t) => {
    if (skip) { t.skip(skip); return; }
    const v = (await L.request(S, "GET", "/object_info/VAELoader")).json().VAELoader;
    assert.deepEqual(v.input.required.vae_name[0], ["mine.safetensors", "unet.safetensors", "pixel_space"]);
    assert.deepEqual(v.output, ["VAE"]);
    assert.equal(v.category, "loaders");
    assert.equal(v.display_name, "Load VAE");
  });

  it("decodes with the file's weights: the seed-7 checkpoint's pixels, not the seed-42 one's", async (t) => {
    if (skip) { t.skip(skip); return; }
    const a = await runToEnd(S, workflow("vae_file", ["10", 0], { 10: { class_type: "VAELoader", inputs: { vae_name: "mine.safetensors" } } }));
    assert.equal(a.status.status_str, "success", JSON.stringify(a.status));
    const b = await runToEnd(S, workflow("ckpt7", ["11", 2], { 11: { class_type: "CheckpointLoaderSimple", inputs: { ckpt_name: "seed7.safetensors" } } }));
    assert.equal(b.status.status_str, "success", JSON.stringify(b.status));
    const c = await runToEnd(S, workflow("own", ["4", 2]));
    assert.equal(c.status.status_str, "success", JSON.stringify(c.status));
    const pa = savedPixels(S, a), pb = savedPixels(S, b), pc = savedPixels(S, c);
    assert.equal(pa.length, 64 * 64 * 3);
    assert.ok(pa.equals(pb), "VAELoader's VAE decodes exactly as the seed-7 checkpoint's");
    assert.ok(!pa.equals(pc), "and unlike the seed-42 checkpoint's own VAE");
  });

  it("a UNet file fails node 10 naming it; an unknown name is value_not_in_list", async (t) => {
    if (skip) { t.skip(skip); return; }
    const h = await runToEnd(S, workflow("bad", ["10", 0], { 10: { class_type: "VAELoader", inputs: { vae_name: "unet.safetensors" } } }));
    assert.equal(h.status.status_str, "error");
    const [type, data] = h.status.messages.at(-1);
    assert.equal(type, "execution_error");
    assert.equal(data.node_id, "10");
    assert.equal(data.node_type, "VAELoader");
    assert.match(data.exception_message, /unet\.safetensors' is not a VAE: it holds a UNet/);
    const r = await L.postPrompt(S, workflow("x", ["10", 0], { 10: { class_type: "VAELoader", inputs: { vae_name: "nope.safetensors" } } }));
    assert.equal(r.status, 400, r.text);
    const e10 = r.json.node_errors["10"];
    assert.equal(e10.errors[0].type, "value_not_in_list");
    assert.equal(e10.errors[0].details, "vae_name: 'nope.safetensors' not in ['mine.safetensors', 'unet.safetensors', 'pixel_space']");
  });
});

// e2e: the upscale model nodes (comfy_extras.nodes_upscale_model) through the real server.
// models/upscale_models holds a tiny random ESRGAN x4 (gen_upscale, old key naming), a tiny
// SRVGGNetCompact x2 and a copy of the tiny SD checkpoint.
//   - /object_info for UpscaleModelLoader and ImageUpscaleWithModel equals the fixture built
//     from ComfyUI's source, with the folder's listing as the combo;
//   - a hires-fix workflow: txt2img 64x64 -> VAEDecode -> ImageUpscaleWithModel (x4, 256) ->
//     ImageScaleBy 0.5 (128) -> VAEEncode -> KSampler denoise 0.5 -> VAEDecode -> SaveImage
//     saves a 128x128 PNG, the upscale node reports its tile as progress; the SRVGG x2 model
//     in the same graph gives a 128x128 image too (PreviewImage);
//   - the checkpoint given as an upscale model fails UpscaleModelLoader with
//     UnsupportedModelError saying it is a checkpoint, and the server keeps serving;
//   - on a simulated device too small for a 512 tile, ImageUpscaleWithModel halves the tile
//     (logged) and upscales a 600x600 EmptyImage to 1200x1200; with a device too small even
//     for a 128 tile it fails with torch.OutOfMemoryError.
// Skips when the generators are not built.
"use strict";
const { describe, it, before, after } = require("node:test");
const assert = require("node:assert/strict");
const fs = require("fs");
const path = require("path");
const { spawnSync } = require("child_process");
const L = require("./lib/latentd.js");

const binDir = path.dirname(L.latentdBin());
const genCkpt = process.env.LATENTD_GEN_CKPT || path.join(binDir, "gen_ckpt");
const genUps = process.env.LATENTD_GEN_UPSCALE || path.join(binDir, "gen_upscale");
const FIX = path.join(L.SOURCE, "tests", "fixtures", "object_info", "nodes_upscale_model.json");
const MODELS = ["ckpt.safetensors", "srvgg_x2.safetensors", "x4_old.safetensors"];

function gen(bin, args) {
  const r = spawnSync(bin, args, { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`${bin} ${args.join(" ")} failed: ${r.stderr}`);
}

const n = (class_type, inputs) => ({ inputs, class_type });

function hiresFix() {
  return {
    1: n("CheckpointLoaderSimple", { ckpt_name: "tiny.safetensors" }),
    2: n("EmptyLatentImage", { width: 64, height: 64, batch_size: 1 }),
    3: n("CLIPTextEncode", { text: "a lighthouse", clip: ["1", 1] }),
    4: n("CLIPTextEncode", { text: "blurry", clip: ["1", 1] }),
    5: n("KSampler", { seed: 3, steps: 2, cfg: 7, sampler_name: "euler", scheduler: "normal", denoise: 1,
      model: ["1", 0], positive: ["3", 0], negative: ["4", 0], latent_image: ["2", 0] }),
    6: n("VAEDecode", { samples: ["5", 0], vae: ["1", 2] }),
    7: n("UpscaleModelLoader", { model_name: "x4_old.safetensors" }),
    8: n("ImageUpscaleWithModel", { upscale_model: ["7", 0], image: ["6", 0] }),
    9: n("ImageScaleBy", { image: ["8", 0], upscale_method: "bilinear", scale_by: 0.5 }),
    10: n("VAEEncode", { pixels: ["9", 0], vae: ["1", 2] }),
    11: n("KSampler", { seed: 4, steps: 2, cfg: 7, sampler_name: "euler", scheduler: "normal", denoise: 0.5,
      model: ["1", 0], positive: ["3", 0], negative: ["4", 0], latent_image: ["10", 0] }),
    12: n("VAEDecode", { samples: ["11", 0], vae: ["1", 2] }),
    13: n("SaveImage", { filename_prefix: "hires", images: ["12", 0] }),
    14: n("UpscaleModelLoader", { model_name: "srvgg_x2.safetensors" }),
    15: n("ImageUpscaleWithModel", { upscale_model: ["14", 0], image: ["6", 0] }),
    16: n("PreviewImage", { images: ["15", 0] }),
  };
}

async function run(S, prompt, id) {
  const c = await L.openWs(S, { clientId: id });
  try {
    const r = await L.postPrompt(S, prompt, { client_id: id, prompt_id: id });
    assert.equal(r.status, 200, r.text);
    await c.waitFor((m) => m.type === "executing" && m.data.node === null && m.data.prompt_id === id, 120000);
    return c.messages;
  } finally {
    await c.close();
  }
}

describe("upscale models end to end", () => {
  let S = null, skip = null;

  before(async () => {
    if (!fs.existsSync(genCkpt) || !fs.existsSync(genUps)) { skip = "generators not built"; return; }
    S = await L.startLatentd({
      setup: (dir) => {
        const ups = path.join(dir, "models", "upscale_models");
        fs.mkdirSync(ups, { recursive: true });
        gen(genCkpt, ["--tiny", path.join(dir, "models", "checkpoints", "tiny.safetensors")]);
        fs.copyFileSync(path.join(dir, "models", "checkpoints", "tiny.safetensors"), path.join(ups, "ckpt.safetensors"));
        gen(genUps, ["--arch", "esrgan-old", "--scale", "4", path.join(ups, "x4_old.safetensors")]);
        gen(genUps, ["--arch", "srvgg", "--scale", "2", "--dtype", "f16", path.join(ups, "srvgg_x2.safetensors")]);
      },
    });
    const info = (await L.request(S, "GET", "/object_info")).json();
    if (!info.CheckpointLoaderSimple) skip = "SD1.5 nodes not registered";
  });

  after(async () => {
    if (!S) return;
    const r = await S.stop();
    const log = S.log();
    L.removeDir(S.dir);
    assert.deepEqual(r, { code: 0, signal: null }, log.slice(-3000));
  });

  it("/object_info equals ComfyUI's entries", async (t) => {
    if (skip) return t.skip(skip);
    const info = (await L.request(S, "GET", "/object_info")).json();
    const want = JSON.parse(fs.readFileSync(FIX, "utf8"));
    want.UpscaleModelLoader.input.required.model_name[1].options = MODELS; // "$UPSCALE_MODELS"
    for (const c of ["UpscaleModelLoader", "ImageUpscaleWithModel"]) assert.deepEqual(info[c], want[c], c);
  });

  it("hires fix: txt2img, model upscale x4, scale down, img2img at denoise 0.5", async (t) => {
    if (skip) return t.skip(skip);
    const msgs = await run(S, hiresFix(), "hires-1");
    const errs = msgs.filter((m) => m.type === "execution_error");
    assert.equal(errs.length, 0, JSON.stringify(errs));
    const prog = msgs.filter((m) => m.type === "progress" && m.data.node === "8");
    assert.ok(prog.length >= 1 && prog[prog.length - 1].data.value === 1 && prog[prog.length - 1].data.max === 1,
      JSON.stringify(prog));
    const h = (await L.request(S, "GET", "/history/hires-1")).json()["hires-1"];
    const img = h.outputs["13"].images[0];
    const png = L.decodePng(fs.readFileSync(path.join(S.dir, "output", img.subfolder, img.filename)));
    assert.equal(png.width, 128);
    assert.equal(png.height, 128);
    const prev = h.outputs["16"].images[0];
    const p2 = L.decodePng(fs.readFileSync(path.join(S.dir, "temp", prev.subfolder, prev.filename)));
    assert.equal(p2.width, 128);
    assert.equal(p2.height, 128);
  });

  it("a checkpoint as upscale model: a clear node error, server up", async (t) => {
    if (skip) return t.skip(skip);
    const p = hiresFix();
    p[7].inputs.model_name = "ckpt.safetensors";
    const msgs = await run(S, p, "bad-ups");
    const err = msgs.find((m) => m.type === "execution_error");
    assert.ok(err, "execution_error");
    assert.equal(err.data.node_type, "UpscaleModelLoader");
    assert.equal(err.data.exception_type, "UnsupportedModelError");
    assert.match(err.data.exception_message, /unsupported upscale model .*ckpt\.safetensors.*Stable Diffusion checkpoint/);
    assert.equal((await L.request(S, "GET", "/system_stats")).status, 200);
  });
});

// An SRVGG x2 (nf 8, 2 convs) plans 140 bytes per tile pixel plus the whole input on the
// device (600x600x3 f32, 4.1 MiB): tile 512 ~41 MiB, 256 ~14 MiB, 128 ~7 MiB.
describe("upscale models: tile halving on a small device", () => {
  const runs = [["sim:24M", "halves to 256"], ["sim:5M", "fails below 128"]];
  for (const [dev, what] of runs) {
    it(`${dev}: ${what}`, async (t) => {
      if (!fs.existsSync(genUps)) return t.skip("generators not built");
      const S = await L.startLatentd({
        args: ["--device", dev],
        setup: (dir) => {
          const ups = path.join(dir, "models", "upscale_models");
          fs.mkdirSync(ups, { recursive: true });
          gen(genUps, ["--arch", "srvgg", "--scale", "2", path.join(ups, "srvgg_x2.safetensors")]);
        },
      });
      try {
        const msgs = await run(S, {
          1: n("EmptyImage", { width: 600, height: 600, batch_size: 1, color: 0x336699 }),
          2: n("UpscaleModelLoader", { model_name: "srvgg_x2.safetensors" }),
          3: n("ImageUpscaleWithModel", { upscale_model: ["2", 0], image: ["1", 0] }),
          5: n("PreviewImage", { images: ["3", 0] }),
        }, `oom-${dev}`);
        const err = msgs.find((m) => m.type === "execution_error");
        if (dev === "sim:24M") {
          assert.equal(err, undefined, JSON.stringify(err));
          assert.match(S.log(), /upscale: out of memory with tile 512, retrying with tile 256/);
          assert.doesNotMatch(S.log(), /retrying with tile 128/);
          const h = (await L.request(S, "GET", `/history/oom-${dev}`)).json()[`oom-${dev}`];
          const img = h.outputs["5"].images[0];
          const png = L.decodePng(fs.readFileSync(path.join(S.dir, "temp", img.subfolder, img.filename)));
          assert.equal(png.width, 1200);
          assert.equal(png.height, 1200);
        } else {
          assert.ok(err, "execution_error");
          assert.equal(err.data.node_type, "ImageUpscaleWithModel");
          assert.equal(err.data.exception_type, "torch.OutOfMemoryError");
          assert.match(S.log(), /retrying with tile 128/);
        }
        assert.equal((await L.request(S, "GET", "/system_stats")).status, 200);
      } finally {
        const r = await S.stop();
        const log = S.log();
        L.removeDir(S.dir);
        assert.deepEqual(r, { code: 0, signal: null }, log.slice(-3000));
      }
    });
  }
});

// e2e: the attention model patches (issue 14) through the real server on a tiny random
// checkpoint (gen_ckpt --tiny):
//   - SelfAttentionGuidance in ComfyUI's default KSampler graph at 128x128: it runs, the
//     same seed repeats the pixels, and the image differs from the unpatched graph's;
//     stacked over a LoraLoaderModelOnly it runs too;
//   - HyperTile (tile 32, 3 candidates) and PerpNeg (an empty-prompt CLIPTextEncode) in the
//     same graph run and change the image;
//   - bad input: SAG at 64x64 (the tiny UNet's middle block has one token: no blur grid,
//     where ComfyUI's create_blur_map fails too) is an execution_error naming SAG, and the
//     server goes on serving.
// The float64 checks of each patch are test_sd_patches'; /object_info is node_library's.
// Skips when gen_ckpt or the model nodes are not built.
"use strict";
const { describe, it, before, after } = require("node:test");
const assert = require("node:assert/strict");
const fs = require("fs");
const path = require("path");
const { spawnSync } = require("child_process");
const L = require("./lib/latentd.js");

const gen = process.env.LATENTD_GEN_CKPT || path.join(path.dirname(L.latentdBin()), "gen_ckpt");

// The default txt2img graph, 2 steps; `patch` (class, inputs) goes between loader and KSampler.
function workflow(prefix, { seed = 5, size = 128, patch = null, lora = false } = {}) {
  const n = (class_type, inputs) => ({ inputs, class_type });
  const w = {
    3: n("KSampler", { seed, steps: 2, cfg: 7, sampler_name: "euler", scheduler: "normal", denoise: 1,
      model: ["4", 0], positive: ["6", 0], negative: ["7", 0], latent_image: ["5", 0] }),
    4: n("CheckpointLoaderSimple", { ckpt_name: "tiny.safetensors" }),
    5: n("EmptyLatentImage", { width: size, height: size, batch_size: 1 }),
    6: n("CLIPTextEncode", { text: "a lighthouse at dusk", clip: ["4", 1] }),
    7: n("CLIPTextEncode", { text: "blurry", clip: ["4", 1] }),
    8: n("VAEDecode", { samples: ["3", 0], vae: ["4", 2] }),
    9: n("SaveImage", { filename_prefix: prefix, images: ["8", 0] }),
  };
  let model = ["4", 0];
  if (lora) {
    w[11] = n("LoraLoaderModelOnly", { model, lora_name: "l.safetensors", strength_model: 1.0 });
    model = ["11", 0];
  }
  if (patch) {
    w[10] = n(patch[0], { model, ...patch[1] });
    model = ["10", 0];
  }
  w[3].inputs.model = model;
  return w;
}

async function runToEnd(srv, prompt) {
  const r = await L.postPrompt(srv, prompt);
  assert.equal(r.status, 200, r.text);
  const pid = r.json.prompt_id;
  return L.waitFor(async () => {
    const h = (await L.request(srv, "GET", `/history/${pid}`)).json()[pid];
    return h && h.status && h.status.completed !== undefined && h.status.status_str ? h : null;
  }, { timeoutMs: 120000 });
}

function savedPixels(srv, h) {
  const img = h.outputs["9"].images[0];
  return L.decodePng(fs.readFileSync(path.join(srv.dir, "output", img.subfolder, img.filename))).pixels;
}

// A rank-4 LoRA on the tiny UNet's first self-attention query (kohya names).
function writeLora(file) {
  const hdr = {}, parts = [];
  let off = 0;
  const pre = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q";
  for (const [name, shape] of [[`${pre}.lora_up.weight`, [32, 4]], [`${pre}.lora_down.weight`, [4, 32]]]) {
    const b = Buffer.alloc(4 * shape[0] * shape[1]);
    for (let i = 0; i < b.length / 4; i++) b.writeFloatLE(0.3 * Math.sin(0.9 * i + 0.3), 4 * i);
    hdr[name] = { dtype: "F32", shape, data_offsets: [off, off + b.length] };
    parts.push(b);
    off += b.length;
  }
  let json = JSON.stringify(hdr);
  json += " ".repeat((8 - (json.length % 8)) % 8);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(json.length));
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, Buffer.concat([len, Buffer.from(json), ...parts]));
}

describe("attention model patches end to end", () => {
  let S = null, skip = null, plain = null;

  before(async () => {
    if (!fs.existsSync(gen)) { skip = `no ${gen}`; return; }
    S = await L.startLatentd({
      setup: (dir) => {
        const out = path.join(dir, "models", "checkpoints", "tiny.safetensors");
        fs.mkdirSync(path.dirname(out), { recursive: true });
        const r = spawnSync(gen, ["--tiny", out], { encoding: "utf8" });
        if (r.status !== 0) throw new Error(`gen_ckpt failed: ${r.stderr}`);
        writeLora(path.join(dir, "models", "loras", "l.safetensors"));
      },
    });
    const info = (await L.request(S, "GET", "/object_info")).json();
    if (!info.CheckpointLoaderSimple || !info.SelfAttentionGuidance) skip = "model nodes not registered";
  });

  after(async () => {
    if (!S) return;
    const r = await S.stop();
    const log = S.log();
    L.removeDir(S.dir);
    assert.deepEqual(r, { code: 0, signal: null }, log.slice(-3000));
  });

  it("SelfAttentionGuidance in a KSampler graph", async (t) => {
    if (skip) { t.skip(skip); return; }
    const p = await runToEnd(S, workflow("plain"));
    assert.equal(p.status.status_str, "success", JSON.stringify(p.status));
    plain = savedPixels(S, p);
    const sag = ["SelfAttentionGuidance", { scale: 0.5, blur_sigma: 2.0 }];
    const a = await runToEnd(S, workflow("sag_a", { patch: sag }));
    assert.equal(a.status.status_str, "success", JSON.stringify(a.status));
    const b = await runToEnd(S, workflow("sag_b", { patch: sag }));
    const pa = savedPixels(S, a);
    assert.equal(pa.length, 128 * 128 * 3);
    assert.ok(pa.equals(savedPixels(S, b)), "same seed, same pixels");
    assert.ok(!pa.equals(plain), "SAG changes the image");
    const l = await runToEnd(S, workflow("sag_lora", { patch: sag, lora: true }));
    assert.equal(l.status.status_str, "success", JSON.stringify(l.status));
    assert.ok(!savedPixels(S, l).equals(pa), "the LoRA under SAG changes the image");
  });

  it("HyperTile and PerpNeg in a KSampler graph", async (t) => {
    if (skip) { t.skip(skip); return; }
    const ht = await runToEnd(S, workflow("ht", { patch: ["HyperTile",
      { tile_size: 32, swap_size: 3, max_depth: 1, scale_depth: false }] }));
    assert.equal(ht.status.status_str, "success", JSON.stringify(ht.status));
    assert.ok(!savedPixels(S, ht).equals(plain), "HyperTile changes the image");
    const w = workflow("pn", { patch: ["PerpNeg", { empty_conditioning: ["12", 0], neg_scale: 1.0 }] });
    w[12] = { class_type: "CLIPTextEncode", inputs: { text: "", clip: ["4", 1] } };
    const pn = await runToEnd(S, w);
    assert.equal(pn.status.status_str, "success", JSON.stringify(pn.status));
    assert.ok(!savedPixels(S, pn).equals(plain), "PerpNeg changes the image");
  });

  it("SAG without a blur grid is a node error; the server goes on", async (t) => {
    if (skip) { t.skip(skip); return; }
    const h = await runToEnd(S, workflow("sag_small", { size: 64,
      patch: ["SelfAttentionGuidance", { scale: 0.5, blur_sigma: 2.0 }] }));
    assert.equal(h.status.status_str, "error");
    const err = h.status.messages.find((m) => m[0] === "execution_error");
    assert.ok(err && /SelfAttentionGuidance/.test(err[1].exception_message), JSON.stringify(h.status));
    const again = await runToEnd(S, workflow("after", { size: 64 }));
    assert.equal(again.status.status_str, "success", JSON.stringify(again.status));
  });
});

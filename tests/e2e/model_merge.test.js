// e2e: model merging and saving through the real server (comfy_extras.nodes_model_merging).
// models/checkpoints holds two tiny SD1.5 checkpoints (seeds 42 and 7) and a tiny SDXL one.
//   - ModelMergeSimple (ratio 0.3) + CLIPMergeSimple -> CheckpointSave writes
//     output/checkpoints/merged_00001_.safetensors with the prompt and workflow in its
//     __metadata__; CheckpointLoaderSimple then lists and loads the saved file (ComfyUI lists
//     output/checkpoints) and the default txt2img workflow produces an image with it;
//   - ModelMergeSimple of SD1.5 with SDXL fails its node with an execution_error naming both
//     families, a CheckpointSave prefix with ".." is refused without writing outside output/,
//     and the server keeps serving.
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

const n = (class_type, inputs) => ({ inputs, class_type });

async function runToEnd(srv, prompt, extra = {}) {
  const r = await L.postPrompt(srv, prompt, extra);
  assert.equal(r.status, 200, r.text);
  const pid = r.json.prompt_id;
  return L.waitFor(async () => {
    const h = (await L.request(srv, "GET", `/history/${pid}`)).json()[pid];
    return h && h.status && h.status.completed !== undefined && h.status.status_str ? h : null;
  }, { timeoutMs: 90000 });
}

// The safetensors header: 8-byte little-endian length, then JSON.
function stHeader(file) {
  const b = fs.readFileSync(file);
  const len = Number(b.readBigUInt64LE(0));
  return JSON.parse(b.subarray(8, 8 + len).toString("utf8"));
}

describe("model merging and saving end to end", () => {
  let S = null, skip = null;

  before(async () => {
    if (!fs.existsSync(gen)) { skip = `no ${gen}`; return; }
    S = await L.startLatentd({
      setup: (dir) => {
        const ck = path.join(dir, "models", "checkpoints");
        genCkpt(path.join(ck, "a.safetensors"));
        genCkpt(path.join(ck, "b.safetensors"), "--seed", "7");
        genCkpt(path.join(ck, "xl.safetensors"), "--arch", "sdxl");
      },
    });
    const info = (await L.request(S, "GET", "/object_info")).json();
    if (!info.ModelMergeSimple || !info.CheckpointSave) skip = "merge nodes not registered";
  });

  after(async () => {
    if (!S) return;
    const r = await S.stop();
    const log = S.log();
    L.removeDir(S.dir);
    assert.deepEqual(r, { code: 0, signal: null }, log.slice(-3000));
  });

  it("merge -> CheckpointSave -> CheckpointLoaderSimple -> image", async (t) => {
    if (skip) { t.skip(skip); return; }
    const workflow = { nodes: [], links: [], version: 0.4 };
    const h = await runToEnd(S, {
      1: n("CheckpointLoaderSimple", { ckpt_name: "a.safetensors" }),
      2: n("CheckpointLoaderSimple", { ckpt_name: "b.safetensors" }),
      3: n("ModelMergeSimple", { model1: ["1", 0], model2: ["2", 0], ratio: 0.3 }),
      4: n("CLIPMergeSimple", { clip1: ["1", 1], clip2: ["2", 1], ratio: 0.3 }),
      5: n("CheckpointSave", { model: ["3", 0], clip: ["4", 0], vae: ["1", 2], filename_prefix: "checkpoints/merged" }),
    }, { extra_data: { extra_pnginfo: { workflow } } });
    assert.equal(h.status.status_str, "success", JSON.stringify(h.status));
    const file = path.join(S.dir, "output", "checkpoints", "merged_00001_.safetensors");
    assert.ok(fs.existsSync(file), "the merged checkpoint is in output/checkpoints");
    const hdr = stHeader(file);
    const meta = hdr.__metadata__;
    assert.equal(meta["modelspec.predict_key"], "epsilon");
    assert.equal(JSON.parse(meta.prompt)["5"].class_type, "CheckpointSave");
    assert.deepEqual(JSON.parse(meta.workflow), workflow);
    assert.ok(hdr["model.diffusion_model.out.2.weight"], "UNet keys under model.diffusion_model.");
    assert.ok(hdr["cond_stage_model.transformer.text_model.final_layer_norm.weight"], "CLIP keys");
    assert.ok(hdr["first_stage_model.decoder.conv_out.weight"], "VAE keys");

    const ckpts = (await L.request(S, "GET", "/object_info/CheckpointLoaderSimple")).json()
      .CheckpointLoaderSimple.input.required.ckpt_name[0];
    assert.ok(ckpts.includes("merged_00001_.safetensors"), JSON.stringify(ckpts));
    const g = await runToEnd(S, {
      3: n("KSampler", { seed: 5, steps: 2, cfg: 8, sampler_name: "euler", scheduler: "normal", denoise: 1,
        model: ["4", 0], positive: ["6", 0], negative: ["7", 0], latent_image: ["5", 0] }),
      4: n("CheckpointLoaderSimple", { ckpt_name: "merged_00001_.safetensors" }),
      5: n("EmptyLatentImage", { width: 64, height: 64, batch_size: 1 }),
      6: n("CLIPTextEncode", { text: "a glass bottle", clip: ["4", 1] }),
      7: n("CLIPTextEncode", { text: "text, watermark", clip: ["4", 1] }),
      8: n("VAEDecode", { samples: ["3", 0], vae: ["4", 2] }),
      9: n("SaveImage", { filename_prefix: "from_merged", images: ["8", 0] }),
    });
    assert.equal(g.status.status_str, "success", JSON.stringify(g.status));
    const img = g.outputs["9"].images[0];
    const png = L.decodePng(fs.readFileSync(path.join(S.dir, "output", img.subfolder, img.filename)));
    assert.equal(png.pixels.length, 64 * 64 * 3);
  });

  it("SD1.5 with SDXL is a node error; '..' is refused; the server stays up", async (t) => {
    if (skip) { t.skip(skip); return; }
    const h = await runToEnd(S, {
      1: n("CheckpointLoaderSimple", { ckpt_name: "a.safetensors" }),
      2: n("CheckpointLoaderSimple", { ckpt_name: "xl.safetensors" }),
      3: n("ModelMergeSimple", { model1: ["1", 0], model2: ["2", 0], ratio: 0.5 }),
      4: n("ModelSave", { model: ["3", 0], filename_prefix: "diffusion_models/never" }),
    });
    assert.equal(h.status.status_str, "error");
    const [type, data] = h.status.messages.at(-1);
    assert.equal(type, "execution_error");
    assert.equal(data.node_id, "3");
    assert.equal(data.node_type, "ModelMergeSimple");
    assert.match(data.exception_message, /different families: SD1\.5 and SDXL/);
    assert.ok(!fs.existsSync(path.join(S.dir, "output", "diffusion_models")), "nothing saved");

    const e = await runToEnd(S, {
      1: n("CheckpointLoaderSimple", { ckpt_name: "a.safetensors" }),
      2: n("VAESave", { vae: ["1", 2], filename_prefix: "../escape" }),
    });
    assert.equal(e.status.status_str, "error");
    const [, d2] = e.status.messages.at(-1);
    assert.equal(d2.node_type, "VAESave");
    assert.match(d2.exception_message, /outside the output folder/);
    assert.deepEqual(fs.readdirSync(S.dir).filter((f) => f.startsWith("escape")), []);
    const st = await L.request(S, "GET", "/system_stats");
    assert.equal(st.status, 200);
  });
});

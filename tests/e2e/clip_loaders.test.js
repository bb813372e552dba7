// e2e: CLIPLoader ("Load CLIP") and DualCLIPLoader (nodes/model/sd_clip_loader_nodes.c) through
// the real server with tiny random-weight SDXL files from gen_ckpt:
//   - /object_info equals nodes_loaders_clip.json (tools/comfy_object_info.py on nodes.py: the
//     type combos, the advanced optional device), with models/text_encoders and models/clip listed;
//   - UNETLoader + DualCLIPLoader (gen_ckpt --text-file hf, CLIP-L and bigG in either order) +
//     VAELoader (gen_ckpt --vae-only) give the same pixels as CheckpointLoaderSimple on the
//     checkpoint whose weights they hold;
//   - a VAE given to CLIPLoader and a type of another family are execution_errors naming it; the
//     server stays up.
"use strict";
const { describe, it, before, after } = require("node:test");
const assert = require("node:assert/strict");
const fs = require("fs");
const path = require("path");
const { spawnSync } = require("child_process");
const L = require("./lib/latentd.js");

const gen = process.env.LATENTD_GEN_CKPT || path.join(path.dirname(L.latentdBin()), "gen_ckpt");
const FIX = path.join(L.SOURCE, "tests", "fixtures", "object_info", "nodes_loaders_clip.json");

function genFile(out, ...args) {
  const r = spawnSync(gen, ["--tiny", "--arch", "sdxl", "--seed", "5", ...args, out], { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`gen_ckpt ${args.join(" ")}: ${r.stderr}`);
}

// The default workflow at 64x64, 2 steps, with the model, CLIP and VAE from `src` (node ids
// and output slots), SaveImage prefix `prefix`.
function workflow(nodes, src, prefix) {
  const w = JSON.parse(fs.readFileSync(path.join(L.SOURCE, "tests", "fixtures", "default_workflow_api.json"), "utf8"));
  w["3"].inputs.steps = 2;
  w["3"].inputs.seed = 11;
  w["5"].inputs.width = 64;
  w["5"].inputs.height = 64;
  w["9"].inputs.filename_prefix = prefix;
  delete w["4"];
  Object.assign(w, nodes);
  w["3"].inputs.model = src.model;
  w["6"].inputs.clip = src.clip;
  w["7"].inputs.clip = src.clip;
  w["8"].inputs.vae = src.vae;
  return w;
}

let S = null;

async function run(prompt, id) {
  const c = await L.openWs(S, { clientId: id });
  try {
    const r = await L.postPrompt(S, prompt, { client_id: id, prompt_id: id });
    if (r.status !== 200) return { status: r.status, body: r.json };
    await c.waitFor((m) => m.type === "executing" && m.data.node === null && m.data.prompt_id === id, 120000);
    return { status: 200, messages: c.messages };
  } finally {
    await c.close();
  }
}

async function pixels(id) {
  const h = (await L.request(S, "GET", `/history/${id}`)).json()[id];
  const img = h.outputs["9"].images[0];
  const r = await L.request(S, "GET", `/view?filename=${img.filename}&type=output`);
  return L.decodePng(r.body).pixels;
}

function succeeded(r) {
  assert.ok(r.messages && r.messages.some((m) => m.type === "execution_success"),
    JSON.stringify(r.messages ? r.messages.filter((m) => m.type === "execution_error") : r.body));
}

describe("CLIPLoader and DualCLIPLoader", { skip: !fs.existsSync(gen) && `gen_ckpt not built (${gen})` }, () => {
  before(async () => {
    S = await L.startLatentd({
      setup(dir) {
        const m = (...p) => path.join(dir, "models", ...p);
        for (const d of ["unet", "text_encoders", "clip", "vae"]) fs.mkdirSync(m(d), { recursive: true });
        genFile(m("checkpoints", "xl.safetensors"));
        fs.copyFileSync(m("checkpoints", "xl.safetensors"), m("unet", "xl_unet.safetensors"));
        genFile(m("text_encoders", "xl_clip_l.safetensors"), "--text-file", "hf", "--text-slot", "1");
        genFile(m("clip", "xl_clip_g.safetensors"), "--text-file", "hf", "--text-slot", "2");
        genFile(m("vae", "xl_vae.safetensors"), "--vae-only");
        fs.copyFileSync(m("vae", "xl_vae.safetensors"), m("text_encoders", "not_a_clip.safetensors"));
      },
    });
  });
  after(async () => {
    if (!S) return;
    const r = await S.stop();
    const log = S.log();
    L.removeDir(S.dir);
    assert.deepEqual(r, { code: 0, signal: null }, log.slice(-3000));
  });

  it("/object_info equals ComfyUI's entries", async () => {
    const want = JSON.parse(fs.readFileSync(FIX, "utf8"));
    const files = ["not_a_clip.safetensors", "xl_clip_g.safetensors", "xl_clip_l.safetensors"];
    want.CLIPLoader.input.required.clip_name[0] = files;
    want.DualCLIPLoader.input.required.clip_name1[0] = files;
    want.DualCLIPLoader.input.required.clip_name2[0] = files;
    for (const c of ["CLIPLoader", "DualCLIPLoader"])
      assert.deepEqual((await L.request(S, "GET", `/object_info/${c}`)).json(), { [c]: want[c] }, c);
  });

  it("UNETLoader + DualCLIPLoader + VAELoader: the checkpoint graph's pixels", async () => {
    const a = await run(workflow({ 4: { class_type: "CheckpointLoaderSimple", inputs: { ckpt_name: "xl.safetensors" } } },
      { model: ["4", 0], clip: ["4", 1], vae: ["4", 2] }, "ckpt"), "ckpt");
    succeeded(a);
    const parts = (l, g) => ({
      10: { class_type: "UNETLoader", inputs: { unet_name: "xl_unet.safetensors", weight_dtype: "default" } },
      11: { class_type: "DualCLIPLoader", inputs: { clip_name1: l, clip_name2: g, type: "sdxl" } },
      12: { class_type: "VAELoader", inputs: { vae_name: "xl_vae.safetensors" } },
    });
    const src = { model: ["10", 0], clip: ["11", 0], vae: ["12", 0] };
    const b = await run(workflow(parts("xl_clip_l.safetensors", "xl_clip_g.safetensors"), src, "parts"), "parts");
    succeeded(b);
    const c = await run(workflow(parts("xl_clip_g.safetensors", "xl_clip_l.safetensors"), src, "swapped"), "swapped");
    succeeded(c);
    const want = await pixels("ckpt");
    assert.ok(want.equals(await pixels("parts")), "same pixels as the checkpoint");
    assert.ok(want.equals(await pixels("swapped")), "same pixels with the files swapped");
  });

  it("a VAE as a text encoder, or another family's type, is a clear error", async () => {
    const src = { model: ["4", 0], clip: ["11", 0], vae: ["4", 2] };
    const ck = { class_type: "CheckpointLoaderSimple", inputs: { ckpt_name: "xl.safetensors" } };
    for (const [node, re, id] of [
      [{ class_type: "CLIPLoader", inputs: { clip_name: "not_a_clip.safetensors", type: "stable_diffusion" } },
        /not_a_clip\.safetensors.* is not a CLIP text encoder: it holds a VAE/, "vae"],
      [{ class_type: "DualCLIPLoader", inputs: { clip_name1: "xl_clip_l.safetensors", clip_name2: "xl_clip_g.safetensors", type: "flux" } },
        /type 'flux' is not supported/, "flux"]]) {
      const r = await run(workflow({ 4: ck, 11: node }, src, id), id);
      const err = r.messages.find((m) => m.type === "execution_error");
      assert.ok(err && err.data.node_type === node.class_type, id);
      assert.match(err.data.exception_message, re);
    }
    assert.equal((await L.request(S, "GET", "/system_stats")).status, 200);
  });
});

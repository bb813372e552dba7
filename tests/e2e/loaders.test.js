// e2e: CheckpointLoader ("Load Checkpoint With Config (DEPRECATED)") and UNETLoader ("Load
// Diffusion Model"), nodes/model/sd_loader_nodes.c, through the real server with a tiny
// random-weight checkpoint from gen_ckpt:
//   - /object_info equals nodes_loaders_core.json (tools/comfy_object_info.py on nodes.py),
//     with models/configs' .yaml files, the checkpoints and models/unet + diffusion_models listed;
//   - UNETLoader on a full checkpoint in models/unet gives the KSampler the same MODEL as
//     CheckpointLoaderSimple (same pixels); an fp8 weight_dtype and a file that is no
//     checkpoint are execution_errors saying so;
//   - the default workflow (64x64, 2 steps) with CheckpointLoader + v1-inference.yaml gives the
//     same pixels as with CheckpointLoaderSimple;
//   - a config asking for what the loader does not apply (a CLIP layer_idx) is an
//     execution_error naming it; a config not on disk is value_not_in_list; the server stays up.
"use strict";
const { describe, it, before, after } = require("node:test");
const assert = require("node:assert/strict");
const fs = require("fs");
const path = require("path");
const { spawnSync } = require("child_process");
const L = require("./lib/latentd.js");

const gen = process.env.LATENTD_GEN_CKPT || path.join(path.dirname(L.latentdBin()), "gen_ckpt");
const FIX = path.join(L.SOURCE, "tests", "fixtures", "object_info", "nodes_loaders_core.json");
const V1 = "model:\n  target: ldm.models.diffusion.ddpm.LatentDiffusion\n  params:\n    conditioning_key: crossattn\n";
const SKIP2 = V1 + "    cond_stage_config:\n      params:\n        layer: \"hidden\"\n        layer_idx: -2\n";

function workflow(loader, prefix) {
  const w = JSON.parse(fs.readFileSync(path.join(L.SOURCE, "tests", "fixtures", "default_workflow_api.json"), "utf8"));
  w["3"].inputs.steps = 2;
  w["3"].inputs.seed = 7;
  w["5"].inputs.width = 64;
  w["5"].inputs.height = 64;
  w["9"].inputs.filename_prefix = prefix;
  w["4"] = loader;
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

describe("CheckpointLoader", { skip: !fs.existsSync(gen) && `gen_ckpt not built (${gen})` }, () => {
  before(async () => {
    S = await L.startLatentd({
      setup(dir) {
        const r = spawnSync(gen, ["--tiny", path.join(dir, "models", "checkpoints", "tiny.safetensors")], { encoding: "utf8" });
        if (r.status !== 0) throw new Error(`gen_ckpt: ${r.stderr}`);
        fs.mkdirSync(path.join(dir, "models", "configs"));
        fs.writeFileSync(path.join(dir, "models", "configs", "v1-inference.yaml"), V1);
        fs.writeFileSync(path.join(dir, "models", "configs", "v1-inference_clip_skip_2.yaml"), SKIP2);
        fs.writeFileSync(path.join(dir, "models", "configs", "notes.txt"), "not a config");
        fs.mkdirSync(path.join(dir, "models", "unet"));
        fs.mkdirSync(path.join(dir, "models", "diffusion_models"));
        fs.copyFileSync(path.join(dir, "models", "checkpoints", "tiny.safetensors"), path.join(dir, "models", "unet", "tiny_unet.safetensors"));
        fs.writeFileSync(path.join(dir, "models", "diffusion_models", "broken.safetensors"), "not a safetensors file");
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
    want.CheckpointLoader.input.required.config_name[0] = ["v1-inference.yaml", "v1-inference_clip_skip_2.yaml"];
    want.CheckpointLoader.input.required.ckpt_name[0] = ["tiny.safetensors"];
    want.UNETLoader.input.required.unet_name[0] = ["broken.safetensors", "tiny_unet.safetensors"];
    for (const c of ["CheckpointLoader", "UNETLoader"])
      assert.deepEqual((await L.request(S, "GET", `/object_info/${c}`)).json(), { [c]: want[c] }, c);
  });

  it("UNETLoader reads a full checkpoint's UNet: the same pixels as CheckpointLoaderSimple's MODEL", async () => {
    const w = workflow({ class_type: "CheckpointLoaderSimple", inputs: { ckpt_name: "tiny.safetensors" } }, "unet");
    w["10"] = { class_type: "UNETLoader", inputs: { unet_name: "tiny_unet.safetensors", weight_dtype: "default" } };
    w["3"].inputs.model = ["10", 0];
    const a = await run(workflow({ class_type: "CheckpointLoaderSimple", inputs: { ckpt_name: "tiny.safetensors" } }, "simple2"), "simple2");
    const b = await run(w, "unet");
    for (const r of [a, b]) assert.ok(r.messages.some((m) => m.type === "execution_success"), JSON.stringify(r.messages.filter((m) => m.type === "execution_error")));
    assert.ok((await pixels("simple2")).equals(await pixels("unet")), "same pixels");
    for (const [inputs, re, id] of [[{ unet_name: "tiny_unet.safetensors", weight_dtype: "fp8_e4m3fn" }, /weight_dtype 'fp8_e4m3fn' is not supported/, "fp8"],
      [{ unet_name: "broken.safetensors", weight_dtype: "default" }, /could not load 'broken.safetensors' as a diffusion model/, "broken"]]) {
      const wb = workflow({ class_type: "CheckpointLoaderSimple", inputs: { ckpt_name: "tiny.safetensors" } }, id);
      wb["10"] = { class_type: "UNETLoader", inputs };
      wb["3"].inputs.model = ["10", 0];
      const r = await run(wb, id);
      const err = r.messages.find((m) => m.type === "execution_error");
      assert.ok(err && err.data.node_type === "UNETLoader", id);
      assert.match(err.data.exception_message, re);
    }
  });

  it("with v1-inference.yaml it loads what CheckpointLoaderSimple loads", async () => {
    const a = await run(workflow({ class_type: "CheckpointLoaderSimple", inputs: { ckpt_name: "tiny.safetensors" } }, "simple"), "simple");
    const b = await run(workflow({ class_type: "CheckpointLoader", inputs: { config_name: "v1-inference.yaml", ckpt_name: "tiny.safetensors" } }, "config"), "config");
    for (const r of [a, b]) assert.ok(r.messages.some((m) => m.type === "execution_success"), JSON.stringify(r.messages.filter((m) => m.type === "execution_error")));
    assert.ok((await pixels("simple")).equals(await pixels("config")), "same pixels");
  });

  it("a config it cannot apply, or one not on disk, is a clear error", async () => {
    const r = await run(workflow({ class_type: "CheckpointLoader", inputs: { config_name: "v1-inference_clip_skip_2.yaml", ckpt_name: "tiny.safetensors" } }, "skip2"), "skip2");
    const err = r.messages.find((m) => m.type === "execution_error");
    assert.ok(err, "execution_error");
    assert.equal(err.data.node_type, "CheckpointLoader");
    assert.match(err.data.exception_message, /layer_idx.*CLIPSetLastLayer/);
    const bad = await run(workflow({ class_type: "CheckpointLoader", inputs: { config_name: "nope.yaml", ckpt_name: "tiny.safetensors" } }, "nope"), "nope");
    assert.equal(bad.status, 400);
    assert.equal(bad.body.node_errors["4"].errors[0].type, "value_not_in_list");
    assert.equal((await L.request(S, "GET", "/system_stats")).status, 200);
  });
});

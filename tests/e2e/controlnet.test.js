// e2e: ControlNet through the real server (ComfyUI nodes.py ControlNetLoader,
// DiffControlNetLoader, ControlNetApply, ControlNetApplyAdvanced). models/controlnet holds a
// tiny random SD1.5 ControlNet (gen_ckpt --tiny --controlnet), an SDXL one and a checkpoint
// put there by mistake; input/ holds a 48x40 hint image (resized to the latent's 8x size).
//   - LoadImage -> ControlNetLoader -> ControlNetApplyAdvanced -> KSampler -> SaveImage gives
//     other pixels than the same prompt without control, and the same pixels at strength 0;
//     the KSampler's memory plan loads the ControlNet with the UNet;
//   - a start/end window, a second ControlNet chained and ControlNetApply (OLD) each give
//     yet other pixels; DiffControlNetLoader over the model runs;
//   - an SDXL ControlNet with the SD1.5 model fails KSampler naming both families; a
//     checkpoint as control_net_name fails ControlNetLoader saying it is not a ControlNet;
//   - a Union ControlNet (gen_ckpt --cn-union, SDXL) through SetUnionControlNetType: its
//     type changes the image; a T2I-Adapter (gen_ckpt --t2i xl) steers the SDXL model;
//     tile on a 6-type Union, an unknown type and an SDXL adapter on SD1.5 are errors;
//   - a Control-LoRA (gen_ckpt --cn-lora) steers the SD1.5 model; on the SDXL one it is a
//     KSampler error;
//   - /object_info shows the classes as ComfyUI does.
// Skips when gen_ckpt or the nodes are not built.
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

// The default txt2img graph at 64x64, 3 steps; KSampler's conditioning from `pos`/`neg`.
function workflow(prefix, pos, neg, extra = {}) {
  return {
    3: n("KSampler", { seed: 5, steps: 3, cfg: 8, sampler_name: "euler", scheduler: "normal", denoise: 1,
      model: ["4", 0], positive: pos, negative: neg, latent_image: ["5", 0] }),
    4: n("CheckpointLoaderSimple", { ckpt_name: "tiny.safetensors" }),
    5: n("EmptyLatentImage", { width: 64, height: 64, batch_size: 1 }),
    6: n("CLIPTextEncode", { text: "a glass bottle", clip: ["4", 1] }),
    7: n("CLIPTextEncode", { text: "text, watermark", clip: ["4", 1] }),
    8: n("VAEDecode", { samples: ["3", 0], vae: ["4", 2] }),
    9: n("SaveImage", { filename_prefix: prefix, images: ["8", 0] }),
    ...extra,
  };
}

// LoadImage (10) -> ControlNetLoader (11) -> ControlNetApplyAdvanced (12).
function controlled(prefix, { strength = 1, start = 0, end = 1, cn = "cn.safetensors", extra = {} } = {}) {
  return workflow(prefix, ["12", 0], ["12", 1], {
    10: n("LoadImage", { image: "hint.png" }),
    11: n("ControlNetLoader", { control_net_name: cn }),
    12: n("ControlNetApplyAdvanced", { positive: ["6", 0], negative: ["7", 0], control_net: ["11", 0],
      image: ["10", 0], strength, start_percent: start, end_percent: end }),
    ...extra,
  });
}

async function runToEnd(srv, prompt) {
  const r = await L.postPrompt(srv, prompt);
  assert.equal(r.status, 200, r.text);
  const pid = r.json.prompt_id;
  return L.waitFor(async () => {
    const h = (await L.request(srv, "GET", `/history/${pid}`)).json()[pid];
    return h && h.status && h.status.completed !== undefined && h.status.status_str ? h : null;
  }, { timeoutMs: 90000 });
}

function savedPixels(srv, h) {
  assert.equal(h.status.status_str, "success", JSON.stringify(h.status));
  const img = h.outputs["9"].images[0];
  return L.decodePng(fs.readFileSync(path.join(srv.dir, "output", img.subfolder, img.filename))).pixels;
}

function lastError(h) {
  assert.equal(h.status.status_str, "error", JSON.stringify(h.status));
  const [type, data] = h.status.messages.at(-1);
  assert.equal(type, "execution_error");
  return data;
}

describe("ControlNet end to end", () => {
  let S = null, skip = null, plain = null, full = null;

  before(async () => {
    if (!fs.existsSync(gen)) { skip = `no ${gen}`; return; }
    S = await L.startLatentd({
      setup: (dir) => {
        const ck = path.join(dir, "models", "checkpoints"), cn = path.join(dir, "models", "controlnet");
        fs.mkdirSync(cn, { recursive: true });
        fs.mkdirSync(path.join(dir, "input"), { recursive: true });
        genCkpt(path.join(ck, "tiny.safetensors"));
        genCkpt(path.join(ck, "xl.safetensors"), "--arch", "sdxl");
        genCkpt(path.join(cn, "cn.safetensors"), "--controlnet", "--seed", "3");
        genCkpt(path.join(cn, "cn2.safetensors"), "--controlnet", "--seed", "4", "--cn-prefix", "none");
        genCkpt(path.join(cn, "diff.safetensors"), "--controlnet", "--seed", "5", "--difference");
        genCkpt(path.join(cn, "xl.safetensors"), "--controlnet", "--arch", "sdxl");
        genCkpt(path.join(cn, "ckpt.safetensors"));
        genCkpt(path.join(cn, "union.safetensors"), "--arch", "sdxl", "--cn-union", "8", "--seed", "6");
        genCkpt(path.join(cn, "union6.safetensors"), "--arch", "sdxl", "--cn-union", "6");
        genCkpt(path.join(cn, "t2i_xl.safetensors"), "--arch", "sdxl", "--t2i", "xl", "--seed", "7");
        genCkpt(path.join(cn, "control_lora.safetensors"), "--cn-lora", "4", "--seed", "8");
        // a hint with edges: diagonal stripes, not the latent's aspect (48x40)
        fs.writeFileSync(path.join(dir, "input", "hint.png"),
          L.pngRGBA(48, 40, (x, y) => ((x + y) % 12 < 6 ? [255, 255, 255, 255] : [0, 0, 0, 255])));
      },
    });
    const info = (await L.request(S, "GET", "/object_info")).json();
    if (!info.ControlNetApplyAdvanced || !info.KSampler) skip = "ControlNet nodes not registered";
  });

  after(async () => {
    if (!S) return;
    const r = await S.stop();
    const log = S.log();
    L.removeDir(S.dir);
    assert.deepEqual(r, { code: 0, signal: null }, log.slice(-3000));
  });

  it("/object_info shows the ControlNet classes as ComfyUI does", async (t) => {
    if (skip) { t.skip(skip); return; }
    const info = (await L.request(S, "GET", "/object_info")).json();
    const a = info.ControlNetApplyAdvanced;
    assert.equal(a.display_name, "Apply ControlNet");
    assert.equal(a.category, "conditioning/controlnet");
    assert.deepEqual(a.output, ["CONDITIONING", "CONDITIONING"]);
    assert.deepEqual(a.output_name, ["positive", "negative"]);
    assert.deepEqual(a.input.required.strength, ["FLOAT", { default: 1.0, min: 0.0, max: 10.0, step: 0.01 }]);
    assert.deepEqual(a.input.required.end_percent, ["FLOAT", { default: 1.0, min: 0.0, max: 1.0, step: 0.001 }]);
    assert.deepEqual(a.input.optional, { vae: ["VAE"] });
    assert.equal(info.ControlNetApply.deprecated, true);
    assert.equal(info.ControlNetApply.display_name, "Apply ControlNet (OLD)");
    const l = info.ControlNetLoader;
    assert.equal(l.display_name, "Load ControlNet Model");
    assert.deepEqual(l.input.required.control_net_name[0],
      ["ckpt.safetensors", "cn.safetensors", "cn2.safetensors", "control_lora.safetensors", "diff.safetensors",
        "t2i_xl.safetensors",
        "union.safetensors", "union6.safetensors", "xl.safetensors"]);
    const u = info.SetUnionControlNetType;
    assert.equal(u.category, "conditioning/controlnet");
    assert.deepEqual(u.input.required.type[0], ["auto", "openpose", "depth", "hed/pidi/scribble/ted",
      "canny/lineart/anime_lineart/mlsd", "normal", "segment", "tile", "repaint"]);
    assert.deepEqual(l.output, ["CONTROL_NET"]);
    assert.deepEqual(Object.keys(info.DiffControlNetLoader.input.required), ["model", "control_net_name"]);
  });

  it("a control changes the image; strength 0 gives exactly the uncontrolled one", async (t) => {
    if (skip) { t.skip(skip); return; }
    plain = savedPixels(S, await runToEnd(S, workflow("plain", ["6", 0], ["7", 0])));
    const h = await runToEnd(S, controlled("cn"));
    full = savedPixels(S, h);
    assert.equal(full.length, 64 * 64 * 3);
    assert.ok(!full.equals(plain), "the ControlNet changed the image");
    const zero = savedPixels(S, await runToEnd(S, controlled("cn0", { strength: 0 })));
    assert.ok(zero.equals(plain), "strength 0 is the prompt without control");
    // the sampler's plan loads the ControlNet beside the UNet
    const plans = h.meta["3"].memory;
    const names = plans.flatMap((p) => p.models.map((m) => m.name));
    assert.ok(names.includes("controlnet") && names.includes("unet"), JSON.stringify(names));
    const cnp = plans.flatMap((p) => p.models).find((m) => m.name === "controlnet");
    assert.ok(cnp.bytes_resident + cnp.bytes_streamed > 1e6, JSON.stringify(cnp));
  });

  it("a window, a chained second ControlNet, the OLD node and a diff ControlNet", async (t) => {
    if (skip) { t.skip(skip); return; }
    const win = savedPixels(S, await runToEnd(S, controlled("win", { start: 0.5, end: 1 })));
    assert.ok(!win.equals(full) && !win.equals(plain), "the window [0.5, 1] is neither");
    const cw = controlled("chain");
    cw[13] = n("ControlNetLoader", { control_net_name: "cn2.safetensors" });
    cw[14] = n("ControlNetApplyAdvanced", { positive: ["12", 0], negative: ["12", 1], control_net: ["13", 0],
      image: ["10", 0], strength: 0.8, start_percent: 0, end_percent: 1 });
    cw[3].inputs.positive = ["14", 0];
    cw[3].inputs.negative = ["14", 1];
    const chained = savedPixels(S, await runToEnd(S, cw));
    assert.ok(!chained.equals(full) && !chained.equals(plain), "two ControlNets chained");
    const old = savedPixels(S, await runToEnd(S, workflow("old", ["15", 0], ["7", 0], {
      10: n("LoadImage", { image: "hint.png" }),
      11: n("ControlNetLoader", { control_net_name: "cn.safetensors" }),
      15: n("ControlNetApply", { conditioning: ["6", 0], control_net: ["11", 0], image: ["10", 0], strength: 1 }),
    })));
    // ControlNetApply also steers the negative side (control_apply_to_uncond): the same image
    assert.ok(old.equals(full), "ControlNetApply (OLD) at 1 equals ControlNetApplyAdvanced over [0, 1]");
    const diff = await runToEnd(S, controlled("diff", {
      extra: { 11: n("DiffControlNetLoader", { model: ["4", 0], control_net_name: "diff.safetensors" }) } }));
    assert.ok(!savedPixels(S, diff).equals(plain), "a diff ControlNet over the model");
  });

  it("an SDXL ControlNet steers an SDXL model (the ADM vector reaches its label_emb)", async (t) => {
    if (skip) { t.skip(skip); return; }
    const xl = { 4: n("CheckpointLoaderSimple", { ckpt_name: "xl.safetensors" }) };
    const p = savedPixels(S, await runToEnd(S, workflow("xlplain", ["6", 0], ["7", 0], xl)));
    const c = savedPixels(S, await runToEnd(S, controlled("xlcn", { cn: "xl.safetensors", extra: xl })));
    assert.ok(!c.equals(p), "the SDXL ControlNet changed the SDXL image");
  });

  // The SDXL model with a Union ControlNet whose type SetUnionControlNetType (16) sets.
  const xl = { 4: n("CheckpointLoaderSimple", { ckpt_name: "xl.safetensors" }) };
  function union(prefix, type, cn = "union.safetensors") {
    const w = controlled(prefix, { cn, extra: { ...xl, 16: n("SetUnionControlNetType", { control_net: ["11", 0], type }) } });
    w[12].inputs.control_net = ["16", 0];
    return w;
  }

  it("a Union ControlNet (its type set) and a T2I-Adapter steer the SDXL model", async (t) => {
    if (skip) { t.skip(skip); return; }
    const p = savedPixels(S, await runToEnd(S, workflow("xlplain2", ["6", 0], ["7", 0], xl)));
    const canny = savedPixels(S, await runToEnd(S, union("ucanny", "canny/lineart/anime_lineart/mlsd")));
    const auto = savedPixels(S, await runToEnd(S, union("uauto", "auto")));
    assert.ok(!canny.equals(p), "the Union changed the SDXL image");
    assert.ok(!canny.equals(auto), "its control type matters (canny vs auto)");
    const h = await runToEnd(S, controlled("t2i", { cn: "t2i_xl.safetensors", extra: xl }));
    assert.ok(!savedPixels(S, h).equals(p), "the T2I-Adapter changed the SDXL image");
    const names = h.meta["3"].memory.flatMap((m) => m.models.map((x) => x.name));
    assert.ok(names.includes("t2i_adapter"), JSON.stringify(names));
  });

  it("a Control-LoRA: its ControlNet made from the model's UNet at sampling", async (t) => {
    if (skip) { t.skip(skip); return; }
    const h = await runToEnd(S, controlled("clora", { cn: "control_lora.safetensors" }));
    const px = savedPixels(S, h);
    assert.ok(!px.equals(plain) && !px.equals(full), "the Control-LoRA changed the image");
    const names = h.meta["3"].memory.flatMap((m) => m.models.map((x) => x.name));
    assert.ok(names.includes("controlnet"), JSON.stringify(names));
    const d = lastError(await runToEnd(S, controlled("cloraxl", { cn: "control_lora.safetensors", extra: xl })));
    assert.equal(d.node_type, "KSampler");
    assert.match(d.exception_message, /this Control-LoRA does not fit the SDXL model/);
  });

  it("bad input: tile on a 6-type Union, an unknown type, an SDXL adapter on SD1.5", async (t) => {
    if (skip) { t.skip(skip); return; }
    let d = lastError(await runToEnd(S, union("tile6", "tile", "union6.safetensors")));
    assert.equal(d.node_type, "KSampler");
    assert.match(d.exception_message, /Control type tile\(6\) is out of range for the number of control types\(6\)/);
    const r = await L.postPrompt(S, union("nope", "sketch"));
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.node_errors["16"].errors[0].type, "value_not_in_list");
    d = lastError(await runToEnd(S, controlled("t2isd", { cn: "t2i_xl.safetensors" })));
    assert.equal(d.node_type, "KSampler");
    assert.match(d.exception_message, /T2I-Adapter \(SDXL.*does not fit the SD1\.5 model/);
    assert.equal((await L.request(S, "GET", "/system_stats")).status, 200);
  });

  it("bad input: another family's ControlNet, a checkpoint as ControlNet", async (t) => {
    if (skip) { t.skip(skip); return; }
    let d = lastError(await runToEnd(S, controlled("xl", { cn: "xl.safetensors" })));
    assert.equal(d.node_id, "3");
    assert.equal(d.node_type, "KSampler");
    assert.match(d.exception_message, /ControlNet is for SDXL, the model is SD1\.5/);
    d = lastError(await runToEnd(S, controlled("ck", { cn: "ckpt.safetensors" })));
    assert.equal(d.node_id, "11");
    assert.equal(d.node_type, "ControlNetLoader");
    assert.match(d.exception_message, /not a supported ControlNet: a checkpoint/);
    d = lastError(await runToEnd(S, workflow("sd15cn", ["12", 0], ["12", 1], {
      ...Object.fromEntries(Object.entries(controlled("y")).filter(([k]) => ["10", "11", "12"].includes(k))),
      4: n("CheckpointLoaderSimple", { ckpt_name: "xl.safetensors" }) })));
    assert.equal(d.node_type, "KSampler");
    assert.match(d.exception_message, /ControlNet is for SD1\.5, the model is SDXL/);
    const r = await L.postPrompt(S, controlled("x", { strength: 11 }));
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.node_errors["12"].errors[0].type, "value_bigger_than_max");
  });
});

// e2e: GLIGEN through the real server (ComfyUI nodes.py GLIGENLoader, GLIGENTextBoxApply).
// models/gligen holds a tiny random GLIGEN model for the tiny SD1.5 UNet (gen_ckpt --tiny
// --gligen), one for the SDXL UNet, and a checkpoint put there by mistake.
//   - /object_info shows both classes as tools/comfy_object_info.py renders nodes.py
//     (tests/fixtures/object_info/nodes_gligen.json), the loader listing models/gligen;
//   - CLIPTextEncode -> GLIGENTextBoxApply -> KSampler -> SaveImage gives other pixels
//     than the same prompt without the box; a second box chained, or the same box
//     elsewhere, gives yet other pixels; the negative without boxes takes the positive's
//     (the same box on it changes nothing); the KSampler's memory plan loads the GLIGEN
//     model with the UNet;
//   - a checkpoint as gligen_name fails GLIGENLoader saying it is one; the SDXL-shaped
//     GLIGEN model with the SD1.5 model fails KSampler naming the mismatch; server up.
// Skips when gen_ckpt or the nodes are not built.
"use strict";
const { describe, it, before, after } = require("node:test");
const assert = require("node:assert/strict");
const fs = require("fs");
const path = require("path");
const { spawnSync } = require("child_process");
const L = require("./lib/latentd.js");

const gen = process.env.LATENTD_GEN_CKPT || path.join(path.dirname(L.latentdBin()), "gen_ckpt");
const FIX = path.join(L.SOURCE, "tests", "fixtures", "object_info");

function genCkpt(out, ...extra) {
  const r = spawnSync(gen, ["--tiny", ...extra, out], { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`gen_ckpt ${extra.join(" ")} failed: ${r.stderr}`);
}

const n = (class_type, inputs) => ({ inputs, class_type });

// The default txt2img graph at 64x64, 3 steps; KSampler's positive from `pos`.
function workflow(prefix, pos, extra = {}) {
  return {
    3: n("KSampler", { seed: 5, steps: 3, cfg: 8, sampler_name: "euler", scheduler: "normal", denoise: 1,
      model: ["4", 0], positive: pos, negative: ["7", 0], latent_image: ["5", 0] }),
    4: n("CheckpointLoaderSimple", { ckpt_name: "tiny.safetensors" }),
    5: n("EmptyLatentImage", { width: 64, height: 64, batch_size: 1 }),
    6: n("CLIPTextEncode", { text: "a glass bottle", clip: ["4", 1] }),
    7: n("CLIPTextEncode", { text: "text, watermark", clip: ["4", 1] }),
    8: n("VAEDecode", { samples: ["3", 0], vae: ["4", 2] }),
    9: n("SaveImage", { filename_prefix: prefix, images: ["8", 0] }),
    ...extra,
  };
}

// GLIGENLoader (11) -> GLIGENTextBoxApply (10) on the positive; more boxes chained after.
function boxed(prefix, { model = "gligen.safetensors", boxes = [{ x: 8, y: 16 }] } = {}) {
  const extra = { 11: n("GLIGENLoader", { gligen_name: model }) };
  let from = ["6", 0];
  boxes.forEach((b, i) => {
    const id = String(20 + i);
    extra[id] = n("GLIGENTextBoxApply", { conditioning_to: from, clip: ["4", 1], gligen_textbox_model: ["11", 0],
      text: b.text || "a red ball", width: b.width || 32, height: b.height || 24, x: b.x, y: b.y });
    from = [id, 0];
  });
  return workflow(prefix, from, extra);
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

describe("GLIGEN end to end", () => {
  let S = null, skip = null, plain = null;

  before(async () => {
    if (!fs.existsSync(gen)) { skip = `no ${gen}`; return; }
    S = await L.startLatentd({
      setup: (dir) => {
        const ck = path.join(dir, "models", "checkpoints"), gl = path.join(dir, "models", "gligen");
        fs.mkdirSync(gl, { recursive: true });
        genCkpt(path.join(ck, "tiny.safetensors"));
        genCkpt(path.join(gl, "gligen.safetensors"), "--gligen", "--seed", "3", "--dtype", "f16");
        genCkpt(path.join(gl, "xl.safetensors"), "--gligen", "--arch", "sdxl", "--dtype", "f16");
        genCkpt(path.join(gl, "ckpt.safetensors"));
      },
    });
    const info = (await L.request(S, "GET", "/object_info")).json();
    if (!info.GLIGENTextBoxApply || !info.KSampler) skip = "GLIGEN nodes not registered";
  });

  after(async () => {
    if (!S) return;
    const r = await S.stop();
    const log = S.log();
    L.removeDir(S.dir);
    assert.deepEqual(r, { code: 0, signal: null }, log.slice(-3000));
  });

  it("/object_info shows the GLIGEN classes as ComfyUI does", async (t) => {
    if (skip) { t.skip(skip); return; }
    const info = (await L.request(S, "GET", "/object_info")).json();
    const want = JSON.parse(fs.readFileSync(path.join(FIX, "nodes_gligen.json"), "utf8"));
    // "$GLIGEN": the folder's files, sorted
    want.GLIGENLoader.input.required.gligen_name[0] = ["ckpt.safetensors", "gligen.safetensors", "xl.safetensors"];
    for (const c of ["GLIGENLoader", "GLIGENTextBoxApply"]) assert.deepEqual(info[c], want[c], c);
  });

  it("a text box changes the image; another box or place changes it again", async (t) => {
    if (skip) { t.skip(skip); return; }
    plain = savedPixels(S, await runToEnd(S, workflow("plain", ["6", 0])));
    const h = await runToEnd(S, boxed("box"));
    const one = savedPixels(S, h);
    assert.equal(one.length, 64 * 64 * 3);
    assert.ok(!one.equals(plain), "the box changed the image");
    const two = savedPixels(S, await runToEnd(S, boxed("two", { boxes: [{ x: 8, y: 16 }, { x: 32, y: 0, text: "a cat" }] })));
    assert.ok(!two.equals(one) && !two.equals(plain), "a second box changes it");
    // the positive's boxes also steer a negative without any (apply_empty_x_to_equal_area):
    // the same box put on the negative too gives the same pixels
    const both = boxed("both");
    both[30] = n("GLIGENTextBoxApply", { ...both[20].inputs, conditioning_to: ["7", 0] });
    both[3].inputs.negative = ["30", 0];
    assert.ok(savedPixels(S, await runToEnd(S, both)).equals(one), "the negative took the positive's box");
    const moved = savedPixels(S, await runToEnd(S, boxed("moved", { boxes: [{ x: 24, y: 32 }] })));
    assert.ok(!moved.equals(one) && !moved.equals(plain), "the box's place matters");
    // the sampler's plan loads the GLIGEN model beside the UNet
    const plans = h.meta["3"].memory;
    const names = plans.flatMap((p) => p.models.map((m) => m.name));
    assert.ok(names.includes("gligen") && names.includes("unet"), JSON.stringify(names));
    const gp = plans.flatMap((p) => p.models).find((m) => m.name === "gligen");
    assert.ok(gp.bytes_resident + gp.bytes_streamed > 1e6, JSON.stringify(gp));
  });

  it("wrong files and models: clear node errors, server up", async (t) => {
    if (skip) { t.skip(skip); return; }
    let err = lastError(await runToEnd(S, boxed("ckpt", { model: "ckpt.safetensors" })));
    assert.equal(err.node_type, "GLIGENLoader");
    assert.match(err.exception_message, /ckpt\.safetensors' is not a supported GLIGEN model: a checkpoint/);
    err = lastError(await runToEnd(S, boxed("xl", { model: "xl.safetensors" })));
    assert.equal(err.node_type, "KSampler");
    assert.match(err.exception_message, /GLIGEN model has \d+ modules but the model's UNet has 16 transformers/);
    assert.equal((await L.request(S, "GET", "/system_stats")).status, 200);
    // and a good run still works after the failures
    const again = savedPixels(S, await runToEnd(S, workflow("again", ["6", 0])));
    assert.ok(again.equals(plain), "the same pixels as before the failures");
  });
});

// e2e: the concat-conditioned UNets through the real server (issues 13 and 14). Tiny
// random-weight files from gen_ckpt --in-channels 9 (inpainting: SD1.5 and SD2 512-inpainting)
// and 8 (instruct-pix2pix, SD1.5), an 8-channel SD2 (no such model in ComfyUI).
//   - /object_info lists InpaintModelConditioning and InstructPixToPixConditioning as ComfyUI
//     does (fixtures from tools/comfy_object_info.py: nodes_inpaint_core.json from nodes.py,
//     nodes_ip2p.json from comfy_extras/nodes_ip2p.py);
//   - LoadImage (an RGBA PNG: its alpha is the mask) -> InpaintModelConditioning -> KSampler ->
//     VAEDecode -> SaveImage on the 9-channel SD1.5: the same seed repeats the image, the
//     mask and the concat matter (another mask, or the plain conditioning with the same
//     latent, give other pixels); noise_mask off runs; the same graph on the SD2 file;
//   - LoadImage -> InstructPixToPixConditioning -> KSampler on the 8-channel file: another
//     input image gives another result;
//   - bad input: the 8-channel SD2 file is an execution_error naming the family and channel
//     count, and the server goes on.
// Skips when gen_ckpt or the model nodes are not built.
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

// The shared part: loader, prompts, KSampler on `cond` (positive, negative, latent outputs of
// node 10), decode and save.
function graph(prefix, ckpt, nodes, { seed = 7, cond = "10" } = {}) {
  return {
    3: n("KSampler", { seed, steps: 3, cfg: 6, sampler_name: "euler", scheduler: "normal", denoise: 1,
      model: ["4", 0], positive: [cond, 0], negative: [cond, 1], latent_image: [cond, 2] }),
    4: n("CheckpointLoaderSimple", { ckpt_name: ckpt }),
    6: n("CLIPTextEncode", { text: "a red door", clip: ["4", 1] }),
    7: n("CLIPTextEncode", { text: "blurry", clip: ["4", 1] }),
    8: n("VAEDecode", { samples: ["3", 0], vae: ["4", 2] }),
    9: n("SaveImage", { filename_prefix: prefix, images: ["8", 0] }),
    ...nodes,
  };
}

function inpaint(prefix, { ckpt = "inpaint9.safetensors", image = "door.png", noise_mask = true,
  seed = 7 } = {}) {
  return graph(prefix, ckpt, {
    5: n("LoadImage", { image }),
    10: n("InpaintModelConditioning", { positive: ["6", 0], negative: ["7", 0], vae: ["4", 2],
      pixels: ["5", 0], mask: ["5", 1], noise_mask }),
  }, { seed });
}

function ip2p(prefix, image = "door.png") {
  return graph(prefix, "ip2p8.safetensors", {
    5: n("LoadImage", { image }),
    10: n("InstructPixToPixConditioning", { positive: ["6", 0], negative: ["7", 0], vae: ["4", 2],
      pixels: ["5", 0] }),
  });
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
  return L.decodePng(fs.readFileSync(path.join(srv.dir, "output", img.subfolder, img.filename)));
}

async function pixelsOf(srv, prompt) {
  const h = await runToEnd(srv, prompt);
  assert.equal(h.status.status_str, "success", JSON.stringify(h.status));
  return savedPixels(srv, h).pixels;
}

// A 64x64 RGBA picture; alpha 0 (ComfyUI's mask 1: inpaint here) inside the square
// [x0, x1) x [y0, y1).
function picture(seed, [x0, y0, x1, y1]) {
  return L.pngRGBA(64, 64, (x, y) => [(x * 4 + seed * 37) & 255, (y * 4 + seed * 11) & 255,
    ((x ^ y) * 3 + seed) & 255, x >= x0 && x < x1 && y >= y0 && y < y1 ? 0 : 255]);
}

describe("concat-conditioned UNets end to end", () => {
  let S = null, skip = null;

  before(async () => {
    if (!fs.existsSync(gen)) { skip = `no ${gen}`; return; }
    S = await L.startLatentd({
      setup: (dir) => {
        const ck = path.join(dir, "models", "checkpoints");
        genCkpt(path.join(ck, "inpaint9.safetensors"), "--in-channels", "9");
        genCkpt(path.join(ck, "ip2p8.safetensors"), "--in-channels", "8");
        genCkpt(path.join(ck, "sd2_inpaint.safetensors"), "--arch", "sd2", "--in-channels", "9",
          "--dtype", "f16");
        genCkpt(path.join(ck, "sd2_8.safetensors"), "--arch", "sd2", "--in-channels", "8");
        fs.writeFileSync(path.join(dir, "input", "door.png"), picture(1, [16, 16, 48, 40]));
        fs.writeFileSync(path.join(dir, "input", "door_b.png"), picture(1, [0, 0, 24, 64]));
        fs.writeFileSync(path.join(dir, "input", "other.png"), picture(5, [16, 16, 48, 40]));
      },
    });
    const info = (await L.request(S, "GET", "/object_info")).json();
    if (!info.CheckpointLoaderSimple || !info.KSampler) skip = "model nodes not registered";
  });

  after(async () => {
    if (!S) return;
    const r = await S.stop();
    const log = S.log();
    L.removeDir(S.dir);
    assert.deepEqual(r, { code: 0, signal: null }, log.slice(-3000));
  });

  it("/object_info equals ComfyUI's entries", async (t) => {
    if (skip) { t.skip(skip); return; }
    const info = (await L.request(S, "GET", "/object_info")).json();
    for (const [file, c] of [["nodes_inpaint_core.json", "InpaintModelConditioning"],
      ["nodes_ip2p.json", "InstructPixToPixConditioning"]]) {
      const want = JSON.parse(fs.readFileSync(path.join(FIX, file), "utf8"));
      assert.deepEqual(info[c], want[c], c);
    }
  });

  it("inpaints with a 9-channel SD1.5 checkpoint", async (t) => {
    if (skip) { t.skip(skip); return; }
    const a = await pixelsOf(S, inpaint("ip_a"));
    const b = await pixelsOf(S, inpaint("ip_b"));
    assert.equal(a.length, 64 * 64 * 3);
    assert.ok(new Set(a).size > 8, "the image is not flat");
    assert.ok(a.equals(b), "same seed, same pixels");
    assert.ok(!a.equals(await pixelsOf(S, inpaint("ip_mask", { image: "door_b.png" }))),
      "another mask, other pixels");
    assert.ok(!a.equals(await pixelsOf(S, inpaint("ip_nomask", { noise_mask: false }))),
      "noise_mask off samples the whole latent");
    // The same latent and noise mask with the plain conditioning: the model's concat then
    // falls back to the latent's noise mask and the latent itself, not the greyed image.
    const plain = inpaint("ip_plain");
    plain[3].inputs.positive = ["6", 0];
    plain[3].inputs.negative = ["7", 0];
    assert.ok(!a.equals(await pixelsOf(S, plain)), "the concat keys reach the UNet");
  });

  it("inpaints with a 9-channel SD2 checkpoint", async (t) => {
    if (skip) { t.skip(skip); return; }
    const p = await pixelsOf(S, inpaint("sd2_ip", { ckpt: "sd2_inpaint.safetensors" }));
    assert.equal(p.length, 64 * 64 * 3);
  });

  it("instruct-pix2pix with an 8-channel checkpoint", async (t) => {
    if (skip) { t.skip(skip); return; }
    const a = await pixelsOf(S, ip2p("p2p_a"));
    assert.ok(a.equals(await pixelsOf(S, ip2p("p2p_b"))), "same seed, same pixels");
    assert.ok(!a.equals(await pixelsOf(S, ip2p("p2p_other", "other.png"))),
      "another input image, another result");
  });

  it("bad input: an 8-channel SD2 file is a node error, server up", async (t) => {
    if (skip) { t.skip(skip); return; }
    const bad = await runToEnd(S, inpaint("bad", { ckpt: "sd2_8.safetensors" }));
    assert.equal(bad.status.status_str, "error", JSON.stringify(bad.status));
    const [type, data] = bad.status.messages.at(-1);
    assert.equal(type, "execution_error");
    assert.equal(data.node_id, "4");
    assert.match(data.exception_message, /SD2\.x UNet with 8 input channels/);
    assert.ok((await pixelsOf(S, inpaint("after_bad"))).length > 0, "the server goes on");
  });
});

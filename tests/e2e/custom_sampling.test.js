// e2e: ComfyUI's custom-sampling nodes (comfy_extras/nodes_custom_sampler.py) through the real
// server, on a tiny gen_ckpt checkpoint:
//   - /object_info: every class latentd registers from that file equals the entry in
//     tests/fixtures/object_info/nodes_custom_sampler.json (built from ComfyUI's source by
//     tools/comfy_object_info.py), the sampler/scheduler combos being KSampler's lists;
//   - SamplerCustomAdvanced(RandomNoise, CFGGuider, KSamplerSelect, BasicScheduler) and
//     SamplerCustom save exactly the pixels of the equivalent KSampler graph (img2img too);
//   - a CFGGuider without its model is a 400 required_input_missing; a SIGMAS list of length 1
//     (SplitSigmas past the last step) runs as ComfyUI does (no step, both outputs saved);
//     SetFirstSigma on an empty list is an execution_error, and the server keeps serving.
// Skips when gen_ckpt or the nodes are not built.
"use strict";
const { describe, it, before, after } = require("node:test");
const assert = require("node:assert/strict");
const fs = require("fs");
const path = require("path");
const { spawnSync } = require("child_process");
const L = require("./lib/latentd.js");

const gen = process.env.LATENTD_GEN_CKPT || path.join(path.dirname(L.latentdBin()), "gen_ckpt");
const FIXTURE = path.join(L.SOURCE, "tests", "fixtures", "object_info", "nodes_custom_sampler.json");
const CORE = ["KSamplerSelect", "BasicScheduler", "KarrasScheduler", "ExponentialScheduler",
  "PolyexponentialScheduler", "SplitSigmas", "SplitSigmasDenoise", "FlipSigmas", "SetFirstSigma",
  "RandomNoise", "DisableNoise", "BasicGuider", "CFGGuider", "SamplerCustom", "SamplerCustomAdvanced"];

const n = (class_type, inputs) => ({ inputs, class_type });

// Loader, prompts, latent and the decode/save tail shared by every graph; node 3 samples.
function base(prefix, samples, extra) {
  return {
    4: n("CheckpointLoaderSimple", { ckpt_name: "tiny.safetensors" }),
    5: n("EmptyLatentImage", { width: 64, height: 64, batch_size: 1 }),
    6: n("CLIPTextEncode", { text: "a glass bottle", clip: ["4", 1] }),
    7: n("CLIPTextEncode", { text: "text, watermark", clip: ["4", 1] }),
    8: n("VAEDecode", { samples, vae: ["4", 2] }),
    9: n("SaveImage", { filename_prefix: prefix, images: ["8", 0] }),
    ...extra,
  };
}

function ksampler(prefix, { sampler = "euler_ancestral", scheduler = "karras", denoise = 1, latent = ["5", 0], extra = {} } = {}) {
  return base(prefix, ["3", 0], {
    3: n("KSampler", { seed: 42, steps: 3, cfg: 6.5, sampler_name: sampler, scheduler, denoise,
      model: ["4", 0], positive: ["6", 0], negative: ["7", 0], latent_image: latent }),
    ...extra,
  });
}

function advanced(prefix, { sampler = "euler_ancestral", scheduler = "karras", denoise = 1, latent = ["5", 0], sigmas = ["11", 0], extra = {} } = {}) {
  return base(prefix, ["3", 0], {
    3: n("SamplerCustomAdvanced", { noise: ["10", 0], guider: ["12", 0], sampler: ["13", 0], sigmas, latent_image: latent }),
    10: n("RandomNoise", { noise_seed: 42 }),
    11: n("BasicScheduler", { model: ["4", 0], scheduler, steps: 3, denoise }),
    12: n("CFGGuider", { model: ["4", 0], positive: ["6", 0], negative: ["7", 0], cfg: 6.5 }),
    13: n("KSamplerSelect", { sampler_name: sampler }),
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
  }, { timeoutMs: 60000 });
}

function savedPixels(srv, h, node = "9") {
  assert.equal(h.status.status_str, "success", JSON.stringify(h.status));
  const img = h.outputs[node].images[0];
  return L.decodePng(fs.readFileSync(path.join(srv.dir, "output", img.subfolder, img.filename))).pixels;
}

describe("custom sampling end to end", () => {
  let S = null, skip = null, info = null;

  before(async () => {
    if (!fs.existsSync(gen)) { skip = `no ${gen}`; return; }
    S = await L.startLatentd({
      setup: (dir) => {
        const r = spawnSync(gen, ["--tiny", path.join(dir, "models", "checkpoints", "tiny.safetensors")], { encoding: "utf8" });
        if (r.status !== 0) throw new Error(`gen_ckpt failed: ${r.stderr}`);
      },
    });
    info = (await L.request(S, "GET", "/object_info")).json();
    if (!info.SamplerCustomAdvanced) skip = "custom-sampling nodes not registered";
  });

  after(async () => {
    if (!S) return;
    const r = await S.stop();
    const log = S.log();
    L.removeDir(S.dir);
    assert.deepEqual(r, { code: 0, signal: null }, log.slice(-3000));
  });

  it("/object_info equals ComfyUI's entry for every class registered from nodes_custom_sampler", (t) => {
    if (skip) { t.skip(skip); return; }
    const want = JSON.parse(fs.readFileSync(FIXTURE, "utf8"));
    const samplers = info.KSampler.input.required.sampler_name[0];
    const schedulers = info.KSampler.input.required.scheduler[0];
    const fill = (v) => {
      if (Array.isArray(v) && v.length === 1 && v[0] === "$SAMPLER_NAMES") return samplers;
      if (Array.isArray(v) && v.length === 1 && v[0] === "$SCHEDULER_NAMES") return schedulers;
      if (Array.isArray(v)) return v.map(fill);
      if (v && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, fill(x)]));
      return v;
    };
    for (const c of CORE) assert.ok(info[c], `${c} is registered`);
    let checked = 0;
    for (const [name, entry] of Object.entries(want)) {
      if (!info[name]) continue;
      assert.deepEqual(info[name], fill(entry), name);
      checked++;
    }
    assert.ok(checked >= CORE.length, `${checked} classes compared`);
  });

  it("issue 14's samplers: KSampler runs uni_pc and seeds_3; dpmpp_2m_cfg_pp is the same in both graphs", async (t) => {
    if (skip) { t.skip(skip); return; }
    const samplers = info.KSampler.input.required.sampler_name[0];
    for (const name of ["uni_pc", "uni_pc_bh2", "euler_cfg_pp", "dpm_adaptive", "deis", "er_sde", "seeds_3"])
      assert.ok(samplers.includes(name), `KSampler lists ${name}`);
    assert.deepEqual(info.KSamplerSelect.input.required.sampler_name[0], samplers);
    const u = savedPixels(S, await runToEnd(S, ksampler("unipc", { sampler: "uni_pc" })));
    const s3 = savedPixels(S, await runToEnd(S, ksampler("seeds3", { sampler: "seeds_3" })));
    assert.equal(u.length, 64 * 64 * 3);
    assert.ok(!u.equals(s3), "different samplers, different images");
    const k = savedPixels(S, await runToEnd(S, ksampler("kcfgpp", { sampler: "dpmpp_2m_cfg_pp" })));
    const a = savedPixels(S, await runToEnd(S, advanced("acfgpp", { sampler: "dpmpp_2m_cfg_pp" })));
    assert.ok(a.equals(k), "dpmpp_2m_cfg_pp: SamplerCustomAdvanced == KSampler");
  });

  it("SamplerCustomAdvanced and SamplerCustom save exactly KSampler's pixels", async (t) => {
    if (skip) { t.skip(skip); return; }
    const k = savedPixels(S, await runToEnd(S, ksampler("ks")));
    const a = savedPixels(S, await runToEnd(S, advanced("adv")));
    assert.equal(k.length, 64 * 64 * 3);
    assert.ok(a.equals(k), "SamplerCustomAdvanced == KSampler");
    const c = savedPixels(S, await runToEnd(S, base("custom", ["3", 0], {
      3: n("SamplerCustom", { model: ["4", 0], add_noise: true, noise_seed: 42, cfg: 6.5, positive: ["6", 0],
        negative: ["7", 0], sampler: ["13", 0], sigmas: ["11", 0], latent_image: ["5", 0] }),
      11: n("BasicScheduler", { model: ["4", 0], scheduler: "karras", steps: 3, denoise: 1 }),
      13: n("KSamplerSelect", { sampler_name: "euler_ancestral" }),
    })));
    assert.ok(c.equals(k), "SamplerCustom == KSampler");
    // img2img at denoise 0.5 on the encoded first image: the same again.
    const enc = { 20: n("LoadImage", { image: "in.png" }), 21: n("VAEEncode", { pixels: ["20", 0], vae: ["4", 2] }) };
    fs.writeFileSync(path.join(S.dir, "input", "in.png"), L.pngRGBA(64, 64, (x, y) => [x * 4, y * 4, 128, 255]));
    const ki = savedPixels(S, await runToEnd(S, ksampler("ki", { sampler: "dpmpp_2m", scheduler: "normal", denoise: 0.5, latent: ["21", 0], extra: enc })));
    const ai = savedPixels(S, await runToEnd(S, advanced("ai", { sampler: "dpmpp_2m", scheduler: "normal", denoise: 0.5, latent: ["21", 0], extra: enc })));
    assert.ok(ai.equals(ki), "img2img: SamplerCustomAdvanced == KSampler");
    assert.ok(!ai.equals(k), "img2img differs from txt2img");
  });

  it("bad input: a guider without a model, a sigma list of length 1, an empty list indexed", async (t) => {
    if (skip) { t.skip(skip); return; }
    const g = advanced("nomodel");
    delete g[12].inputs.model;
    const r = await L.postPrompt(S, g);
    assert.equal(r.status, 400, r.text);
    const e = r.json.node_errors["12"].errors[0];
    assert.equal(e.type, "required_input_missing");
    assert.equal(e.details, "model");

    // SplitSigmas at the last step: low_sigmas = [0]. ComfyUI noises by 0, runs no step, and
    // both outputs are the latent.
    const one = advanced("one", { sigmas: ["14", 1], extra: {
      14: n("SplitSigmas", { sigmas: ["11", 0], step: 3 }),
      15: n("VAEDecode", { samples: ["3", 1], vae: ["4", 2] }),
      16: n("SaveImage", { filename_prefix: "one_denoised", images: ["15", 0] }),
    } });
    const h = await runToEnd(S, one);
    assert.ok(savedPixels(S, h, "9").equals(savedPixels(S, h, "16")), "denoised_output = output");

    // SplitSigmasDenoise at 0: high_sigmas = sigmas[:-0], empty; SetFirstSigma indexes it.
    const bad = advanced("empty", { sigmas: ["19", 0], extra: {
      18: n("SplitSigmasDenoise", { sigmas: ["11", 0], denoise: 0 }),
      19: n("SetFirstSigma", { sigmas: ["18", 0], sigma: 5 }),
    } });
    const hb = await runToEnd(S, bad);
    assert.equal(hb.status.status_str, "error");
    const [type, data] = hb.status.messages.at(-1);
    assert.equal(type, "execution_error");
    assert.equal(data.node_id, "19");
    assert.equal(data.exception_type, "IndexError");

    const again = savedPixels(S, await runToEnd(S, advanced("after")));
    assert.equal(again.length, 64 * 64 * 3, "the server still runs prompts");
  });
});

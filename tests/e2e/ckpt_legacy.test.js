// e2e: PyTorch checkpoints (.ckpt/.pt, models/pt_load.h) through the real server. The tiny
// seed-42 checkpoint is generated as .safetensors and converted by tools/pt_write.py to a
// pytorch-lightning .ckpt (state_dict nested beside global_step) and to a metadata-free
// .safetensors twin; a LoRA and a standalone VAE likewise exist as .safetensors and .pt.
//   - CheckpointLoaderSimple lists the .ckpt and saves exactly the pixels of its twin;
//   - LoraLoader with lora.pt saves the pixels of lora.safetensors (and not the plain ones);
//   - VAELoader with a .pt VAE decodes as with its .safetensors twin;
//   - a .ckpt whose pickle calls os.system fails node 4 with execution_error naming the
//     blocked global, nothing runs, and the server goes on.
// Skips when gen_ckpt, python3 or the SD1.5 nodes are missing.
"use strict";
const { describe, it, before, after } = require("node:test");
const assert = require("node:assert/strict");
const fs = require("fs");
const path = require("path");
const { spawnSync } = require("child_process");
const L = require("./lib/latentd.js");

const gen = process.env.LATENTD_GEN_CKPT || path.join(path.dirname(L.latentdBin()), "gen_ckpt");
const python = process.env.LATENTD_PYTHON || "python3";
const ptWrite = path.join(L.SOURCE, "tools", "pt_write.py");
const hostile = path.join(L.SOURCE, "tests", "fixtures", "ckpt", "os_system.ckpt");
const PWNED = "/tmp/latentd_pwned";

function run(cmd, args) {
  const r = spawnSync(cmd, args, { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")} failed: ${r.stderr || r.error}`);
}

function workflow(prefix, ckpt, extra = {}, model = ["4", 0], vae = ["4", 2]) {
  const n = (class_type, inputs) => ({ inputs, class_type });
  return {
    3: n("KSampler", { seed: 5, steps: 3, cfg: 8, sampler_name: "euler", scheduler: "normal", denoise: 1,
      model, positive: ["6", 0], negative: ["7", 0], latent_image: ["5", 0] }),
    4: n("CheckpointLoaderSimple", { ckpt_name: ckpt }),
    5: n("EmptyLatentImage", { width: 64, height: 64, batch_size: 1 }),
    6: n("CLIPTextEncode", { text: "a glass bottle", clip: ["4", 1] }),
    7: n("CLIPTextEncode", { text: "text, watermark", clip: ["4", 1] }),
    8: n("VAEDecode", { samples: ["3", 0], vae }),
    9: n("SaveImage", { filename_prefix: prefix, images: ["8", 0] }),
    ...extra,
  };
}

function withLora(prefix, ckpt, lora) {
  return workflow(prefix, ckpt, { 10: { class_type: "LoraLoader", inputs: { model: ["4", 0], clip: ["4", 1],
    lora_name: lora, strength_model: 1.0, strength_clip: 1.0 } } }, ["10", 0]);
}

function withVae(prefix, vae) {
  return workflow(prefix, "tiny.safetensors", { 10: { class_type: "VAELoader", inputs: { vae_name: vae } } },
    ["4", 0], ["10", 0]);
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

async function pixels(srv, prompt) {
  const h = await runToEnd(srv, prompt);
  assert.equal(h.status.status_str, "success", JSON.stringify(h.status));
  const img = h.outputs["9"].images[0];
  return L.decodePng(fs.readFileSync(path.join(srv.dir, "output", img.subfolder, img.filename))).pixels;
}

describe("PyTorch .ckpt/.pt checkpoints end to end", () => {
  let S = null, skip = null;

  before(async () => {
    if (!fs.existsSync(gen)) { skip = `no ${gen}`; return; }
    if (spawnSync(python, ["--version"]).status !== 0) { skip = `no ${python}`; return; }
    fs.rmSync(PWNED, { force: true });
    S = await L.startLatentd({
      setup: (dir) => {
        const ck = path.join(dir, "models", "checkpoints"), lo = path.join(dir, "models", "loras");
        const vae = path.join(dir, "models", "vae");
        fs.mkdirSync(lo, { recursive: true });
        fs.mkdirSync(vae, { recursive: true });
        // gen_ckpt's tiny config states its CLIP head count in __metadata__, which a torch
        // file cannot carry: the twin is the same tensors without it, as real files are.
        const made = path.join(dir, "gen.safetensors");
        run(gen, ["--tiny", made]);
        run(python, [ptWrite, "strip", made, path.join(ck, "tiny.safetensors")]);
        run(python, [ptWrite, "convert", made, path.join(ck, "tiny.ckpt"), "--nested"]);
        run(python, [ptWrite, "lora", made, lo]);
        run(gen, ["--tiny", "--vae-only", "--seed", "7", path.join(vae, "mine.safetensors")]);
        run(python, [ptWrite, "convert", path.join(vae, "mine.safetensors"), path.join(vae, "mine.pt")]);
        fs.copyFileSync(hostile, path.join(ck, "evil.ckpt"));
      },
    });
    const info = (await L.request(S, "GET", "/object_info")).json();
    if (!info.CheckpointLoaderSimple || !info.LoraLoader || !info.VAELoader) skip = "SD1.5 nodes not registered";
  });

  after(async () => {
    if (!S) return;
    const r = await S.stop();
    const log = S.log();
    L.removeDir(S.dir);
    assert.deepEqual(r, { code: 0, signal: null }, log.slice(-3000));
  });

  it("lists .ckpt, .pt and .safetensors files as ComfyUI does", async (t) => {
    if (skip) { t.skip(skip); return; }
    const c = (await L.request(S, "GET", "/object_info/CheckpointLoaderSimple")).json().CheckpointLoaderSimple;
    assert.deepEqual(c.input.required.ckpt_name[0], ["evil.ckpt", "tiny.ckpt", "tiny.safetensors"]);
    const l = (await L.request(S, "GET", "/object_info/LoraLoader")).json().LoraLoader;
    assert.deepEqual(l.input.required.lora_name[0], ["lora.pt", "lora.safetensors"]);
  });

  it("a .ckpt saves exactly the pixels of its .safetensors twin", async (t) => {
    if (skip) { t.skip(skip); return; }
    const a = await pixels(S, workflow("st", "tiny.safetensors"));
    const b = await pixels(S, workflow("pt", "tiny.ckpt"));
    assert.equal(a.length, 64 * 64 * 3);
    assert.ok(a.equals(b), "tiny.ckpt and tiny.safetensors give the same image");
  });

  it("a LoRA .pt patches as its .safetensors twin", async (t) => {
    if (skip) { t.skip(skip); return; }
    const plain = await pixels(S, workflow("plain", "tiny.ckpt"));
    const a = await pixels(S, withLora("lora_st", "tiny.ckpt", "lora.safetensors"));
    const b = await pixels(S, withLora("lora_pt", "tiny.ckpt", "lora.pt"));
    assert.ok(a.equals(b), "lora.pt and lora.safetensors give the same image");
    assert.ok(!a.equals(plain), "and the LoRA changes the image");
  });

  it("a VAE .pt decodes as its .safetensors twin", async (t) => {
    if (skip) { t.skip(skip); return; }
    const a = await pixels(S, withVae("vae_st", "mine.safetensors"));
    const b = await pixels(S, withVae("vae_pt", "mine.pt"));
    assert.ok(a.equals(b), "mine.pt and mine.safetensors decode alike");
  });

  it("a pickle calling os.system is refused at its GLOBAL, nothing runs, the server goes on", async (t) => {
    if (skip) { t.skip(skip); return; }
    const h = await runToEnd(S, workflow("evil", "evil.ckpt"));
    assert.equal(h.status.status_str, "error");
    const [type, data] = h.status.messages.at(-1);
    assert.equal(type, "execution_error");
    assert.equal(data.node_id, "4");
    assert.match(data.exception_message, /evil\.ckpt.*global 'posix\.system' refused: module 'posix' is blocked/);
    assert.ok(!fs.existsSync(PWNED), `${PWNED} was not created`);
    const s = await L.request(S, "GET", "/system_stats");
    assert.equal(s.status, 200);
  });
});

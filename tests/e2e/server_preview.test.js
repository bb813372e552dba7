// e2e: binary preview frames (comfy-api.md §4.6) and per-step message order, using the
// default SD1.5 graph with a tiny random-weight checkpoint (tools/gen_ckpt) at 64x64, two
// steps, --preview-method latent2rgb. A legacy client gets type-1 frames
// [u32 1][u32 1][JPEG]; a client that negotiated supports_preview_metadata gets type-4
// frames [u32 4][u32 len][json][JPEG] instead, never both. Skips when gen_ckpt or the
// sampler nodes are not built yet.
"use strict";
const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("fs");
const path = require("path");
const { spawnSync } = require("child_process");
const L = require("./lib/latentd.js");

const gen = process.env.LATENTD_GEN_CKPT || path.join(path.dirname(L.latentdBin()), "gen_ckpt");

// The default workflow (spec/default_workflow_api.json), scaled down.
function workflow(seed = 156680208700286) {
  return {
    3: { class_type: "KSampler", inputs: { seed, steps: 2, cfg: 8, sampler_name: "euler", scheduler: "normal",
      denoise: 1, model: ["4", 0], positive: ["6", 0], negative: ["7", 0], latent_image: ["5", 0] } },
    4: { class_type: "CheckpointLoaderSimple", inputs: { ckpt_name: "tiny.safetensors" } },
    5: { class_type: "EmptyLatentImage", inputs: { width: 64, height: 64, batch_size: 1 } },
    6: { class_type: "CLIPTextEncode", inputs: { text: "beautiful scenery nature glass bottle landscape, , purple galaxy bottle,", clip: ["4", 1] } },
    7: { class_type: "CLIPTextEncode", inputs: { text: "text, watermark", clip: ["4", 1] } },
    8: { class_type: "VAEDecode", inputs: { samples: ["3", 0], vae: ["4", 2] } },
    9: { class_type: "SaveImage", inputs: { filename_prefix: "preview", images: ["8", 0] } },
  };
}

test("type-1 and type-4 preview frames, progress order", async (t) => {
  if (!fs.existsSync(gen)) { t.skip(`no ${gen}`); return; }
  const srv = await L.startLatentd({
    args: ["--preview-method", "latent2rgb", "--preview-size", "128"],
    setup(dir) {
      const r = spawnSync(gen, ["--tiny", path.join(dir, "models", "checkpoints", "tiny.safetensors")], { encoding: "utf8" });
      if (r.status !== 0) throw new Error(`gen_ckpt failed: ${r.stderr}`);
    },
  });
  try {
    const info = (await L.request(srv, "GET", "/object_info")).json();
    const need = ["KSampler", "CheckpointLoaderSimple", "CLIPTextEncode", "VAEDecode", "EmptyLatentImage"];
    if (need.some((n) => !info[n])) { t.skip("sampler nodes not registered yet"); return; }
    const legacy = await L.openWs(srv, { clientId: "legacy" });
    const meta = await L.openWs(srv, { clientId: "meta" });
    meta.send({ type: "feature_flags", data: { supports_preview_metadata: true } });
    await meta.waitFor((m) => m.type === "feature_flags");
    // Different seeds: an identical second prompt would be served from the cache and
    // sample nothing, so its client would get no previews.
    for (const [c, id, seed] of [[legacy, "legacy", 1], [meta, "meta", 2]]) {
      const r = await L.postPrompt(srv, workflow(seed), { client_id: id, prompt_id: `pv-${id}` });
      assert.equal(r.status, 200, r.text);
      const done = await c.waitFor((m) => m.type === "executing" && m.data.node === null, 120000);
      assert.equal(done.data.prompt_id, `pv-${id}`);
      assert.ok(!c.messages.some((m) => m.type === "execution_error"), JSON.stringify(c.messages.find((m) => m.type === "execution_error")));
    }
    const lb = legacy.messages.filter((m) => m.binary).map((m) => m.binary);
    const mb = meta.messages.filter((m) => m.binary).map((m) => m.binary);
    assert.ok(lb.length >= 2, `legacy got ${lb.length} previews`);
    assert.ok(mb.length >= 2, `meta got ${mb.length} previews`);
    for (const b of lb) {
      assert.equal(b.readUInt32BE(0), 1, "type 1 for legacy clients");
      assert.equal(b.readUInt32BE(4), 1, "JPEG");
      assert.deepEqual([...b.subarray(8, 11)], [0xff, 0xd8, 0xff]);
    }
    for (const b of mb) {
      assert.equal(b.readUInt32BE(0), 4, "type 4 for metadata clients");
      const n = b.readUInt32BE(4);
      const j = JSON.parse(b.subarray(8, 8 + n).toString());
      assert.deepEqual(Object.keys(j).sort(), ["display_node_id", "image_type", "node_id", "parent_node_id", "prompt_id", "real_node_id"]);
      assert.equal(j.prompt_id, "pv-meta");
      assert.equal(j.node_id, "3");
      assert.equal(j.image_type, "image/jpeg");
      assert.deepEqual([...b.subarray(8 + n, 8 + n + 3)], [0xff, 0xd8, 0xff]);
    }
    // Per step: progress_state precedes progress; legacy previews follow progress.
    const seq = legacy.messages.map((m) => (m.binary ? "bin" : m.type)).filter((x) => ["progress_state", "progress", "bin"].includes(x));
    const firstProgress = seq.indexOf("progress");
    assert.ok(firstProgress > 0 && seq[firstProgress - 1] === "progress_state", seq.join(" "));
    assert.equal(seq[firstProgress + 1], "bin", seq.join(" "));
    await legacy.close(); await meta.close();
    const code = (await srv.stop()).code;
    assert.equal(code, 0, `exit status after a full txt2img run:\n${srv.log().slice(-3000)}`);
  } finally {
    await srv.stop();
    L.removeDir(srv.dir);
  }
});

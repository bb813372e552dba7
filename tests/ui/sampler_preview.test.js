// The default SD1.5 graph with a tiny random-weight checkpoint (tools/gen_ckpt): while the
// KSampler runs, per-step progress shows in the top bar and on the node, and the live
// preview (binary WS frames, --preview-method latent2rgb) is drawn on the KSampler node;
// the decoded image then appears on SaveImage. Skipped until the server has the SD nodes.
"use strict";
process.env.UI_TEST_NAME = "sampler_preview";
const fs = require("fs");
const path = require("path");
const { spawnSync } = require("child_process");
const { test, before, after } = require("node:test");
const assert = require("node:assert");
const h = require("./helpers.js");

const NODES = ["CheckpointLoaderSimple", "CLIPTextEncode", "KSampler", "EmptyLatentImage", "VAEDecode", "SaveImage"];
let srv, ui;
before(async () => {
  const gen = process.env.LATENTD_GEN_CKPT || path.resolve(__dirname, "../../build/gen_ckpt");
  if (!fs.existsSync(gen)) h.skipFile(`no checkpoint generator at ${gen}`);
  srv = await h.startLatentd({
    args: ["--preview-method", "latent2rgb"],
    setup: (dir) => {
      const r = spawnSync(gen, ["--tiny", path.join(dir, "models/checkpoints/tiny-ui.safetensors")], { encoding: "utf8" });
      if (r.status !== 0) throw new Error(`gen_ckpt failed: ${r.stderr}`);
    },
  });
  const info = await h.objectInfo(srv.url);
  const missing = NODES.filter((n) => !info[n]);
  if (missing.length) { await srv.stop(); h.skipFile(`the server has no ${missing.join(", ")} node(s) yet`); }
  ui = await h.openPage(srv.url);
});
after(async () => { if (ui) await ui.browser.close(); if (srv) await srv.stop(); });

test("default graph runs with progress and a live preview on the sampler", async () => {
  const { page } = ui;
  await page.evaluate(() => window.app.loadDefault()); // (a fresh page has it already; this waits for it)
  const ckpt = await page.evaluate(() => window.app.graph.getNodeById(4).widgets[0].value);
  assert.strictEqual(ckpt, "tiny-ui.safetensors", "the default graph picked the installed checkpoint");
  await page.evaluate(() => {
    const set = (id, name, v) => { window.app.graph.getNodeById(id).widgets.find((w) => w.name === name).value = v; };
    set(3, "steps", 6); set(5, "width", 64); set(5, "height", 64); set(9, "filename_prefix", "ui_sampler");
  });
  await page.click("#btn-queue");
  const prog = await h.waitForEvent(page, "progress", "d.node === '3' && d.value >= 2", 120000);
  assert.strictEqual(prog.max, 6);
  await page.waitForFunction(() => window.__events.some((e) => e.type === "b_preview"), null, { timeout: 60000 });
  await page.waitForFunction(() => !!window.app.graph.getNodeById(3).previewImg, null, { timeout: 10000 });
  await h.screenshot(page, "sampler_preview_running");
  await h.waitForEvent(page, "executed", "d.node === '9'", 120000);
  await page.waitForFunction(() => { const i = window.app.graph.getNodeById(9).imgs?.[0]; return i && i.complete && i.naturalWidth === 64; }, null, { timeout: 10000 });
  const texts = await page.evaluate(() => window.__events.filter((e) => e.type === "progress" && e.data.node === "3").map((e) => e.data.value));
  assert.deepStrictEqual(texts, [1, 2, 3, 4, 5, 6]);
  await h.screenshot(page, "sampler_preview");
  assert.deepStrictEqual(ui.errors, []);
});

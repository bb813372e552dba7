// Dropping a PNG written by latentd restores its workflow (tEXt "workflow"); a PNG that only
// has the API prompt (tEXt "prompt") is rebuilt from that.
"use strict";
process.env.UI_TEST_NAME = "png_drop";
const { test, before, after } = require("node:test");
const assert = require("node:assert");
const h = require("./helpers.js");

let srv, ui;
before(async () => {
  srv = await h.startLatentd();
  h.requireNodes(await h.objectInfo(srv.url), ["EmptyImage", "SaveImage"]);
  ui = await h.openPage(srv.url);
});
after(async () => { if (ui) await ui.browser.close(); if (srv) await srv.stop(); });

async function drop(page, buf, name) {
  await page.evaluate(({ b64, name }) => {
    const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    const dt = new DataTransfer();
    dt.items.add(new File([bytes], name, { type: "image/png" }));
    const c = window.app.canvas.canvas; const r = c.getBoundingClientRect();
    c.dispatchEvent(new DragEvent("drop", { dataTransfer: dt, bubbles: true, cancelable: true, clientX: r.right - 8, clientY: r.bottom - 8 }));
  }, { b64: buf.toString("base64"), name });
}

function summary(page) {
  return page.evaluate(() => window.app.graph._nodes.map((n) => `${n.type}:${(n.widgets || []).filter((w) => w.options?.serialize !== false).map((w) => w.value).join(",")}`).sort());
}

test("drop a saved PNG to restore its workflow", async () => {
  const { page } = ui;
  await h.loadPrompt(page, {
    "1": { class_type: "EmptyImage", inputs: { width: 72, height: 40, batch_size: 1, color: 0x102030 } },
    "2": { class_type: "SaveImage", inputs: { images: ["1", 0], filename_prefix: "ui_drop" } },
  });
  // Move a node so the restored layout can be told apart from a fresh auto-layout.
  await page.evaluate(() => { window.app.graph.getNodeById(2).pos = [777, 333]; });
  const want = await summary(page);
  await page.click("#btn-queue");
  const ex = await h.waitForEvent(page, "executed", "d.node === '2'");
  const img = ex.output.images[0];
  const res = await fetch(`${srv.url}/api/view?` + new URLSearchParams({ filename: img.filename, subfolder: img.subfolder, type: img.type }));
  assert.strictEqual(res.status, 200);
  const png = Buffer.from(await res.arrayBuffer());
  const text = h.pngText(png);
  assert.ok(text.workflow, "the saved PNG carries the workflow chunk");
  assert.ok(text.prompt, "the saved PNG carries the prompt chunk");

  await page.click("#btn-default");
  await page.waitForFunction(() => window.app.graph._nodes.length === 7);
  assert.notDeepStrictEqual(await summary(page), want);
  await drop(page, png, img.filename);
  await page.waitForFunction(() => window.app.graph._nodes.length === 2, null, { timeout: 10000 });
  assert.deepStrictEqual(await summary(page), want);
  const pos = await page.evaluate(() => Array.from(window.app.graph.getNodeById(2).pos).slice(0, 2));
  assert.deepStrictEqual(pos, [777, 333], "layout restored from the workflow chunk");
  await h.screenshot(page, "png_drop");

  // Same PNG without its workflow chunk: the API prompt is used.
  await page.click("#btn-default");
  await page.waitForFunction(() => window.app.graph._nodes.length === 7);
  await drop(page, h.pngWithoutText(png, "workflow"), "prompt-only.png");
  await page.waitForFunction(() => window.app.graph._nodes.length === 2, null, { timeout: 10000 });
  assert.deepStrictEqual(await summary(page), want);
  await h.screenshot(page, "png_drop_prompt_only");

  // A PNG with neither is refused with a message, and the graph is kept.
  await drop(page, h.encodePng(4, 4, () => [0, 0, 0]), "plain.png");
  await page.waitForSelector("#error-dialog:not([hidden])");
  assert.match(await page.textContent("#error-message"), /no workflow or prompt/);
  assert.deepStrictEqual(await summary(page), want);
  assert.deepStrictEqual(ui.errors, []);
});

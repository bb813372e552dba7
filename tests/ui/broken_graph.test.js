// A graph the server rejects: the offending nodes are outlined in red on the canvas, the
// offending widget/input is marked, and the error dialog names node, class and message.
"use strict";
process.env.UI_TEST_NAME = "broken_graph";
const { test, before, after } = require("node:test");
const assert = require("node:assert");
const h = require("./helpers.js");

let srv, ui;
before(async () => {
  srv = await h.startLatentd();
  h.requireNodes(await h.objectInfo(srv.url), ["EmptyImage", "ImageInvert", "SaveImage"]);
  ui = await h.openPage(srv.url);
});
after(async () => { if (ui) await ui.browser.close(); if (srv) await srv.stop(); });

// Is there a strongly red pixel in a small box around a canvas-space point?
async function redNear(page, nodeId, lx, ly) {
  return page.evaluate(({ nodeId, lx, ly }) => {
    const app = window.app; const n = app.graph.getNodeById(nodeId);
    app.canvas.draw(true, true);
    const p = app.canvas.ds.convertOffsetToCanvas([n.pos[0] + lx, n.pos[1] + ly]);
    const ctx = app.canvas.canvas.getContext("2d");
    const d = ctx.getImageData(Math.round(p[0]) - 6, Math.round(p[1]) - 6, 12, 12).data;
    for (let i = 0; i < d.length; i += 4) if (d[i] > 200 && d[i + 1] < 90 && d[i + 2] < 90) return true;
    return false;
  }, { nodeId, lx, ly });
}

test("validation errors highlight the offending nodes and inputs", async () => {
  const { page } = ui;
  await h.loadPrompt(page, {
    "1": { class_type: "EmptyImage", inputs: { width: 999999, height: 64, batch_size: 1, color: 0 } },
    "2": { class_type: "SaveImage", inputs: { images: ["1", 0], filename_prefix: "ui_broken" } },
    "3": { class_type: "ImageInvert", inputs: {} },
    "4": { class_type: "SaveImage", inputs: { images: ["3", 0], filename_prefix: "ui_broken" } },
  });
  assert.ok(await redNear(page, 1, -4, 20) === false, "no red outline before queueing");
  await page.click("#btn-queue");
  await page.waitForSelector("#error-dialog:not([hidden])", { timeout: 10000 });
  const errs = await page.evaluate(() => window.app.nodeErrors);
  assert.deepStrictEqual(Object.keys(errs).sort(), ["1", "3"], "errors reported on the two offending nodes only");
  assert.strictEqual(errs["1"].errors[0].extra_info.input_name, "width");
  assert.strictEqual(errs["3"].errors[0].type, "required_input_missing");
  const text = await page.textContent("#error-dialog");
  assert.match(text, /Prompt outputs failed validation/);
  assert.match(text, /EmptyImage/);
  assert.match(text, /bigger than max/);
  assert.match(text, /Required input is missing/);
  await h.screenshot(page, "broken_graph_dialog");
  await page.click("#error-close");
  // Outline: the node's left border, half-way down; the width widget's box is marked too.
  assert.ok(await redNear(page, 1, -4, 20), "EmptyImage outlined in red");
  assert.ok(await redNear(page, 3, -4, 10), "ImageInvert outlined in red");
  const wy = await page.evaluate(() => { const w = window.app.graph.getNodeById(1).widgets.find((x) => x.name === "width"); return w.last_y; });
  assert.ok(await redNear(page, 1, 10, wy + 10), "width widget marked");
  assert.ok(!(await redNear(page, 2, -4, 20)), "the valid SaveImage is not outlined");
  await h.screenshot(page, "broken_graph");
  // No job was created.
  const q = await (await fetch(`${srv.url}/api/queue`)).json();
  assert.strictEqual(q.queue_running.length + q.queue_pending.length, 0);
  assert.deepStrictEqual(ui.errors, []);
});

test("an execution error is shown with its message on the failing node", async () => {
  const { page } = ui;
  // A file that exists (so validation passes) but is not an image: LoadImage fails at run time.
  const form = new FormData();
  form.append("image", new Blob([Buffer.from("this is not a png")], { type: "image/png" }), "not-an-image.png");
  const up = await fetch(`${srv.url}/api/upload/image`, { method: "POST", body: form });
  assert.strictEqual(up.status, 200);
  await h.loadPrompt(page, {
    "1": { class_type: "LoadImage", inputs: { image: "not-an-image.png" } },
    "2": { class_type: "SaveImage", inputs: { images: ["1", 0], filename_prefix: "ui_exec_error" } },
  });
  await page.click("#btn-queue");
  const err = await h.waitForEvent(page, "execution_error", "true", 30000);
  assert.strictEqual(err.node_id, "1");
  await page.waitForSelector("#error-dialog:not([hidden])", { timeout: 10000 });
  const text = await page.textContent("#error-dialog");
  assert.match(text, /LoadImage/);
  assert.ok(text.includes(err.exception_message.trim().split("\n")[0]), "the exception message is shown");
  await h.screenshot(page, "execution_error_dialog");
  await page.click("#error-close");
  assert.ok(await redNear(page, 1, -4, 20), "LoadImage outlined in red");
  // The history panel shows the failure too.
  await page.click('#tabs button[data-tab="history"]');
  const item = page.locator(`#history-list .item[data-prompt-id="${err.prompt_id}"] .err`);
  await item.waitFor({ timeout: 10000 });
  assert.match(await item.textContent(), /LoadImage #1/);
  await h.screenshot(page, "execution_error");
  assert.deepStrictEqual(ui.errors, []);
});

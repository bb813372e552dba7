// A long run is stopped by the Interrupt button: the page gets execution_interrupted, the
// output node never produces an image, history records the run as interrupted, and a
// pending prompt can be deleted from the queue panel while the first one runs.
"use strict";
process.env.UI_TEST_NAME = "interrupt";
const { test, before, after } = require("node:test");
const assert = require("node:assert");
const h = require("./helpers.js");

let srv, ui, info;
before(async () => {
  srv = await h.startLatentd();
  info = await h.objectInfo(srv.url);
  h.requireNodes(info, ["EmptyImage", "ImageScale", "ImageInvert", "SaveImage"]);
  ui = await h.openPage(srv.url);
});
after(async () => { if (ui) await ui.browser.close(); if (srv) await srv.stop(); });

// A chain of big resizes: seconds of work on any CPU, with node boundaries where the
// interrupt flag is checked.
function longPrompt(seedColor) {
  const methods = info.ImageScale.input.required.upscale_method[0];
  const method = methods.includes("bicubic") ? "bicubic" : methods[0];
  const p = { "1": { class_type: "EmptyImage", inputs: { width: 2048, height: 2048, batch_size: 1, color: seedColor } } };
  let prev = "1";
  for (let i = 0; i < 12; i++) {
    const id = String(10 + i);
    const s = i % 2 ? 2048 + i : 2900 + i;
    p[id] = { class_type: "ImageScale", inputs: { image: [prev, 0], upscale_method: method, width: s, height: s, crop: "disabled" } };
    prev = id;
  }
  p["2"] = { class_type: "ImageInvert", inputs: { image: [prev, 0] } };
  p["3"] = { class_type: "SaveImage", inputs: { images: ["2", 0], filename_prefix: "ui_interrupt" } };
  return p;
}

test("interrupt stops a long run; queue panel deletes a pending prompt", async () => {
  const { page } = ui;
  await h.loadPrompt(page, longPrompt(1234));
  await page.fill("#batch-count", "2");
  await page.click("#btn-queue");
  await page.fill("#batch-count", "1");
  // The first prompt is running and the second is pending: both are in the queue panel.
  await page.click('#tabs button[data-tab="queue"]');
  await page.waitForSelector("#queue-list .item.running", { timeout: 20000 });
  await page.waitForSelector("#queue-list .item.pending", { timeout: 20000 });
  const pendingId = await page.getAttribute("#queue-list .item.pending", "data-prompt-id");
  await page.click("#queue-list .item.pending button:text('delete')");
  await page.waitForFunction((id) => !document.querySelector(`#queue-list .item[data-prompt-id="${id}"]`), pendingId, { timeout: 10000 });
  const q = await (await fetch(`${srv.url}/api/queue`)).json();
  assert.ok(!q.queue_pending.some((i) => i[1] === pendingId), "pending prompt deleted on the server");

  // Wait until a resize node is executing, then press Interrupt.
  const exec = await h.waitForEvent(page, "executing", "d.node === '10' || d.node === '11'", 60000);
  const pid = exec.prompt_id;
  await h.screenshot(page, "interrupt_running");
  await page.click("#btn-interrupt");
  const intr = await h.waitForEvent(page, "execution_interrupted", `d.prompt_id === '${pid}'`, 60000);
  assert.ok(intr.node_id, "interrupted at a node");
  await h.waitForEvent(page, "executing", `d.node === null && d.prompt_id === '${pid}'`, 30000);
  const evs = await page.evaluate((pid) => window.__events.filter((e) => e.data.prompt_id === pid).map((e) => e.type), pid);
  assert.ok(!evs.includes("execution_success"), "no success after interrupt");
  assert.ok(!evs.includes("executed"), "SaveImage never ran");
  // The pending prompt was deleted, so nothing else ran.
  assert.ok(!(await page.evaluate((id) => window.__events.some((e) => e.data.prompt_id === id), pendingId)));

  await page.click('#tabs button[data-tab="history"]');
  const item = page.locator(`#history-list .item[data-prompt-id="${pid}"]`);
  await item.waitFor({ timeout: 10000 });
  assert.match(await item.textContent(), /interrupted|error/);
  assert.match(await page.textContent("#status-text"), /interrupted/);
  await h.screenshot(page, "interrupt");
  assert.deepStrictEqual(ui.errors, []);
});

// Edit a widget through the canvas (click the number widget, type into litegraph's prompt),
// press Queue: the image appears on the SaveImage node, in the gallery and in the history
// panel, with the edited size; progress is shown while it runs.
"use strict";
process.env.UI_TEST_NAME = "queue_image";
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

test("edit a widget, queue, see the image on the node and in history", async () => {
  const { page } = ui;
  await h.loadPrompt(page, {
    "1": { class_type: "EmptyImage", inputs: { width: 64, height: 48, batch_size: 1, color: 0x3366cc } },
    "2": { class_type: "ImageInvert", inputs: { image: ["1", 0] } },
    "3": { class_type: "SaveImage", inputs: { images: ["2", 0], filename_prefix: "ui_queue" } },
    "4": { class_type: "PreviewImage", inputs: { images: ["1", 0] } },
  });
  await page.waitForTimeout(200); // one frame so widgets have positions
  // Click the middle of EmptyImage's width widget: litegraph opens its value prompt.
  const c = await h.widgetCenter(page, 1, "width");
  await page.mouse.click(c.x, c.y);
  const input = page.locator(".graphdialog input").first();
  await input.waitFor({ timeout: 5000 });
  await input.fill("80");
  await input.press("Enter");
  const width = await page.evaluate(() => window.app.graph.getNodeById(1).widgets.find((w) => w.name === "width").value);
  assert.strictEqual(width, 80, "the edited widget holds the typed value");

  // Record the progress text while it runs.
  await page.evaluate(() => {
    window.__progressTexts = [];
    new MutationObserver(() => window.__progressTexts.push(document.getElementById("progress-text").textContent))
      .observe(document.getElementById("progress-text"), { childList: true, characterData: true, subtree: true });
  });
  await page.click("#btn-queue");
  const done = await h.waitForEvent(page, "executing", "d.node === null");
  assert.ok(done.prompt_id);
  const executed = await h.waitForEvent(page, "executed", "d.node === '3'");
  assert.strictEqual(executed.output.images.length, 1);

  // The SaveImage node shows the image, at the edited size.
  await page.waitForFunction(() => { const n = window.app.graph.getNodeById(3); return n.imgs && n.imgs[0] && n.imgs[0].complete && n.imgs[0].naturalWidth > 0; });
  const size = await page.evaluate(() => { const i = window.app.graph.getNodeById(3).imgs[0]; return [i.naturalWidth, i.naturalHeight]; });
  assert.deepStrictEqual(size, [80, 48]);
  // ... and its pixels are the inverted colour (0x3366cc -> 0xcc9933).
  const px = await page.evaluate(() => {
    const i = window.app.graph.getNodeById(3).imgs[0]; const c = document.createElement("canvas"); c.width = i.naturalWidth; c.height = i.naturalHeight;
    const x = c.getContext("2d"); x.drawImage(i, 0, 0); return Array.from(x.getImageData(10, 10, 1, 1).data.slice(0, 3));
  });
  for (const [a, b] of px.map((v, k) => [v, [0xcc, 0x99, 0x33][k]])) assert.ok(Math.abs(a - b) <= 2, `pixel ${px} ~ cc9933`);

  // PreviewImage shows its temp image (the un-inverted colour).
  await page.waitForFunction(() => { const n = window.app.graph.getNodeById(4); return n.imgs && n.imgs[0] && n.imgs[0].complete && n.imgs[0].naturalWidth > 0; });
  assert.match(await page.evaluate(() => window.app.graph.getNodeById(4).imgs[0].src), /type=temp/);

  // History panel lists the prompt with a thumbnail; the gallery has the image.
  await page.click('#tabs button[data-tab="history"]');
  const item = page.locator(`#history-list .item[data-prompt-id="${done.prompt_id}"]`);
  await item.waitFor({ timeout: 10000 });
  await item.locator("img").first().waitFor();
  assert.match(await item.textContent(), /success/);
  // A history thumbnail opens the image large, with Save (download under its own name).
  await item.locator("img").first().click();
  await page.locator("#lightbox").waitFor();
  const [dl] = await Promise.all([page.waitForEvent("download"), page.click("#lightbox button[data-act='save']")]);
  assert.match(dl.suggestedFilename(), /^ui_queue_\d+_\.png$/);
  assert.strictEqual(await page.isVisible("#lightbox"), true, "an action leaves the view open");
  await h.screenshot(page, "image_actions_lightbox");
  await page.click("#lightbox img");
  await page.locator("#lightbox").waitFor({ state: "hidden" });
  const gallery = await page.evaluate(() => window.app.panels.gallery.map((i) => i.filename));
  assert.ok(gallery.includes(executed.output.images[0].filename));

  // Progress was shown: the text named a running node, and per-node progress_state arrived.
  const texts = await page.evaluate(() => window.__progressTexts);
  assert.ok(texts.some((t) => /Invert Image|Save Image|EmptyImage|Empty Image/.test(t)), `progress text seen: ${JSON.stringify(texts)}`);
  const states = await page.evaluate(() => window.__events.filter((e) => e.type === "progress_state").length);
  assert.ok(states > 0, "progress_state events reached the page");
  await page.evaluate(() => window.app.graph.getNodeById(3).setDirtyCanvas(true, true));
  await page.waitForTimeout(100);
  await h.screenshot(page, "queue_image");
  assert.deepStrictEqual(ui.errors, []);
});

// Right-click a node that shows an image: Open / Save / Copy Image (ComfyUI's node menu).
async function nodeMenu(page, id, entry) {
  const p = await h.titlePos(page, id);
  await page.mouse.click(p.x, p.y, { button: "right" });
  await page.locator(`.litemenu-entry:has-text("${entry}")`).first().click();
}

test("image actions: open, save and copy the output and the preview image", async () => {
  const { page } = ui;
  const want = await page.evaluate(() => decodeURIComponent(/filename=([^&]+)/.exec(window.app.graph.getNodeById(3).imgs[0].src)[1]));
  const [dl] = await Promise.all([page.waitForEvent("download"), nodeMenu(page, 3, "Save Image")]);
  assert.strictEqual(dl.suggestedFilename(), want, "saved under the output's file name");
  const saved = require("fs").readFileSync(await dl.path());
  assert.strictEqual(saved.readUInt32BE(16), 80, "the downloaded file is the 80 px wide PNG");
  const [popup] = await Promise.all([page.context().waitForEvent("page"), nodeMenu(page, 4, "Open Image")]);
  await popup.waitForLoadState();
  assert.match(popup.url(), /\/api\/view\?.*type=temp/, "PreviewImage's temp image opens in a new tab");
  await popup.close();
  await page.context().grantPermissions(["clipboard-read", "clipboard-write"], { origin: srv.url });
  await nodeMenu(page, 3, "Copy Image");
  await page.waitForFunction(() => /copied/.test(document.getElementById("status-text").textContent));
  const clip = await page.evaluate(async () => {
    const items = await navigator.clipboard.read();
    const blob = await items[0].getType("image/png");
    const bmp = await createImageBitmap(blob);
    return [items[0].types, bmp.width, bmp.height];
  });
  assert.deepStrictEqual(clip, [["image/png"], 80, 48]);
  const p = await h.titlePos(page, 3);
  await page.mouse.click(p.x, p.y, { button: "right" });
  await page.locator('.litemenu-entry:has-text("Copy Image")').waitFor();
  await h.screenshot(page, "image_actions_menu");
  await page.waitForTimeout(350); // not a double click
  const box = await page.evaluate(() => window.app.canvas.canvas.getBoundingClientRect().toJSON());
  await page.mouse.click(box.left + 10, box.bottom - 10); // empty canvas, away from the menu: closes it
  await page.locator(".litecontextmenu").waitFor({ state: "detached" });
});

test("a history entry's workflow can be loaded back", async () => {
  const { page } = ui;
  const want = await page.evaluate(() => window.app.graph._nodes.map((n) => n.type).sort());
  await page.click("#btn-default");
  await page.waitForFunction(() => window.app.graph._nodes.length === 7);
  await page.click('#tabs button[data-tab="history"]');
  await page.locator("#history-list .item button:text('load')").first().click();
  await page.waitForFunction(() => window.app.graph._nodes.length === 4);
  assert.deepStrictEqual(await page.evaluate(() => window.app.graph._nodes.map((n) => n.type).sort()), want);
  const w = await page.evaluate(() => window.app.graph.getNodeById(1).widgets.find((x) => x.name === "width").value);
  assert.strictEqual(w, 80, "the edited value comes back with the workflow");
});

test("a widget converted to an input is fed by a link; seed control increments", async (t) => {
  const { page } = ui;
  const has = await page.evaluate(() => !!window.app.objectInfo.PrimitiveInt);
  if (!has) return t.skip("no PrimitiveInt node on this server");
  await h.loadPrompt(page, {
    "1": { class_type: "EmptyImage", inputs: { width: 64, height: 20, batch_size: 1, color: 0 } },
    "2": { class_type: "PrimitiveInt", inputs: { value: 44 } },
    "3": { class_type: "SaveImage", inputs: { images: ["1", 0], filename_prefix: "ui_convert" } },
  });
  await page.waitForTimeout(200);
  // Right-click EmptyImage's title, pick "Convert width to input" from the node menu.
  const p = await page.evaluate(() => { const app = window.app; const n = app.graph.getNodeById(1); const c = app.canvas.ds.convertOffsetToCanvas([n.pos[0] + 60, n.pos[1] - 12]); const r = app.canvas.canvas.getBoundingClientRect(); return { x: r.left + c[0], y: r.top + c[1] }; });
  await page.mouse.click(p.x, p.y, { button: "right" });
  await page.locator('.litemenu-entry:has-text("Convert width to input")').click();
  const linked = await page.evaluate(() => { const a = window.app.graph.getNodeById(2), b = window.app.graph.getNodeById(1); return !!a.connect(0, b, b.inputs.findIndex((i) => i.name === "width")); });
  assert.ok(linked, "INT output connects to the converted width socket");
  assert.ok(await page.evaluate(() => window.app.graph.getNodeById(1).widgets.find((w) => w.name === "width").disabled), "the fed widget is greyed out");
  // The Int node's control: increment after each queue.
  await page.evaluate(() => { window.app.graph.getNodeById(2).widgets.find((w) => w.name === "control_after_generate").value = "increment"; });
  await page.click("#btn-queue");
  const ex = await h.waitForEvent(page, "executed", "d.node === '3' && d.output.images[0].filename.startsWith('ui_convert')");
  assert.ok(ex);
  await page.waitForFunction(() => { const i = window.app.graph.getNodeById(3).imgs?.[0]; return i && i.complete && i.naturalWidth === 44 && i.naturalHeight === 20; }, null, { timeout: 10000 });
  assert.strictEqual(await page.evaluate(() => window.app.graph.getNodeById(2).widgets[0].value), 45);
  await h.screenshot(page, "queue_image_converted_widget");
});

test("Ctrl+B bypasses a node: its input passes through", async () => {
  const { page } = ui;
  await h.loadPrompt(page, {
    "1": { class_type: "EmptyImage", inputs: { width: 16, height: 16, batch_size: 1, color: 0x204060 } },
    "2": { class_type: "ImageInvert", inputs: { image: ["1", 0] } },
    "3": { class_type: "SaveImage", inputs: { images: ["2", 0], filename_prefix: "ui_bypass" } },
  });
  await page.waitForTimeout(100);
  // Click the ImageInvert title to select it, then Ctrl+B.
  const p = await page.evaluate(() => { const app = window.app; const n = app.graph.getNodeById(2); const c = app.canvas.ds.convertOffsetToCanvas([n.pos[0] + 40, n.pos[1] - 12]); const r = app.canvas.canvas.getBoundingClientRect(); return { x: r.left + c[0], y: r.top + c[1] }; });
  await page.mouse.click(p.x, p.y);
  await page.keyboard.press("Control+b");
  assert.strictEqual(await page.evaluate(() => window.app.graph.getNodeById(2).mode), 4);
  const api = await page.evaluate(async () => (await import("./js/workflow.js")).graphToPrompt(window.app.graph).output);
  assert.deepStrictEqual(Object.keys(api).sort(), ["1", "3"]);
  assert.deepStrictEqual(api["3"].inputs.images, ["1", 0]);
  await page.click("#btn-queue");
  await h.waitForEvent(page, "executed", "d.node === '3' && d.output.images[0].filename.startsWith('ui_bypass')");
  await page.waitForFunction(() => { const i = window.app.graph.getNodeById(3).imgs?.[0]; return i && i.complete && i.naturalWidth === 16; });
  const px = await page.evaluate(() => { const i = window.app.graph.getNodeById(3).imgs[0]; const c = document.createElement("canvas"); c.width = 16; c.height = 16; const x = c.getContext("2d"); x.drawImage(i, 0, 0); return Array.from(x.getImageData(4, 4, 1, 1).data.slice(0, 3)); });
  [0x20, 0x40, 0x60].forEach((v, k) => assert.ok(Math.abs(px[k] - v) <= 2, `not inverted: ${px}`));
  await h.screenshot(page, "queue_image_bypass");
});

test("history entries can be deleted and cleared", async () => {
  const { page } = ui;
  await page.click('#tabs button[data-tab="history"]');
  const first = page.locator("#history-list .item").first();
  await first.waitFor();
  const id = await first.getAttribute("data-prompt-id");
  await first.locator("button:text('delete')").click();
  await page.waitForFunction((id) => !document.querySelector(`#history-list .item[data-prompt-id="${id}"]`), id);
  assert.deepStrictEqual(await (await fetch(`${srv.url}/api/history/${id}`)).json(), {});
  await page.click("#btn-history-clear");
  await page.waitForSelector("#history-list .empty");
  assert.deepStrictEqual(await (await fetch(`${srv.url}/api/history`)).json(), {});
});

test("batch count queues that many prompts", async () => {
  const { page } = ui;
  await page.fill("#batch-count", "2");
  const before = await page.evaluate(() => window.__events.filter((e) => e.type === "execution_start").length);
  await page.click("#btn-queue");
  await page.waitForFunction((n) => window.__events.filter((e) => e.type === "execution_start").length >= n + 2, before, { timeout: 60000 });
  await page.fill("#batch-count", "1");
});

// LoadImage's upload button: the file chooser sends the image to /upload/image, the combo
// takes the stored name, the node shows it, and queueing LoadImage -> ImageInvert -> SaveImage
// produces the inverted upload.
"use strict";
process.env.UI_TEST_NAME = "upload";
const { test, before, after } = require("node:test");
const assert = require("node:assert");
const h = require("./helpers.js");

let srv, ui;
before(async () => {
  srv = await h.startLatentd();
  h.requireNodes(await h.objectInfo(srv.url), ["LoadImage", "ImageInvert", "SaveImage"]);
  ui = await h.openPage(srv.url);
});
after(async () => { if (ui) await ui.browser.close(); if (srv) await srv.stop(); });

const pixel = (page, expr) => page.evaluate((expr) => {
  const i = eval(expr); const c = document.createElement("canvas"); c.width = i.naturalWidth; c.height = i.naturalHeight;
  const x = c.getContext("2d"); x.drawImage(i, 0, 0);
  return { size: [i.naturalWidth, i.naturalHeight], rgb: Array.from(x.getImageData(5, 5, 1, 1).data.slice(0, 3)) };
}, expr);

test("upload an image from the LoadImage node and run it", async () => {
  const { page } = ui;
  const upload = h.encodePng(37, 23, () => [10, 200, 30]);
  // LoadImage needs a valid value only at queue time; start from whatever the list offers.
  await h.loadPrompt(page, {
    "1": { class_type: "LoadImage", inputs: { image: "" } },
    "2": { class_type: "ImageInvert", inputs: { image: ["1", 0] } },
    "3": { class_type: "SaveImage", inputs: { images: ["2", 0], filename_prefix: "ui_upload" } },
  });
  await page.waitForTimeout(200);
  const c = await h.widgetCenter(page, 1, "choose file to upload");
  const [chooser] = await Promise.all([page.waitForEvent("filechooser", { timeout: 10000 }), page.mouse.click(c.x, c.y)]);
  await chooser.setFiles({ name: "ui-upload.png", mimeType: "image/png", buffer: upload });
  await page.waitForFunction(() => window.app.graph.getNodeById(1).widgets[0].value === "ui-upload.png", null, { timeout: 10000 });
  // The server has the file, and the node shows it.
  const r = await fetch(`${srv.url}/api/view?filename=ui-upload.png&type=input`);
  assert.strictEqual(r.status, 200);
  assert.ok(Buffer.from(await r.arrayBuffer()).equals(upload), "uploaded bytes stored unchanged");
  await page.waitForFunction(() => { const i = window.app.graph.getNodeById(1).imgs?.[0]; return i && i.complete && i.naturalWidth > 0; });
  const shown = await pixel(page, "window.app.graph.getNodeById(1).imgs[0]");
  assert.deepStrictEqual(shown.size, [37, 23]);

  await page.click("#btn-queue");
  await h.waitForEvent(page, "executed", "d.node === '3'");
  await page.waitForFunction(() => { const i = window.app.graph.getNodeById(3).imgs?.[0]; return i && i.complete && i.naturalWidth > 0; });
  const out = await pixel(page, "window.app.graph.getNodeById(3).imgs[0]");
  assert.deepStrictEqual(out.size, [37, 23]);
  const want = [245, 55, 225];
  out.rgb.forEach((v, k) => assert.ok(Math.abs(v - want[k]) <= 2, `inverted pixel ${out.rgb} ~ ${want}`));
  await h.screenshot(page, "upload");
  assert.deepStrictEqual(ui.errors, []);
});

test("dropping an image file on the LoadImage node uploads it too", async () => {
  const { page } = ui;
  const img = h.encodePng(19, 11, () => [90, 90, 250]);
  await page.evaluate(({ b64 }) => {
    const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    const dt = new DataTransfer();
    dt.items.add(new File([bytes], "dropped.png", { type: "image/png" }));
    const app = window.app; const n = app.graph.getNodeById(1);
    const p = app.canvas.ds.convertOffsetToCanvas([n.pos[0] + n.size[0] / 2, n.pos[1] + 10]);
    const r = app.canvas.canvas.getBoundingClientRect();
    app.canvas.canvas.dispatchEvent(new DragEvent("drop", { dataTransfer: dt, bubbles: true, cancelable: true, clientX: r.left + p[0], clientY: r.top + p[1] }));
  }, { b64: img.toString("base64") });
  await page.waitForFunction(() => window.app.graph.getNodeById(1).widgets[0].value === "dropped.png", null, { timeout: 10000 });
  await page.waitForFunction(() => { const i = window.app.graph.getNodeById(1).imgs?.[0]; return i && i.complete && i.naturalWidth === 19; }, null, { timeout: 10000 });
  const r = await fetch(`${srv.url}/api/view?filename=dropped.png&type=input`);
  assert.strictEqual(r.status, 200);
  assert.strictEqual(await page.evaluate(() => window.app.graph._nodes.length), 3, "the graph was not replaced");
});

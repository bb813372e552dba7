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

// tEXt chunks inserted after IHDR, as ComfyUI writes them.
function withText(png, texts) {
  const zlib = require("zlib");
  const chunks = Object.entries(texts).map(([k, v]) => {
    const data = Buffer.from(k + "\0" + v, "latin1");
    const len = Buffer.alloc(4); len.writeUInt32BE(data.length);
    const td = Buffer.concat([Buffer.from("tEXt", "latin1"), data]);
    const crc = Buffer.alloc(4); crc.writeUInt32BE(zlib.crc32 ? zlib.crc32(td) : 0);
    return Buffer.concat([len, td, crc]);
  });
  return Buffer.concat([png.subarray(0, 33), ...chunks, png.subarray(33)]);
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
  await page.click("#error-close");
  assert.deepStrictEqual(await summary(page), want);
  assert.deepStrictEqual(ui.errors, []);
});

// A workflow in the shape ComfyUI's current frontend (1.2x) writes: a socket entry for every
// widget ({widget: {name}}), localized_name, cnr_id/ver properties, extra.frontendVersion.
function comfyFrontendWorkflow() {
  const w = (name, type) => ({ localized_name: name, name, type, widget: { name }, link: null });
  return {
    id: "5b0e2a4e-3f43-4c2f-9a35-6b1f0c0e9d11", revision: 0, last_node_id: 4, last_link_id: 3,
    nodes: [
      { id: 1, type: "EmptyImage", pos: [40, 60], size: [270, 130], flags: {}, order: 0, mode: 0,
        inputs: [{ ...w("width", "INT"), link: 3 }, w("height", "INT"), w("batch_size", "INT"), w("color", "INT")],
        outputs: [{ localized_name: "IMAGE", name: "IMAGE", type: "IMAGE", links: [1] }],
        properties: { cnr_id: "comfy-core", ver: "0.3.64", "Node name for S&R": "EmptyImage" },
        widgets_values: [999, 24, 1, 0x00ff00] }, // width comes from the link, not 999
      { id: 4, type: "PrimitiveInt", pos: [40, 260], size: [270, 82], flags: {}, order: 3, mode: 0,
        inputs: [w("value", "INT")],
        outputs: [{ localized_name: "INT", name: "INT", type: "INT", links: [3] }],
        properties: { cnr_id: "comfy-core", ver: "0.3.64", "Node name for S&R": "PrimitiveInt" },
        widgets_values: [56, "fixed"] },
      { id: 2, type: "ImageInvert", pos: [360, 60], size: [140, 26], flags: {}, order: 1, mode: 0,
        inputs: [{ localized_name: "image", name: "image", type: "IMAGE", link: 1 }],
        outputs: [{ localized_name: "IMAGE", name: "IMAGE", type: "IMAGE", links: [2] }],
        properties: { cnr_id: "comfy-core", ver: "0.3.64", "Node name for S&R": "ImageInvert" } },
      { id: 3, type: "SaveImage", pos: [560, 60], size: [270, 270], flags: {}, order: 2, mode: 0,
        inputs: [{ localized_name: "images", name: "images", type: "IMAGE", link: 2 }, w("filename_prefix", "STRING")],
        outputs: [], properties: { cnr_id: "comfy-core", ver: "0.3.64", "Node name for S&R": "SaveImage" },
        widgets_values: ["comfy_made"] },
    ],
    links: [[1, 1, 0, 2, 0, "IMAGE"], [2, 2, 0, 3, 0, "IMAGE"], [3, 4, 0, 1, 0, "INT"]],
    groups: [], config: {}, extra: { ds: { scale: 1, offset: [0, 0] }, frontendVersion: "1.27.10" }, version: 0.4,
  };
}

test("drop a PNG written by ComfyUI's frontend and run its workflow", async () => {
  const { page } = ui;
  const wf = comfyFrontendWorkflow();
  const png = withText(h.encodePng(8, 8, () => [0, 0, 0]), { prompt: "{}", workflow: JSON.stringify(wf) });
  await page.click("#btn-default");
  await page.waitForFunction(() => window.app.graph._nodes.length === 7);
  await drop(page, png, "ComfyUI_00001_.png");
  await page.waitForFunction(() => window.app.graph._nodes.length === 4, null, { timeout: 10000 });
  const g = await page.evaluate(() => ({
    inputs: window.app.graph._nodes.map((n) => [n.id, (n.inputs || []).map((i) => i.name)]).sort(),
    summary: window.app.graph._nodes.map((n) => `${n.type}:${(n.widgets || []).filter((w) => w.options?.serialize !== false).map((w) => w.value).join(",")}`).sort(),
  }));
  assert.deepStrictEqual(g.inputs, [[1, ["width"]], [2, ["image"]], [3, ["images"]], [4, []]], "unlinked widget sockets dropped, links kept");
  assert.deepStrictEqual(g.summary, ["EmptyImage:999,24,1,65280", "ImageInvert:", "PrimitiveInt:56", "SaveImage:comfy_made"]);
  const api = await page.evaluate(async () => (await import("./js/workflow.js")).graphToPrompt(window.app.graph).output);
  assert.deepStrictEqual(api["1"].inputs.width, ["4", 0], "a linked widget socket is sent as a link");
  await page.click("#btn-queue");
  const ex = await h.waitForEvent(page, "executed", "d.node === '3'");
  assert.match(ex.output.images[0].filename, /^comfy_made_/);
  await page.waitForFunction(() => { const i = window.app.graph.getNodeById(3).imgs?.[0]; return i && i.complete && i.naturalWidth === 56 && i.naturalHeight === 24; }, null, { timeout: 10000 });
  await h.screenshot(page, "png_drop_comfyui");
});

test("frontend-only nodes (Reroute, Note, PrimitiveNode) load and are resolved away on queue", async () => {
  const { page } = ui;
  const wf = {
    last_node_id: 7, last_link_id: 5,
    nodes: [
      { id: 1, type: "EmptyImage", pos: [40, 60], size: [270, 130], flags: {}, order: 1, mode: 0,
        inputs: [{ name: "height", type: "INT", widget: { name: "height" }, link: 5 }],
        outputs: [{ name: "IMAGE", type: "IMAGE", links: [1] }],
        properties: { "Node name for S&R": "EmptyImage" }, widgets_values: [30, 999, 1, 0] },
      { id: 5, type: "Reroute", pos: [340, 80], size: [75, 26], flags: {}, order: 2, mode: 0,
        inputs: [{ name: "", type: "*", link: 1 }], outputs: [{ name: "", type: "IMAGE", links: [2] }],
        properties: { showOutputText: false, horizontal: false } },
      { id: 2, type: "ImageInvert", pos: [460, 60], size: [140, 26], flags: {}, order: 3, mode: 0,
        inputs: [{ name: "image", type: "IMAGE", link: 2 }], outputs: [{ name: "IMAGE", type: "IMAGE", links: [3] }],
        properties: { "Node name for S&R": "ImageInvert" } },
      { id: 3, type: "SaveImage", pos: [660, 60], size: [270, 270], flags: {}, order: 4, mode: 0,
        inputs: [{ name: "images", type: "IMAGE", link: 3 }, { name: "filename_prefix", type: "STRING", widget: { name: "filename_prefix" }, link: 4 }],
        properties: { "Node name for S&R": "SaveImage" }, widgets_values: ["ignored"] },
      { id: 6, type: "PrimitiveNode", pos: [340, 300], size: [210, 58], flags: {}, order: 0, mode: 0,
        outputs: [{ name: "STRING", type: "STRING", widget: { name: "filename_prefix" }, links: [4] }],
        properties: { "Run widget replace on values": false }, widgets_values: ["from_primitive"] },
      { id: 7, type: "PrimitiveNode", pos: [40, 300], size: [210, 82], flags: {}, order: 0, mode: 0,
        outputs: [{ name: "INT", type: "INT", widget: { name: "height" }, links: [5] }],
        properties: { "Run widget replace on values": false }, widgets_values: [12, "fixed"] },
      { id: 4, type: "Note", pos: [40, 420], size: [300, 90], flags: {}, order: 5, mode: 0,
        properties: { text: "" }, widgets_values: ["a comment that is never sent"], color: "#432", bgcolor: "#653" },
    ],
    links: [[1, 1, 0, 5, 0, "*"], [2, 5, 0, 2, 0, "IMAGE"], [3, 2, 0, 3, 0, "IMAGE"], [4, 6, 0, 3, 1, "STRING"], [5, 7, 0, 1, 0, "INT"]],
    groups: [], config: {}, extra: {}, version: 0.4,
  };
  await drop(page, withText(h.encodePng(2, 2, () => [0, 0, 0]), { workflow: JSON.stringify(wf) }), "virtual.png");
  await page.waitForFunction(() => window.app.graph._nodes.length === 7, null, { timeout: 10000 });
  assert.strictEqual(await page.evaluate(() => document.getElementById("missing-banner").hidden), true, "nothing is missing");
  const api = await page.evaluate(async () => (await import("./js/workflow.js")).graphToPrompt(window.app.graph).output);
  assert.deepStrictEqual(Object.keys(api).sort(), ["1", "2", "3"]);
  assert.deepStrictEqual(api["2"].inputs.image, ["1", 0], "the Reroute is linked through");
  assert.strictEqual(api["3"].inputs.filename_prefix, "from_primitive");
  assert.strictEqual(api["1"].inputs.height, 12);
  await page.click("#btn-queue");
  const ex = await h.waitForEvent(page, "executed", "d.node === '3' && d.output.images[0].filename.startsWith('from_primitive')");
  assert.ok(ex);
  await page.waitForFunction(() => { const i = window.app.graph.getNodeById(3).imgs?.[0]; return i && i.complete && i.naturalWidth === 30 && i.naturalHeight === 12; }, null, { timeout: 10000 });
  await h.screenshot(page, "png_drop_virtual_nodes");
  assert.deepStrictEqual(ui.errors, []);
});

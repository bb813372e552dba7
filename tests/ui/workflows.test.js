// Named workflows on the server through /userdata, in tabs: an edit marks the tab modified,
// Ctrl+S asks a name the first time and writes user/default/workflows/<name>.json (what
// the server stores is the page's workflow), later Ctrl+S overwrites, Save As makes a
// second file; the Workflows panel lists, opens (in a new tab), renames and deletes them;
// each tab keeps its own graph and undo history; Export still downloads; tabs survive a
// reload.
"use strict";
process.env.UI_TEST_NAME = "workflows";
const fs = require("fs");
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

const enc = (p) => encodeURIComponent(p);
const listServer = async () => (await (await fetch(`${srv.url}/api/userdata?dir=workflows&recurse=true`)).json()).sort();
const readServer = async (name) => (await fetch(`${srv.url}/api/userdata/${enc(`workflows/${name}.json`)}`)).json();
const tabs = (page) => page.$$eval("#wf-tabs .wf-tab", (ts) => ts.map((t) => ({ name: t.querySelector(".name").textContent, mod: t.classList.contains("modified"), active: t.classList.contains("active") })));
// Answers the next prompt()/confirm() the page shows.
const answer = (page, value) => page.once("dialog", (d) => d.accept(value));

test("edit marks the tab, Ctrl+S names and saves it on the server, Ctrl+S again overwrites", async () => {
  const { page } = ui;
  await h.loadPrompt(page, {
    "1": { class_type: "EmptyImage", inputs: { width: 40, height: 24, batch_size: 1, color: 0 } },
    "2": { class_type: "ImageInvert", inputs: { image: ["1", 0] } },
    "3": { class_type: "SaveImage", inputs: { images: ["2", 0], filename_prefix: "ui_wf" } },
  });
  await page.evaluate(() => { window.app.tracker.check(); });
  assert.deepStrictEqual(await tabs(page), [{ name: "Unsaved Workflow", mod: true, active: true }]);
  await h.screenshot(page, "workflows_unsaved_marker");
  answer(page, "my flow");
  await page.focus("#graph-canvas");
  await page.keyboard.press("Control+s");
  await page.waitForFunction(() => document.querySelector("#wf-tabs .wf-tab .name").textContent === "my flow");
  assert.deepStrictEqual(await listServer(), ["my flow.json"]);
  const stored = await readServer("my flow");
  const shown = await page.evaluate(() => window.app.serializeWorkflow());
  assert.deepStrictEqual(stored, shown, "the server holds the page's workflow");
  assert.deepStrictEqual(stored.nodes.map((n) => n.type).sort(), ["EmptyImage", "ImageInvert", "SaveImage"]);
  assert.deepStrictEqual((await tabs(page))[0], { name: "my flow", mod: false, active: true });
  assert.strictEqual(await page.title(), "my flow - latentd");

  // Change a widget: the marker comes back; Ctrl+S writes without asking.
  await page.evaluate(() => { window.app.graph.getNodeById(1).widgets[0].value = 48; window.app.tracker.check(); });
  assert.strictEqual((await tabs(page))[0].mod, true);
  assert.strictEqual(await page.title(), "*my flow - latentd");
  await page.keyboard.press("Control+s");
  await page.waitForFunction(() => !document.querySelector("#wf-tabs .wf-tab.modified"));
  assert.strictEqual((await readServer("my flow")).nodes.find((n) => n.id === 1).widgets_values[0], 48);
  await h.screenshot(page, "workflows_saved");
});

test("Save As, the Workflows panel: open in a new tab, switch tabs, rename, delete", async () => {
  const { page } = ui;
  answer(page, "second");
  await page.click("#btn-save-as");
  await page.waitForFunction(() => document.querySelector("#wf-tabs .wf-tab.active .name").textContent === "second");
  assert.deepStrictEqual(await listServer(), ["my flow.json", "second.json"]);

  // A workflow written by another client appears in the list and opens in its own tab.
  const other = JSON.parse(JSON.stringify(await readServer("second")));
  other.nodes = other.nodes.filter((n) => n.type === "EmptyImage");
  other.links = [];
  for (const n of other.nodes) n.outputs[0].links = [];
  const r = await fetch(`${srv.url}/api/userdata/${enc("workflows/from elsewhere.json")}?overwrite=false`, { method: "POST", body: JSON.stringify(other) });
  assert.strictEqual(r.status, 200);
  await page.click('#tabs button[data-tab="workflows"]');
  const row = page.locator('#workflow-list .item[data-path="workflows/from elsewhere.json"]');
  await row.waitFor();
  await row.locator("button:text('open')").click();
  await page.waitForFunction(() => window.app.graph._nodes.length === 1);
  assert.deepStrictEqual((await tabs(page)).map((t) => [t.name, t.active, t.mod]), [["second", false, false], ["from elsewhere", true, false]]);
  await h.screenshot(page, "workflows_tabs");

  // Each tab keeps its graph and its undo history.
  await page.evaluate(() => { window.app.graph.getNodeById(1).widgets[0].value = 64; window.app.tracker.check(); });
  await page.locator("#wf-tabs .wf-tab", { hasText: "second" }).click();
  await page.waitForFunction(() => window.app.graph._nodes.length === 3);
  assert.strictEqual(await page.evaluate(() => window.app.graph.getNodeById(1).widgets[0].value), 48);
  await page.locator("#wf-tabs .wf-tab", { hasText: "from elsewhere" }).click();
  await page.waitForFunction(() => window.app.graph._nodes.length === 1);
  assert.strictEqual(await page.evaluate(() => window.app.graph.getNodeById(1).widgets[0].value), 64);
  assert.strictEqual((await tabs(page))[1].mod, true);
  await page.focus("#graph-canvas");
  await page.keyboard.press("Control+z");
  await page.waitForFunction(() => window.app.graph.getNodeById(1).widgets[0].value === 48);
  assert.strictEqual((await tabs(page))[1].mod, false, "undone to the opened state: not modified");

  // Rename in the panel: the server file moves, the open tab follows.
  answer(page, "renamed");
  await row.locator("button:text('rename')").click();
  await page.waitForFunction(() => document.querySelector("#wf-tabs .wf-tab.active .name").textContent === "renamed");
  assert.deepStrictEqual(await listServer(), ["my flow.json", "renamed.json", "second.json"]);
  // Delete (after a confirm): gone from the server; its tab stays, unsaved.
  answer(page);
  await page.locator('#workflow-list .item[data-path="workflows/my flow.json"] button:text("delete")').click();
  await page.waitForFunction(() => !document.querySelector('#workflow-list .item[data-path="workflows/my flow.json"]'));
  assert.deepStrictEqual(await listServer(), ["renamed.json", "second.json"]);
  await h.screenshot(page, "workflows_panel");
});

test("Export downloads the active workflow under its name; tabs survive a reload", async () => {
  const { page } = ui;
  const [dl] = await Promise.all([page.waitForEvent("download"), page.click("#btn-export")]);
  assert.strictEqual(dl.suggestedFilename(), "renamed.json");
  const wf = JSON.parse(fs.readFileSync(await dl.path(), "utf8"));
  assert.deepStrictEqual(wf.nodes.map((n) => n.type), ["EmptyImage"]);
  assert.ok(Array.isArray(wf.nodes[0].pos) && wf.nodes[0].pos.length === 2, "pos saved as [x, y] as ComfyUI does");
  const before = await tabs(page);
  await page.reload();
  await page.waitForFunction(() => window.app && window.app.ready);
  assert.deepStrictEqual(await tabs(page), before);
  assert.strictEqual(await page.evaluate(() => window.app.graph._nodes.length), 1);
  // Closing a tab: the other one is shown.
  await page.locator("#wf-tabs .wf-tab.active .close").click();
  await page.waitForFunction(() => window.app.graph._nodes.length === 3);
  assert.deepStrictEqual((await tabs(page)).map((t) => t.name), ["second"]);
  assert.deepStrictEqual(ui.errors, []);
});

// Node search: double-click on empty canvas opens it at the pointer (kept inside the window
// even at the left edge); the node's title with a typo finds it ("Invert Imgae" ->
// ImageInvert), class names and categories match too, results show category and socket
// types; dragging a link into empty space opens it filtered by the link's type and the
// chosen node is added and connected — and the server runs the resulting prompt.
"use strict";
process.env.UI_TEST_NAME = "search";
const { test, before, after } = require("node:test");
const assert = require("node:assert");
const h = require("./helpers.js");

let srv, ui;
before(async () => {
  srv = await h.startLatentd();
  h.requireNodes(await h.objectInfo(srv.url), ["EmptyImage", "ImageInvert", "SaveImage", "PreviewImage"]);
  ui = await h.openPage(srv.url);
});
after(async () => { if (ui) await ui.browser.close(); if (srv) await srv.stop(); });

const results = (page) => page.$$eval(".node-search .result", (rs) => rs.map((r) => ({ type: r.dataset.type, text: r.textContent })));

test("ranking: title with a typo, class name, category", async () => {
  const { page } = ui;
  const r = await page.evaluate(async () => {
    const s = await import("./js/search.js");
    const entries = s.nodeEntries(window.app.objectInfo);
    const top = (q, f) => s.searchNodes(q, entries, f).slice(0, 3).map((e) => e.name);
    return { typo: top("Invert Imgae"), cls: top("ImageInvert"), part: top("invert"), swap: top("Ivnert"),
      ksamp: top("ksampler"), none: top("zzqqxx"), filtered: s.searchNodes("", entries, { input: "IMAGE" }).every((e) => e.inputs.some((t) => t === "*" || t.split(",").includes("IMAGE"))) };
  });
  assert.strictEqual(r.typo[0], "ImageInvert", `typo: ${r.typo}`);
  assert.strictEqual(r.cls[0], "ImageInvert");
  assert.ok(r.part.slice(0, 2).includes("ImageInvert"), `a word of the title: ${r.part}`);
  assert.ok(r.swap.slice(0, 2).includes("ImageInvert"), `swapped letters: ${r.swap}`);
  if (await page.evaluate(() => !!window.app.objectInfo.KSampler)) assert.strictEqual(r.ksamp[0], "KSampler");
  assert.deepStrictEqual(r.none, []);
  assert.ok(r.filtered);
});

test("double-click near the left edge, type the title with a typo, Enter adds the node", async () => {
  const { page } = ui;
  await page.click("#btn-clear");
  const box = await page.evaluate(() => window.app.canvas.canvas.getBoundingClientRect().toJSON());
  await page.mouse.dblclick(box.left + 3, box.bottom - 5);
  const search = page.locator(".node-search");
  await search.waitFor();
  const r = await search.boundingBox();
  const vp = page.viewportSize();
  assert.ok(r.x >= 0 && r.y >= 0 && r.x + r.width <= vp.width && r.y + r.height <= vp.height, `inside the window: ${JSON.stringify(r)}`);
  await page.keyboard.type("Invert Imgae");
  await page.waitForFunction(() => document.querySelector(".node-search .result")?.dataset.type === "ImageInvert");
  const first = (await results(page))[0];
  assert.match(first.text, /Invert Image/);
  assert.match(first.text, /ImageInvert/, "class name shown");
  assert.match(first.text, /image/i, "category shown");
  assert.match(first.text, /IMAGE → IMAGE/, "socket types shown");
  await h.screenshot(page, "search_typo");
  await page.keyboard.press("Enter");
  await search.waitFor({ state: "detached" });
  assert.deepStrictEqual(await page.evaluate(() => window.app.graph._nodes.map((n) => n.type)), ["ImageInvert"]);
  // The add is an undo step.
  await page.keyboard.press("Control+z");
  await page.waitForFunction(() => window.app.graph._nodes.length === 0);
});

test("a link dropped on empty space: filtered search, the chosen node is connected and runs", async () => {
  const { page } = ui;
  await h.loadPrompt(page, { "1": { class_type: "EmptyImage", inputs: { width: 24, height: 16, batch_size: 1, color: 0x102030 } } });
  await page.waitForTimeout(100);
  const from = await h.slotPos(page, 1, false, 0);
  await h.drag(page, from, { x: from.x + 260, y: from.y + 40 });
  const search = page.locator(".node-search");
  await search.waitFor();
  const all = await results(page);
  const info = await h.objectInfo(srv.url);
  for (const r of all) {
    const inputs = Object.values({ ...info[r.type]?.input?.required, ...info[r.type]?.input?.optional }).map((s) => s[0]);
    assert.ok(!info[r.type] || inputs.includes("IMAGE") || inputs.includes("*"), `${r.type} takes an IMAGE`);
  }
  await page.keyboard.type("save imge");
  await page.waitForFunction(() => document.querySelector(".node-search .result")?.dataset.type === "SaveImage");
  await h.screenshot(page, "search_from_link");
  await page.locator(".node-search .result").first().click();
  await search.waitFor({ state: "detached" });
  const link = await page.evaluate(() => {
    const g = window.app.graph; const n = g._nodes.find((x) => x.type === "SaveImage");
    const l = g.links[n.inputs[0].link]; return l && [l.origin_id, l.origin_slot, l.type];
  });
  assert.deepStrictEqual(link, [1, 0, "IMAGE"]);
  const bodies = [];
  page.on("request", (r) => { if (r.method() === "POST" && r.url().endsWith("/api/prompt")) bodies.push(JSON.parse(r.postData())); });
  await page.click("#btn-queue");
  await h.waitForEvent(page, "execution_success", "true", 30000);
  const save = Object.values(bodies[0].prompt).find((n) => n.class_type === "SaveImage");
  assert.deepStrictEqual(save.inputs.images, ["1", 0], "the server got the connected node");
  assert.deepStrictEqual(ui.errors, []);
});

test("a link dragged back from an input: nodes giving that type, connected to the input", async () => {
  const { page } = ui;
  await h.loadPrompt(page, { "5": { class_type: "PreviewImage", inputs: {} } });
  await page.waitForTimeout(350);
  const to = await h.slotPos(page, 5, true, 0);
  await h.drag(page, to, { x: to.x - 200, y: to.y + 80 });
  await page.locator(".node-search").waitFor();
  assert.match(await page.getAttribute(".node-search input", "placeholder"), /give IMAGE/);
  await page.keyboard.type("empty image");
  await page.waitForFunction(() => document.querySelector(".node-search .result")?.dataset.type === "EmptyImage");
  await page.keyboard.press("Enter");
  const link = await page.evaluate(() => {
    const g = window.app.graph; const n = g.getNodeById(5); const l = g.links[n.inputs[0].link];
    return l && [g.getNodeById(l.origin_id).type, l.target_id, l.type];
  });
  assert.deepStrictEqual(link, ["EmptyImage", 5, "IMAGE"]);
});

// The page loads from latentd with the default graph: 7 nodes, 9 typed links, nothing
// fetched from anywhere but latentd; node types the server lacks are drawn as clearly
// marked "missing" nodes (banner + red nodes) instead of breaking the page.
"use strict";
process.env.UI_TEST_NAME = "page_load";
const { test, before, after } = require("node:test");
const assert = require("node:assert");
const h = require("./helpers.js");

let srv, ui;
before(async () => { srv = await h.startLatentd(); ui = await h.openPage(srv.url); });
after(async () => { if (ui) await ui.browser.close(); if (srv) await srv.stop(); });

test("default graph is loaded and drawn", async () => {
  const info = await h.objectInfo(srv.url);
  const g = await ui.page.evaluate(() => {
    const app = window.app;
    return {
      nodes: app.graph._nodes.map((n) => ({ id: n.id, type: n.type, missing: !!n.isMissing, widgets: (n.widgets || []).map((w) => [w.name, w.value]) })),
      links: Object.values(app.graph.links).map((l) => [l.origin_id, l.origin_slot, l.target_id, l.target_slot, l.type]),
      banner: document.getElementById("missing-banner").hidden ? null : document.getElementById("missing-banner").textContent,
      socket: document.getElementById("socket-state").textContent,
      registered: Object.keys(window.LiteGraph.registered_node_types).length,
    };
  });
  const types = g.nodes.map((n) => `${n.id}:${n.type}`).sort();
  assert.deepStrictEqual(types, ["3:KSampler", "4:CheckpointLoaderSimple", "5:EmptyLatentImage", "6:CLIPTextEncode",
    "7:CLIPTextEncode", "8:VAEDecode", "9:SaveImage"]);
  assert.strictEqual(g.links.length, 9);
  assert.ok(g.links.some((l) => l[0] === 4 && l[2] === 3 && l[4] === "MODEL"), "checkpoint MODEL feeds the sampler");
  assert.ok(g.links.some((l) => l[0] === 8 && l[2] === 9 && l[4] === "IMAGE"), "decoded IMAGE feeds SaveImage");
  assert.strictEqual(g.socket, "connected");
  // No checkpoint in this server's models/checkpoints: the page says where one goes.
  assert.match(await ui.page.textContent("#hint-banner"), /No checkpoint found.*models\/checkpoints/);
  assert.strictEqual(await ui.page.isVisible("#hint-banner"), true);
  assert.ok(g.registered >= Object.keys(info).length, "every /object_info class is registered");

  const missing = g.nodes.filter((n) => !info[n.type]).map((n) => n.type);
  for (const n of g.nodes) assert.strictEqual(n.missing, !info[n.type], `${n.type} missing flag`);
  if (missing.length) {
    assert.ok(g.banner, "a banner lists the missing node types");
    for (const t of new Set(missing)) assert.ok(g.banner.includes(t), `banner names ${t}`);
  } else {
    assert.strictEqual(g.banner, null);
    const ks = g.nodes.find((n) => n.type === "KSampler");
    const names = ks.widgets.map((w) => w[0]);
    assert.deepStrictEqual(names, ["seed", "control_after_generate", "steps", "cfg", "sampler_name", "scheduler", "denoise"]);
    assert.deepStrictEqual(ks.widgets.slice(2).map((w) => w[1]), [20, 8, "euler", "normal", 1]);
    // The page's API conversion of its default graph is the spec's default prompt.
    const want = JSON.parse(require("fs").readFileSync(require("path").join(__dirname, "..", "fixtures", "default_workflow_api.json"), "utf8"));
    const got = await ui.page.evaluate(async () => (await import("./js/workflow.js")).graphToPrompt(window.app.graph).output);
    for (const id of Object.keys(want)) { delete want[id]._meta; delete got[id]._meta; }
    got["4"].inputs.ckpt_name = want["4"].inputs.ckpt_name; // the page picks an installed checkpoint
    assert.deepStrictEqual(got, want);
  }
  // Queueing a graph with missing types is refused in the page with a clear message.
  if (missing.length) {
    await ui.page.click("#btn-queue");
    await ui.page.waitForSelector("#error-dialog:not([hidden])");
    const msg = await ui.page.textContent("#error-message");
    assert.match(msg, /does not know these node types/);
    await h.screenshot(ui.page, "page_load_missing_error");
    await ui.page.click("#error-close");
  }
  await h.screenshot(ui.page, "page_load");
  // The canvas really drew something (not a blank/black frame).
  const drawn = await ui.page.evaluate(() => {
    const c = window.app.canvas.canvas; const ctx = c.getContext("2d");
    const d = ctx.getImageData(0, 0, c.width, c.height).data; const seen = new Set();
    for (let i = 0; i < d.length; i += 4 * 97) seen.add((d[i] >> 4) * 256 + (d[i + 1] >> 4) * 16 + (d[i + 2] >> 4));
    return seen.size;
  });
  assert.ok(drawn > 5, `canvas shows a drawn graph (${drawn} colours)`);
  assert.deepStrictEqual(ui.errors, [], "no page errors");
  assert.deepStrictEqual(ui.foreign, [], "no requests outside latentd");
});

test("slots are typed: only matching types connect", async () => {
  // Pick, from whatever the server offers, an output type T and two socket inputs: one of
  // type T and one of another concrete type; litegraph must accept only the first link.
  const r = await ui.page.evaluate(() => {
    const LG = window.LiteGraph; const types = Object.keys(window.app.objectInfo);
    const nodes = types.map((t) => LG.createNode(t)).filter(Boolean);
    for (const src of nodes) for (const [oi, out] of (src.outputs || []).entries()) {
      const ok = nodes.find((n) => n !== src && (n.inputs || []).some((i) => i.type === out.type));
      const bad = nodes.find((n) => n !== src && (n.inputs || []).some((i) => i.type !== out.type && i.type !== "*" && !String(i.type).includes(",")));
      if (!ok || !bad) continue;
      const g = new LG.LGraph(); g.add(src); g.add(ok); g.add(bad);
      const okSlot = ok.inputs.findIndex((i) => i.type === out.type);
      const badSlot = bad.inputs.findIndex((i) => i.type !== out.type && i.type !== "*");
      return { type: out.type, badType: bad.inputs[badSlot].type, good: !!src.connect(oi, ok, okSlot), bad: !!src.connect(oi, bad, badSlot) };
    }
    return null;
  });
  if (!r) return; // a catalogue with a single type has nothing to mismatch
  assert.strictEqual(r.good, true, `${r.type} -> ${r.type} connects`);
  assert.strictEqual(r.bad, false, `${r.type} -> ${r.badType} is refused`);
});

test("add-node menu by category, and the search box", async () => {
  const { page } = ui;
  const info = await h.objectInfo(srv.url);
  const [cls, def] = Object.entries(info).find(([, d]) => d.category && !d.category.includes("/"));
  const count = () => page.evaluate(() => window.app.graph._nodes.length);
  const n0 = await count();
  const box = await page.evaluate(() => { const r = window.app.canvas.canvas.getBoundingClientRect(); return { x: r.left, y: r.top, w: r.width, h: r.height }; });
  // Right-click empty canvas (bottom-left corner) -> Add Node -> <category> -> <display name>.
  await page.mouse.click(box.x + 30, box.y + box.h - 30, { button: "right" });
  await page.locator(".litemenu-entry:text-is('Add Node')").click();
  await page.locator(`.litemenu-entry:text-is('${def.category}')`).click();
  await page.locator(`.litemenu-entry:text-is('${def.display_name || cls}')`).click();
  await page.waitForFunction((n) => window.app.graph._nodes.length === n + 1, n0);
  assert.strictEqual(await page.evaluate(() => window.app.graph._nodes.at(-1).type), cls);
  // Double-click empty canvas -> search box -> type the class name -> Enter (search.test.js
  // covers titles, typos and links).
  await page.mouse.dblclick(box.x + 60, box.y + box.h - 60);
  const input = page.locator(".node-search input").first();
  await input.waitFor();
  await input.type(cls);
  await page.waitForSelector(`.node-search .result[data-type="${cls}"]`);
  await h.screenshot(page, "page_load_search");
  await input.press("Enter");
  await page.waitForFunction((n) => window.app.graph._nodes.length === n + 2, n0);
  assert.strictEqual(await page.evaluate(() => window.app.graph._nodes.at(-1).type), cls);
});

test("multi-line text is edited in place", async () => {
  const { page } = ui;
  // A Note (frontend-only, so present on any server) has a multi-line text widget.
  const id = await page.evaluate(() => { const n = window.LiteGraph.createNode("Note"); n.pos = [60, 60]; window.app.graph.add(n); return n.id; });
  await page.waitForTimeout(100);
  const c = await page.evaluate((id) => {
    const app = window.app; const n = app.graph.getNodeById(id); const w = n.widgets[0];
    const p = app.canvas.ds.convertOffsetToCanvas([n.pos[0] + n.size[0] / 2, n.pos[1] + w.last_y + 30]);
    const r = app.canvas.canvas.getBoundingClientRect(); return { x: r.left + p[0], y: r.top + p[1] };
  }, id);
  await page.mouse.click(c.x, c.y);
  const ta = page.locator("textarea.latentd-textedit");
  await ta.waitFor();
  await ta.type("first line\nsecond line");
  await h.screenshot(page, "page_load_textedit");
  await ta.press("Control+Enter");
  await ta.waitFor({ state: "detached" });
  assert.strictEqual(await page.evaluate((id) => window.app.graph.getNodeById(id).widgets[0].value, id), "first line\nsecond line");
  // Escape drops an edit.
  await page.mouse.click(c.x, c.y);
  await ta.waitFor();
  await ta.type(" more");
  await ta.press("Escape");
  await ta.waitFor({ state: "detached" });
  assert.strictEqual(await page.evaluate((id) => window.app.graph.getNodeById(id).widgets[0].value, id), "first line\nsecond line");
  // The text box grows with its node: drag the node's bottom-right corner down.
  const before = await page.evaluate((id) => window.app.graph.getNodeById(id).widgets[0]._h, id);
  const corner = await page.evaluate((id) => { const n = window.app.graph.getNodeById(id); return [n.pos[0] + n.size[0] - 3, n.pos[1] + n.size[1] - 3]; }, id);
  const from = await h.screenPos(page, corner);
  await page.waitForTimeout(350); // not a double click
  await h.drag(page, from, { x: from.x + 40, y: from.y + 150 });
  await page.waitForTimeout(100);
  const grown = await page.evaluate((id) => { const n = window.app.graph.getNodeById(id); return { h: n.widgets[0]._h, scale: window.app.canvas.ds.scale }; }, id);
  assert.ok(grown.h >= before + 140 / grown.scale - 5, `text box ${before} -> ${grown.h}`);
  await page.waitForTimeout(350);
  await page.mouse.click(c.x, c.y);
  await ta.waitFor();
  const tah = await ta.evaluate((t) => t.getBoundingClientRect().height);
  assert.ok(Math.abs(tah - grown.h * grown.scale) < 3, `the editor covers the grown box: ${tah}`);
  await h.screenshot(page, "page_load_text_grown");
  await ta.press("Escape");
  await page.evaluate((id) => window.app.graph.remove(window.app.graph.getNodeById(id)), id);
});

test("save the workflow as JSON and load it back", async () => {
  const { page } = ui;
  const before = await page.evaluate(() => window.app.graph._nodes.map((n) => `${n.id}:${n.type}`).sort());
  const [dl] = await Promise.all([page.waitForEvent("download"), page.click("#btn-export")]);
  const text = require("fs").readFileSync(await dl.path(), "utf8");
  const wf = JSON.parse(text);
  assert.strictEqual(wf.version, 0.4);
  assert.ok(Array.isArray(wf.nodes) && Array.isArray(wf.links) && wf.extra && wf.extra.ds, "litegraph 0.4 shape with extra.ds");
  assert.deepStrictEqual(wf.nodes.map((n) => `${n.id}:${n.type}`).sort(), before);
  await page.click("#btn-clear");
  assert.strictEqual(await page.evaluate(() => window.app.graph._nodes.length), 0);
  const [chooser] = await Promise.all([page.waitForEvent("filechooser"), page.click("#btn-load")]);
  await chooser.setFiles({ name: "workflow.json", mimeType: "application/json", buffer: Buffer.from(text) });
  await page.waitForFunction((n) => window.app.graph._nodes.length === n, before.length);
  assert.deepStrictEqual(await page.evaluate(() => window.app.graph._nodes.map((n) => `${n.id}:${n.type}`).sort()), before);
  assert.strictEqual(await page.evaluate(() => Object.keys(window.app.graph.links).length), wf.links.length);
});

test("side panels answer from the server", async () => {
  await ui.page.click('#tabs button[data-tab="system"]');
  await ui.page.waitForSelector("#system-info table");
  const sys = await ui.page.textContent("#system-info");
  assert.match(sys, /RAM/);
  assert.match(sys, /device/);
  await h.screenshot(ui.page, "page_load_system");
  await ui.page.click('#tabs button[data-tab="history"]');
  await ui.page.waitForSelector("#history-list > *");
});

test("the WebSocket reconnects after a server restart", async (t) => {
  if (!srv.restart) return t.skip("external server (LATENTD_UI_URL): cannot restart it");
  const { page } = ui;
  const before = await page.evaluate(() => ({ n: window.__events.length, reconnects: window.api.reconnects }));
  await srv.restart();
  await page.waitForFunction((r) => window.api.reconnects > r && window.api.connected, before.reconnects, { timeout: 30000 });
  // The new server greets the socket with a status message, which the page handled.
  await page.waitForFunction((n) => window.__events.slice(n).some((e) => e.type === "status"), before.n, { timeout: 10000 });
  assert.strictEqual(await page.textContent("#socket-state"), "connected");
  await h.screenshot(page, "page_load_reconnected");
});

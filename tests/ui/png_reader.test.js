// web/js/png.js, the page's PNG metadata reader, run under Node (no browser needed):
// tEXt (what ComfyUI and latentd write), iTXt and zTXt (what other tools re-save with),
// and refusal of non-PNG input.
"use strict";
const { test } = require("node:test");
const assert = require("node:assert");
const path = require("path");
const zlib = require("zlib");
const { pathToFileURL } = require("url");
const h = require("./helpers.js");

const load = () => import(pathToFileURL(path.resolve(__dirname, "../../web/js/png.js")).href);

function withChunks(png, chunks) {
  // Insert text chunks right after IHDR (8-byte signature + 25-byte IHDR chunk).
  return Buffer.concat([png.subarray(0, 33), ...chunks, png.subarray(33)]);
}
function chunk(type, data) {
  const len = Buffer.alloc(4); len.writeUInt32BE(data.length);
  const td = Buffer.concat([Buffer.from(type, "latin1"), data]);
  const crc = Buffer.alloc(4); crc.writeUInt32BE(zlib.crc32 ? zlib.crc32(td) : 0);
  return Buffer.concat([len, td, crc]);
}
const ab = (b) => b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength);

test("reads workflow and prompt from tEXt chunks", async () => {
  const { readComfyMetadata } = await load();
  const wf = { last_node_id: 1, nodes: [{ id: 1, type: "SaveImage" }], links: [], version: 0.4, t: "café" };
  // ComfyUI escapes non-ASCII in the JSON it writes to tEXt (Latin-1 only).
  const ascii = (o) => JSON.stringify(o).replace(/[\u0080-\uffff]/g, (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));
  const prompt = { "1": { class_type: "SaveImage", inputs: {} } };
  const png = withChunks(h.encodePng(2, 2, () => [1, 2, 3]), [
    chunk("tEXt", Buffer.from("prompt\0" + JSON.stringify(prompt), "latin1")),
    chunk("tEXt", Buffer.from("workflow\0" + ascii(wf), "latin1")),
  ]);
  const m = await readComfyMetadata(ab(png));
  assert.deepStrictEqual(m.workflow, wf);
  assert.strictEqual(m.workflow.t, "café");
  assert.deepStrictEqual(m.prompt, prompt);
});

test("reads iTXt (plain and compressed) and zTXt", async () => {
  const { readPngText } = await load();
  const itxt = (key, text, compressed) => chunk("iTXt", Buffer.concat([Buffer.from(key + "\0", "latin1"),
    Buffer.from([compressed ? 1 : 0, 0]), Buffer.from("\0\0"), compressed ? zlib.deflateSync(Buffer.from(text, "utf8")) : Buffer.from(text, "utf8")]));
  const png = withChunks(h.encodePng(1, 1, () => [0, 0, 0]), [
    itxt("a", "ünïcode", false), itxt("b", "squeezed", true),
    chunk("zTXt", Buffer.concat([Buffer.from("c\0", "latin1"), Buffer.from([0]), zlib.deflateSync(Buffer.from("zipped", "latin1"))])),
  ]);
  const t = await readPngText(ab(png));
  assert.deepStrictEqual(t, { a: "ünïcode", b: "squeezed", c: "zipped" });
});

test("no metadata, bad JSON and non-PNG input", async () => {
  const { readComfyMetadata, readPngText } = await load();
  assert.deepStrictEqual(await readComfyMetadata(ab(h.encodePng(1, 1, () => [0, 0, 0]))), { workflow: null, prompt: null });
  const bad = withChunks(h.encodePng(1, 1, () => [0, 0, 0]), [chunk("tEXt", Buffer.from("workflow\0{not json", "latin1"))]);
  assert.deepStrictEqual(await readComfyMetadata(ab(bad)), { workflow: null, prompt: null });
  await assert.rejects(readPngText(ab(Buffer.from("GIF89a........"))), /not a PNG/);
  // Truncated file: what was read before the cut is kept, no exception.
  const png = withChunks(h.encodePng(1, 1, () => [0, 0, 0]), [chunk("tEXt", Buffer.from("prompt\0{}", "latin1"))]);
  const t = await readPngText(ab(png.subarray(0, png.length - 20)));
  assert.strictEqual(t.prompt, "{}");
});

// e2e: SaveAnimatedPNG, LoadImageOutput and ImageQuantize through the real server, no model:
//   - /object_info equals ComfyUI's entries (nodes_images.json, nodes_image_core.json,
//     nodes_post_processing.json, built by tools/comfy_object_info.py);
//   - LoadImage x2 -> ImageBatch -> SaveAnimatedPNG (fps 4): `executed` carries the file and
//     "animated": [true]; /view returns the file; it is an APNG of two frames, 1/4 s each,
//     whose frames decode to the pixels ComfyUI computes (v/255, then 255x truncated) and
//     whose "comf" chunk after the data holds the prompt; LoadImageOutput reads both frames
//     back (SaveImage saves them as two files);
//   - SaveImage writes an output, LoadImageOutput reads it back by its " [output]" name
//     (listed by /internal/files/output) and SaveImage saves the same pixels again; a name
//     that is not there is a validation error and the server keeps serving;
//   - ImageQuantize(colors 2) leaves at most two colours.
"use strict";
const { describe, it, before, after } = require("node:test");
const assert = require("node:assert/strict");
const fs = require("fs");
const path = require("path");
const zlib = require("zlib");
const L = require("./lib/latentd.js");

const FIX = path.join(L.SOURCE, "tests", "fixtures", "object_info");
const W = 5, H = 4;
const pixA = (x, y) => [x * 50 + 1, y * 60 + 7, (x * 37 + y * 91) % 256, 255];
const pixB = (x, y) => [255 - x * 13, 128, y * 63, 255];
const roundTrip = (v) => Math.floor(Math.fround(255 * Math.fround(v / 255)));

function expectedRGB(fn) {
  const out = Buffer.alloc(W * H * 3);
  for (let y = 0; y < H; y++)
    for (let x = 0; x < W; x++)
      for (let k = 0; k < 3; k++) out[(y * W + x) * 3 + k] = roundTrip(fn(x, y)[k]);
  return out;
}

// The chunks of a PNG: [{type, data}].
function chunks(buf) {
  const out = [];
  for (let off = 8; off + 12 <= buf.length;) {
    const len = buf.readUInt32BE(off);
    out.push({ type: buf.toString("ascii", off + 4, off + 8), data: buf.subarray(off + 8, off + 8 + len) });
    off += 12 + len;
  }
  return out;
}

// APNG frames (dispose none, blend source) as RGB buffers, with each fcTL.
function decodeApng(buf) {
  const cs = chunks(buf), ihdr = cs[0].data, frames = [];
  const c = ihdr[9] === 6 ? 4 : 3, fw = ihdr.readUInt32BE(0), fh = ihdr.readUInt32BE(4);
  const canvas = Buffer.alloc(fw * fh * c);
  let ctl = null, parts = [];
  const flush = () => {
    if (!ctl || !parts.length) return;
    const hd = Buffer.from(ihdr);
    hd.writeUInt32BE(ctl.w, 0);
    hd.writeUInt32BE(ctl.h, 4);
    const chunk = (t, d) => { const b = Buffer.alloc(12 + d.length); b.writeUInt32BE(d.length, 0); b.write(t, 4, "ascii"); d.copy(b, 8); return b; };
    const png = Buffer.concat([buf.subarray(0, 8), chunk("IHDR", hd), chunk("IDAT", Buffer.concat(parts)), chunk("IEND", Buffer.alloc(0))]);
    const f = L.decodePng(png);
    for (let y = 0; y < ctl.h; y++) f.pixels.copy(canvas, ((y + ctl.y) * fw + ctl.x) * c, y * ctl.w * c, (y + 1) * ctl.w * c);
    const rgb = Buffer.alloc(fw * fh * 3);
    for (let i = 0; i < fw * fh; i++) canvas.copy(rgb, i * 3, i * c, i * c + 3);
    frames.push({ rgb, ...ctl });
    parts = [];
  };
  for (const { type, data } of cs) {
    if (type === "fcTL" || type === "IEND") flush();
    if (type === "fcTL") ctl = { w: data.readUInt32BE(4), h: data.readUInt32BE(8), x: data.readUInt32BE(12), y: data.readUInt32BE(16), num: data.readUInt16BE(20), den: data.readUInt16BE(22) };
    else if (type === "IDAT") parts.push(data);
    else if (type === "fdAT") parts.push(data.subarray(4));
  }
  return frames;
}

let S = null;

async function run(prompt, id) {
  const c = await L.openWs(S, { clientId: id });
  try {
    const r = await L.postPrompt(S, prompt, { client_id: id, prompt_id: id });
    assert.equal(r.status, 200, r.text);
    await c.waitFor((m) => m.type === "executing" && m.data.node === null && m.data.prompt_id === id, 30000);
    return c.messages;
  } finally {
    await c.close();
  }
}

async function view(name, type = "output") {
  const r = await L.request(S, "GET", `/view?filename=${encodeURIComponent(name)}&type=${type}`);
  assert.equal(r.status, 200, `/view ${name}`);
  return r.body;
}

describe("SaveAnimatedPNG, LoadImageOutput, ImageQuantize", () => {
  before(async () => {
    S = await L.startLatentd({
      setup: (dir) => {
        fs.writeFileSync(path.join(dir, "input", "a.png"), L.pngRGBA(W, H, pixA));
        fs.writeFileSync(path.join(dir, "input", "b.png"), L.pngRGBA(W, H, pixB));
      },
    });
  });

  after(async () => {
    if (!S) return;
    const r = await S.stop();
    const log = S.log();
    L.removeDir(S.dir);
    assert.deepEqual(r, { code: 0, signal: null }, log.slice(-3000));
  });

  it("/object_info equals ComfyUI's entries", async () => {
    const info = (await L.request(S, "GET", "/object_info")).json();
    const want = {
      "nodes_images.json": "SaveAnimatedPNG",
      "nodes_image_core.json": "LoadImageOutput",
      "nodes_post_processing.json": "ImageQuantize",
    };
    for (const [file, c] of Object.entries(want)) {
      const fix = JSON.parse(fs.readFileSync(path.join(FIX, file), "utf8"));
      assert.deepEqual(info[c], fix[c], c);
    }
  });

  it("SaveAnimatedPNG writes an APNG that /view returns", async () => {
    const prompt = {
      1: { class_type: "LoadImage", inputs: { image: "a.png" } },
      2: { class_type: "LoadImage", inputs: { image: "b.png" } },
      3: { class_type: "ImageBatch", inputs: { image1: ["1", 0], image2: ["2", 0] } },
      4: { class_type: "SaveAnimatedPNG", inputs: { images: ["3", 0], filename_prefix: "anim", fps: 4, compress_level: 4 } },
    };
    const msgs = await run(prompt, "apng-1");
    const ex = msgs.find((m) => m.type === "executed" && m.data.node === "4");
    assert.ok(ex, "executed for SaveAnimatedPNG");
    assert.deepEqual(ex.data.output, { images: [{ filename: "anim_00001_.png", subfolder: "", type: "output" }], animated: [true] });
    const body = await view("anim_00001_.png");
    assert.ok(body.equals(fs.readFileSync(path.join(S.dir, "output", "anim_00001_.png"))), "/view returns the file");
    const cs = chunks(body);
    assert.deepEqual(cs.map((c) => c.type), ["IHDR", "acTL", "fcTL", "IDAT", "fcTL", "fdAT", "comf", "IEND"]);
    assert.equal(cs[1].data.readUInt32BE(0), 2, "acTL: two frames");
    const frames = decodeApng(body);
    assert.equal(frames.length, 2);
    assert.ok(frames[0].rgb.equals(expectedRGB(pixA)), "frame 0");
    assert.ok(frames[1].rgb.equals(expectedRGB(pixB)), "frame 1");
    assert.deepEqual([frames[0].num, frames[0].den], [1, 4], "int(1000 / 4) = 250 ms = 1/4 s");
    const comf = cs.find((c) => c.type === "comf").data, z = comf.indexOf(0);
    assert.equal(comf.toString("latin1", 0, z), "prompt");
    assert.equal(JSON.parse(comf.toString("latin1", z + 1))["4"].class_type, "SaveAnimatedPNG");
    // Back through LoadImageOutput: both frames, as ComfyUI's LoadImage iterates an APNG.
    await run({
      1: { class_type: "LoadImageOutput", inputs: { image: "anim_00001_.png [output]" } },
      2: { class_type: "SaveImage", inputs: { images: ["1", 0], filename_prefix: "frames" } },
    }, "apng-2");
    assert.ok(L.decodePng(await view("frames_00001_.png")).pixels.equals(expectedRGB(pixA)), "frame 0 back");
    assert.ok(L.decodePng(await view("frames_00002_.png")).pixels.equals(expectedRGB(pixB)), "frame 1 back");
  });

  it("LoadImageOutput reads an output image by its [output] name", async () => {
    await run({
      1: { class_type: "LoadImage", inputs: { image: "a.png" } },
      2: { class_type: "SaveImage", inputs: { images: ["1", 0], filename_prefix: "still" } },
    }, "out-1");
    const listed = (await L.request(S, "GET", "/internal/files/output")).json();
    assert.ok(listed.includes("still_00001_.png"), `listed: ${listed}`);
    const msgs = await run({
      1: { class_type: "LoadImageOutput", inputs: { image: "still_00001_.png [output]" } },
      2: { class_type: "SaveImage", inputs: { images: ["1", 0], filename_prefix: "again" } },
    }, "out-2");
    assert.ok(msgs.some((m) => m.type === "executed" && m.data.node === "2"));
    const a = L.decodePng(await view("still_00001_.png")), b = L.decodePng(await view("again_00001_.png"));
    assert.ok(a.pixels.equals(expectedRGB(pixA)) && b.pixels.equals(a.pixels), "the same pixels come back");
    const bad = await L.postPrompt(S, {
      1: { class_type: "LoadImageOutput", inputs: { image: "missing.png [output]" } },
      2: { class_type: "SaveImage", inputs: { images: ["1", 0], filename_prefix: "x" } },
    });
    assert.equal(bad.status, 400, bad.text);
    assert.match(bad.text, /Invalid image file: missing.png \[output\]/);
    assert.equal((await L.request(S, "GET", "/system_stats")).status, 200, "still serving");
  });

  it("ImageQuantize leaves at most the colours asked for", async () => {
    await run({
      1: { class_type: "LoadImage", inputs: { image: "a.png" } },
      2: { class_type: "ImageQuantize", inputs: { image: ["1", 0], colors: 2, dither: "floyd-steinberg" } },
      3: { class_type: "SaveImage", inputs: { images: ["2", 0], filename_prefix: "quant" } },
    }, "q-1");
    const p = L.decodePng(await view("quant_00001_.png"));
    const seen = new Set();
    for (let i = 0; i < p.width * p.height; i++) seen.add(p.pixels.subarray(i * p.channels, i * p.channels + 3).toString("hex"));
    assert.ok(seen.size >= 1 && seen.size <= 2, `${seen.size} colours`);
  });
});

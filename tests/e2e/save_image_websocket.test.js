// e2e: SaveImageWebsocket (ComfyUI's custom_nodes/websocket_image_save.py) through the real
// server, with no model: LoadImage x2 -> ImageBatch -> SaveImageWebsocket.
//   - /object_info equals tests/fixtures/object_info/websocket_image_save.json (built from
//     ComfyUI's source by tools/comfy_object_info.py);
//   - a legacy client gets one binary frame [u32 1][u32 2][PNG] per image, all of them
//     between `executing` for the node and the next `executing` (null: the prompt is done),
//     which is what script_examples/websockets_api_example_ws_images.py collects; each PNG
//     decodes to the pixels ComfyUI computes (float32 v/255, then 255*x truncated);
//   - a client that negotiated supports_preview_metadata gets type-4 frames with
//     image_type "image/png" instead; the other client gets none of them;
//   - a second identical prompt runs again (IS_CHANGED is time.time()), nothing is saved
//     to disk and no `executed` is sent; a MASK through MaskToImage goes out as RGB.
"use strict";
const { describe, it, before, after } = require("node:test");
const assert = require("node:assert/strict");
const fs = require("fs");
const path = require("path");
const L = require("./lib/latentd.js");

const FIXTURE = path.join(L.SOURCE, "tests", "fixtures", "object_info", "websocket_image_save.json");
const NODE = "save_image_websocket_node";
const W = 5, H = 3;
const pixA = (x, y) => [x * 50 + 1, y * 100 + 7, (x * 37 + y * 91) % 256, 255];
const pixB = (x, y) => [255 - x * 13, 128, y * 127, 255];

// LoadImage divides by 255 in float32; the node multiplies by 255 in float32 and truncates.
const roundTrip = (v) => Math.floor(Math.fround(255 * Math.fround(v / 255)));

function expectedRGB(fn) {
  const out = Buffer.alloc(W * H * 3);
  for (let y = 0; y < H; y++)
    for (let x = 0; x < W; x++)
      for (let k = 0; k < 3; k++) out[(y * W + x) * 3 + k] = roundTrip(fn(x, y)[k]);
  return out;
}

const graph = () => ({
  1: { class_type: "LoadImage", inputs: { image: "a.png" } },
  2: { class_type: "LoadImage", inputs: { image: "b.png" } },
  3: { class_type: "ImageBatch", inputs: { image1: ["1", 0], image2: ["2", 0] } },
  [NODE]: { class_type: "SaveImageWebsocket", inputs: { images: ["3", 0] } },
});

// The example script's loop: binary frames while the current node is NODE, until executing null.
function collect(messages, promptId) {
  let current = "", done = false;
  const frames = [];
  for (const m of messages) {
    if (done) break;
    if (m.binary) {
      if (current === NODE) frames.push(m.binary);
      else assert.fail(`binary frame outside the node (current ${current})`);
    } else if (m.type === "executing" && m.data.prompt_id === promptId) {
      if (m.data.node === null) done = true;
      else current = m.data.node;
    }
  }
  assert.ok(done, "prompt finished");
  return frames;
}

async function runFor(ws, clientId, promptId, prompt = graph()) {
  const from = ws.messages.length;
  const r = await L.postPrompt(S, prompt, { client_id: clientId, prompt_id: promptId });
  assert.equal(r.status, 200, r.text);
  await ws.waitFor((m) => m.type === "executing" && m.data.node === null && m.data.prompt_id === promptId, 30000, from);
  return ws.messages.slice(from);
}

let S = null;

describe("SaveImageWebsocket", () => {
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

  it("/object_info equals ComfyUI's entry", async () => {
    const want = JSON.parse(fs.readFileSync(FIXTURE, "utf8"));
    const got = (await L.request(S, "GET", "/object_info/SaveImageWebsocket")).json();
    assert.deepEqual(got, want);
  });

  it("sends each image as a PNG frame between the node's executing and the next", async () => {
    const legacy = await L.openWs(S, { clientId: "legacy" });
    const other = await L.openWs(S, { clientId: "other" });
    try {
      const msgs = await runFor(legacy, "legacy", "ws-1");
      const frames = collect(msgs, "ws-1");
      assert.equal(frames.length, 2, "one frame per image");
      const want = [expectedRGB(pixA), expectedRGB(pixB)];
      frames.forEach((f, i) => {
        assert.equal(f.readUInt32BE(0), 1, "PREVIEW_IMAGE");
        assert.equal(f.readUInt32BE(4), 2, "PNG");
        const png = L.decodePng(f.subarray(8));
        assert.deepEqual([png.width, png.height, png.channels], [W, H, 3]);
        assert.ok(png.pixels.equals(want[i]), `image ${i}: ${[...png.pixels]} != ${[...want[i]]}`);
      });
      // ComfyUI's progress bar: progress {value: i, max: 2}, the legacy frame after it.
      const seq = msgs.filter((m) => m.binary || m.type === "progress").map((m) => (m.binary ? "bin" : `p${m.data.value}/${m.data.max}`));
      assert.deepEqual(seq, ["p0/2", "bin", "p1/2", "bin"]);
      assert.ok(!msgs.some((m) => m.type === "executed"), "no UI output");
      assert.ok(!other.messages.some((m) => m.binary), "frames go to the prompt's client only");
      // Not cached: the same prompt sends the frames again.
      assert.equal(collect(await runFor(legacy, "legacy", "ws-2"), "ws-2").length, 2);
      assert.deepEqual(fs.readdirSync(path.join(S.dir, "output")), [], "nothing saved");
    } finally {
      await legacy.close();
      await other.close();
    }
  });

  it("sends type-4 PNG frames to a client with supports_preview_metadata", async () => {
    const meta = await L.openWs(S, { clientId: "meta" });
    try {
      meta.send({ type: "feature_flags", data: { supports_preview_metadata: true } });
      await meta.waitFor((m) => m.type === "feature_flags");
      const frames = collect(await runFor(meta, "meta", "ws-meta"), "ws-meta");
      assert.equal(frames.length, 2);
      const f = frames[1];
      assert.equal(f.readUInt32BE(0), 4);
      const n = f.readUInt32BE(4);
      const j = JSON.parse(f.subarray(8, 8 + n).toString());
      assert.equal(j.image_type, "image/png");
      assert.equal(j.node_id, NODE);
      assert.equal(j.prompt_id, "ws-meta");
      assert.ok(L.decodePng(f.subarray(8 + n)).pixels.equals(expectedRGB(pixB)));
    } finally {
      await meta.close();
    }
  });

  it("sends a mask turned into an image (SolidMask -> MaskToImage)", async () => {
    const c = await L.openWs(S, { clientId: "mask" });
    try {
      const prompt = {
        3: { class_type: "SolidMask", inputs: { value: 0.5, width: 4, height: 2 } },
        4: { class_type: "MaskToImage", inputs: { mask: ["3", 0] } },
        [NODE]: { class_type: "SaveImageWebsocket", inputs: { images: ["4", 0] } },
      };
      const frames = collect(await runFor(c, "mask", "ws-mask", prompt), "ws-mask");
      assert.equal(frames.length, 1);
      const png = L.decodePng(frames[0].subarray(8));
      assert.deepEqual([png.width, png.height, png.channels], [4, 2, 3]);
      assert.ok(png.pixels.equals(Buffer.alloc(4 * 2 * 3, 127)), "255 * 0.5 truncates to 127");
    } finally {
      await c.close();
    }
  });
});

// e2e: /view, /upload/image, /upload/mask — happy paths, ComfyUI's rename/overwrite rules,
// conversions, and path traversal (well over 20 variants), each refused with the status the
// spec gives, with the server alive afterwards.
"use strict";
const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("fs");
const path = require("path");
const L = require("./lib/latentd.js");

let srv, outside;
const png = L.pngRGBA(4, 3, (x, y) => [x * 60, y * 80, 100, 128]);
test.before(async () => {
  srv = await L.startLatentd({
    setup(dir) {
      fs.writeFileSync(path.join(dir, "output", "ComfyUI_00001_.png"), png);
      fs.mkdirSync(path.join(dir, "output", "sub"), { recursive: true });
      fs.writeFileSync(path.join(dir, "output", "sub", "deep.png"), png);
      fs.writeFileSync(path.join(dir, "output", "page.html"), "<script>alert(1)</script>");
      fs.writeFileSync(path.join(dir, "output", 'we"ird\r\nX-Evil: 1.png'), png);
      fs.writeFileSync(path.join(dir, "input", "in.png"), png);
      outside = path.join(dir, "secret");
      fs.mkdirSync(outside);
      fs.writeFileSync(path.join(outside, "secret.png"), "SECRET");
      fs.symlinkSync(path.join(outside, "secret.png"), path.join(dir, "output", "link.png"));
      fs.symlinkSync(outside, path.join(dir, "output", "linkdir"));
    },
  });
});
test.after(async () => {
  assert.equal((await srv.stop()).code, 0);
  L.removeDir(srv.dir);
});

async function alive() {
  assert.equal((await L.request(srv, "GET", "/queue")).status, 200);
}

test("/view serves files with ComfyUI's headers", async () => {
  let r = await L.request(srv, "GET", "/view?filename=ComfyUI_00001_.png&type=output&subfolder=&rand=0.1");
  assert.equal(r.status, 200);
  assert.equal(r.headers["content-type"], "image/png");
  assert.equal(r.headers["content-disposition"], 'filename="ComfyUI_00001_.png"');
  assert.ok(r.body.equals(png));
  r = await L.request(srv, "GET", "/api/view?filename=deep.png&subfolder=sub");
  assert.ok(r.body.equals(png));
  r = await L.request(srv, "GET", "/view?filename=ComfyUI_00001_.png%20%5Boutput%5D&type=input");
  assert.equal(r.status, 200, "annotation overrides type");
  r = await L.request(srv, "GET", "/view?filename=sub%2FComfyUI_00001_.png");
  assert.equal(r.status, 200, "directories are stripped from filename");
  r = await L.request(srv, "GET", "/view?filename=in.png&type=input");
  assert.equal(r.status, 200);
  r = await L.request(srv, "GET", "/view?filename=page.html");
  assert.equal(r.headers["content-type"], "application/octet-stream", "html is never served as html");
  r = await L.request(srv, "GET", `/view?filename=${encodeURIComponent('we"ird\r\nX-Evil: 1.png')}`);
  assert.equal(r.status, 200);
  assert.equal(r.headers["content-disposition"], 'filename="we_ird__X-Evil: 1.png"', "no header injection");
  assert.equal(r.headers["x-evil"], undefined);
  r = await L.request(srv, "GET", "/view?filename=nope.png");
  assert.equal(r.status, 404);
  assert.equal(r.body.length, 0);
  r = await L.request(srv, "GET", "/view");
  assert.equal(r.status, 404);
  r = await L.request(srv, "GET", "/view?filename=");
  assert.equal(r.status, 400);
  r = await L.request(srv, "GET", "/view?filename=ComfyUI_00001_.png&type=models");
  assert.equal(r.status, 400);
  r = await L.request(srv, "GET", "/view?filename=sub&type=output");
  assert.equal(r.status, 404, "a directory is not a file");
});

test("/view conversions: channel=rgb, channel=a, preview=jpeg", async () => {
  let r = await L.request(srv, "GET", "/view?filename=ComfyUI_00001_.png&channel=rgb");
  assert.equal(r.headers["content-type"], "image/png");
  let d = L.decodePng(r.body);
  assert.equal(d.channels, 3);
  assert.deepEqual([...d.pixels.subarray(3, 6)], [60, 0, 100]);
  r = await L.request(srv, "GET", "/view?filename=ComfyUI_00001_.png&channel=a");
  d = L.decodePng(r.body);
  assert.equal(d.channels, 4);
  assert.deepEqual([...d.pixels.subarray(4, 8)], [0, 0, 0, 128]);
  r = await L.request(srv, "GET", "/view?filename=ComfyUI_00001_.png&preview=jpeg;50");
  assert.equal(r.headers["content-type"], "image/jpeg");
  assert.equal(r.body[0], 0xff); assert.equal(r.body[1], 0xd8);
  assert.equal(r.headers["content-disposition"], 'filename="ComfyUI_00001_.png"');
});

test("/view refuses path traversal (>= 20 variants)", async () => {
  const variants = [
    // [query, expected status]
    ["filename=../secret/secret.png", 400],
    ["filename=..%2Fsecret%2Fsecret.png", 400],
    ["filename=%2E%2E%2Fsecret%2Fsecret.png", 400],
    ["filename=%2e%2e/%2e%2e/etc/passwd", 400],
    ["filename=/etc/passwd", 400],
    ["filename=%2Fetc%2Fpasswd", 400],
    ["filename=....//....//etc/passwd", 400],
    ["filename=..", 400],
    ["filename=a/../../etc/passwd", 400],
    ["filename=ComfyUI_00001_.png%00.txt", 400],
    ["filename=..%5C..%5Cetc%5Cpasswd", 400],
    ["filename=passwd&subfolder=../../../../etc", 403],
    ["filename=passwd&subfolder=..%2F..%2F..%2F..%2Fetc", 403],
    ["filename=passwd&subfolder=/etc", 403],
    ["filename=passwd&subfolder=%2Fetc", 403],
    ["filename=secret.png&subfolder=..%2Fsecret", 403],
    ["filename=secret.png&subfolder=sub/../../secret", 403],
    ["filename=secret.png&subfolder=linkdir", 403],
    ["filename=link.png", 403],
    ["filename=passwd&subfolder=sub/../../../../../../etc", 403],
    ["filename=hosts&subfolder=....//../../etc", 403],
    ["filename=secret.png&type=input&subfolder=../secret", 403],
    ["filename=secret.png&type=temp&subfolder=../secret", 403],
    ["filename=passwd%20[output]&subfolder=../../../../etc", 403],
    ["filename=passwd&subfolder=%00", 403],
  ];
  assert.ok(variants.length >= 20);
  for (const [q, want] of variants) {
    const r = await L.request(srv, "GET", `/view?${q}`);
    assert.ok(r.status === want || (q.includes("%00") && r.status >= 400 && r.status < 500), `${q} -> ${r.status}, want ${want}`);
    assert.ok(!r.body.toString().includes("SECRET") && !r.body.toString().includes("root:"), `${q} leaked`);
  }
  await alive();
});

function upload(fields, p = "/upload/image") {
  const m = L.multipart(fields);
  return L.request(srv, "POST", p, { body: m.body, headers: { "Content-Type": m.contentType } });
}

test("/upload/image: dedupe, rename, overwrite, subfolders, types", async () => {
  const a = L.pngRGBA(2, 2), b = L.pngRGBA(2, 2, () => [0, 255, 0, 255]);
  let r = await upload({ image: { filename: "up.png", data: a, type: "image/png" } });
  assert.equal(r.status, 200);
  assert.deepEqual(r.json(), { name: "up.png", subfolder: "", type: "input" });
  r = await upload({ image: { filename: "up.png", data: a } });
  assert.deepEqual(r.json().name, "up.png", "same bytes reuse the name");
  r = await upload({ image: { filename: "up.png", data: b } });
  assert.equal(r.json().name, "up (1).png");
  r = await upload({ image: { filename: "up.png", data: Buffer.from("third") } });
  assert.equal(r.json().name, "up (2).png");
  r = await upload({ image: { filename: "up.png", data: b }, overwrite: "true" });
  assert.equal(r.json().name, "up.png");
  assert.ok(fs.readFileSync(path.join(srv.dir, "input", "up.png")).equals(b));
  r = await upload({ image: { filename: "up.png", data: a }, overwrite: "1" });
  assert.ok(fs.readFileSync(path.join(srv.dir, "input", "up.png")).equals(a));
  r = await upload({ image: { filename: "x.png", data: a }, subfolder: "sub/dir", type: "temp" });
  assert.deepEqual(r.json(), { name: "x.png", subfolder: "sub/dir", type: "temp" });
  assert.ok(fs.existsSync(path.join(srv.dir, "temp", "sub", "dir", "x.png")));
  r = await L.request(srv, "GET", "/view?filename=x.png&subfolder=sub/dir&type=temp");
  assert.ok(r.body.equals(a));
  r = await upload({ image: { filename: "o.png", data: a }, type: "output" }, "/api/upload/image");
  assert.equal(r.json().type, "output");
});

test("/upload/image bad inputs: 400 with JSON, traversal refused", async () => {
  const a = L.pngRGBA(1, 1);
  const bad = [
    [{ type: "input" }, "no image part"],
    [{ image: { filename: "", data: a } }, "empty filename"],
    [{ image: { filename: "a.png", data: a }, type: "models" }, "bad type"],
    [{ image: { filename: "a.png", data: a }, subfolder: "../../x" }, "climbing subfolder"],
    [{ image: { filename: "a.png", data: a }, subfolder: "/tmp" }, "absolute subfolder"],
    [{ image: { filename: "a.png", data: a }, subfolder: "sub/../../x" }, "climbing subfolder 2"],
    [{ image: { filename: "../escape.png", data: a } }, "climbing filename"],
    [{ image: { filename: "..", data: a } }, "dotdot filename"],
  ];
  for (const [fields, what] of bad) {
    const r = await upload(fields);
    assert.equal(r.status, 400, what);
    assert.equal(typeof r.json().error.message, "string", what);
  }
  assert.ok(!fs.existsSync(path.join(srv.dir, "escape.png")));
  // Broken multipart bodies.
  const raw = [
    ["text/plain", "hello"],
    ["multipart/form-data", "--x\r\n"],
    ["multipart/form-data; boundary=x", "garbage without boundaries"],
    ["multipart/form-data; boundary=x", "--x\r\nContent-Disposition: form-data; name=\"image\"; filename=\"t.png\"\r\n\r\nabc"],
  ];
  for (const [ct, body] of raw) {
    const r = await L.request(srv, "POST", "/upload/image", { body, headers: { "Content-Type": ct } });
    assert.equal(r.status, 400, `${ct}: ${JSON.stringify(body)}`);
    assert.ok(r.json().error);
  }
  await alive();
});

test("/upload/mask merges the alpha channel into the original", async () => {
  const orig = L.pngRGBA(3, 2, (x) => [10 * x, 20, 30, 255], { prompt: '{"1":{}}', workflow: '{"nodes":[]}' });
  fs.writeFileSync(path.join(srv.dir, "output", "orig.png"), orig);
  const mask = L.pngRGBA(3, 2, (x, y) => [0, 0, 0, x === 0 && y === 0 ? 0 : 200]);
  const m = L.multipart({ image: { filename: "clipspace-mask-1.png", data: mask }, original_ref: JSON.stringify({ filename: "orig.png", subfolder: "", type: "output" }), type: "input" });
  let r = await L.request(srv, "POST", "/upload/mask", { body: m.body, headers: { "Content-Type": m.contentType } });
  assert.equal(r.status, 200);
  assert.deepEqual(r.json(), { name: "clipspace-mask-1.png", subfolder: "", type: "input" });
  const d = L.decodePng(fs.readFileSync(path.join(srv.dir, "input", "clipspace-mask-1.png")));
  assert.deepEqual([...d.pixels.subarray(0, 4)], [0, 20, 30, 0]);
  assert.deepEqual([...d.pixels.subarray(4, 8)], [10, 20, 30, 200]);
  assert.deepEqual(d.text, { prompt: '{"1":{}}', workflow: '{"nodes":[]}' }, "the original's text chunks are kept");
  // A missing original: nothing written, still 200 (ComfyUI quirk).
  const m2 = L.multipart({ image: { filename: "m2.png", data: mask }, original_ref: JSON.stringify({ filename: "missing.png" }) });
  r = await L.request(srv, "POST", "/upload/mask", { body: m2.body, headers: { "Content-Type": m2.contentType } });
  assert.equal(r.status, 200);
  assert.ok(!fs.existsSync(path.join(srv.dir, "input", "m2.png")));
  for (const ref of ["not json", JSON.stringify({ filename: "../x.png" }), JSON.stringify({ filename: "/etc/passwd" }), JSON.stringify({ filename: "orig.png", subfolder: "../.." })]) {
    const m3 = L.multipart({ image: { filename: "m3.png", data: mask }, original_ref: ref });
    r = await L.request(srv, "POST", "/upload/mask", { body: m3.body, headers: { "Content-Type": m3.contentType } });
    assert.equal(r.status, 400, ref);
  }
  await alive();
});

test("/view honours single byte ranges (206/416)", async () => {
  const q = "/view?filename=ComfyUI_00001_.png";
  let r = await L.request(srv, "GET", q, { headers: { Range: "bytes=0-3" } });
  assert.equal(r.status, 206);
  assert.ok(r.body.equals(png.subarray(0, 4)));
  assert.equal(r.headers["content-range"], `bytes 0-3/${png.length}`);
  r = await L.request(srv, "GET", q, { headers: { Range: "bytes=-2" } });
  assert.ok(r.body.equals(png.subarray(png.length - 2)));
  r = await L.request(srv, "GET", q, { headers: { Range: "bytes=10-" } });
  assert.ok(r.body.equals(png.subarray(10)));
  for (const bad of [`bytes=${png.length}-`, "bytes=5-2", "bytes=-0"]) {
    r = await L.request(srv, "GET", q, { headers: { Range: bad } });
    assert.equal(r.status, 416, bad);
    assert.equal(r.headers["content-range"], `bytes */${png.length}`);
  }
  for (const whole of ["bytes=0-1,4-5", "items=0-1", "bytes=x-y"]) {
    r = await L.request(srv, "GET", q, { headers: { Range: whole } });
    assert.equal(r.status, 200, whole);
    assert.ok(r.body.equals(png));
  }
  assert.equal(r.headers["accept-ranges"], "bytes");
});

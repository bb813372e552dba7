// e2e (hardening, issue 11): a second server on the same job database refuses to start and
// names the holder; a full output disk leaves no file behind and says so without the
// server's paths; a JSON body with trailing bytes is a 400, as Python's json.loads makes it.
"use strict";
const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("fs");
const path = require("path");
const { execFileSync } = require("child_process");
const L = require("./lib/latentd.js");

function saveGraph(image, prefix) {
  return {
    1: { class_type: "LoadImage", inputs: { image } },
    2: { class_type: "SaveImage", inputs: { images: ["1", 0], filename_prefix: prefix } },
  };
}

async function historyOf(srv, id) {
  return L.waitFor(async () => (await L.request(srv, "GET", `/history/${id}`)).json()[id], { timeoutMs: 30000 });
}

test("a second latentd on the same database refuses to start, naming the first", async () => {
  const a = await L.startLatentd();
  try {
    await assert.rejects(L.startLatentd({ baseDir: a.dir }), (err) => {
      const m = /in use by another latentd \(pid (\d+)\)/.exec(err.message);
      assert.ok(m, err.message.slice(-600));
      assert.equal(+m[1], a.proc.pid);
      return true;
    });
    // The first one is untouched and still serves.
    assert.equal((await L.request(a, "GET", "/queue")).status, 200);
    // A crash leaves no stale lock: the kernel drops it with the process.
    await a.kill9();
    const b = await L.startLatentd({ baseDir: a.dir });
    assert.equal((await L.request(b, "GET", "/queue")).status, 200);
    await b.stop();
  } finally {
    await a.kill9();
    L.removeDir(a.dir);
  }
});

test("trailing bytes after a JSON body are a 400; trailing whitespace is not", async () => {
  const srv = await L.startLatentd({
    setup(dir) { fs.writeFileSync(path.join(dir, "input", "px.png"), L.pngRGBA(2, 2)); },
  });
  try {
    const body = JSON.stringify({ prompt: saveGraph("px.png", "trail") });
    const hdr = { "Content-Type": "application/json" };
    for (const [p, b] of [["/prompt", body + " x"], ["/prompt", body + "}"], ["/prompt", body + "\0"],
                          ["/queue", '{"clear": false} {}'], ["/history", '{"clear": false}]']]) {
      const r = await L.request(srv, "POST", p, { body: b, headers: hdr });
      assert.equal(r.status, 400, `${p} ${JSON.stringify(b.slice(-12))} -> ${r.status} ${r.text}`);
      assert.ok(r.json().error, "ComfyUI's error shape");
    }
    const ok = await L.request(srv, "POST", "/prompt", { body: body + " \r\n\t", headers: hdr });
    assert.equal(ok.status, 200, ok.text);
    await L.waitIdle(srv);
  } finally {
    await srv.stop();
    L.removeDir(srv.dir);
  }
});

test("a full output disk fails the node and leaves no file behind", async (t) => {
  let mounted = null;
  const noise = L.pngRGBA(256, 256, () => [Math.random() * 256, Math.random() * 256, Math.random() * 256, 255]);
  let srv;
  try {
    srv = await L.startLatentd({
      setup(dir) {
        fs.writeFileSync(path.join(dir, "input", "noise.png"), noise);
        fs.writeFileSync(path.join(dir, "input", "px.png"), L.pngRGBA(2, 2));
        try {
          // 64 KiB: the 256x256 noise PNG (~190 KiB) cannot fit, a 2x2 one can.
          execFileSync("mount", ["-t", "tmpfs", "-o", "size=64k", "tmpfs", path.join(dir, "output")], { stdio: "pipe" });
          mounted = path.join(dir, "output");
        } catch (e) { /* not root, or no mount in this container */ }
      },
    });
    if (!mounted) { t.skip("cannot mount a small tmpfs here (needs root): disk-full case not run"); return; }
    const r = await L.postPrompt(srv, saveGraph("noise.png", "full"));
    assert.equal(r.status, 200, JSON.stringify(r.json));
    const h = await historyOf(srv, r.json.prompt_id);
    assert.equal(h.status.status_str, "error");
    const err = h.status.messages.find((m) => m[0] === "execution_error");
    assert.ok(err, JSON.stringify(h.status));
    assert.equal(err[1].exception_type, "OSError");
    assert.match(err[1].exception_message, /No space left on device/);
    assert.ok(!err[1].exception_message.includes(srv.dir), `no server path: ${err[1].exception_message}`);
    assert.deepEqual(fs.readdirSync(mounted), [], "no 0-byte, partial or temporary file is left");
    // The server lives, and a file that fits is written whole.
    const r2 = await L.postPrompt(srv, saveGraph("px.png", "fits"));
    const h2 = await historyOf(srv, r2.json.prompt_id);
    assert.equal(h2.status.status_str, "success", JSON.stringify(h2.status));
    assert.deepEqual(fs.readdirSync(mounted), ["fits_00001_.png"]);
    const png = L.decodePng(fs.readFileSync(path.join(mounted, "fits_00001_.png")));
    assert.equal(png.width, 2);
  } finally {
    if (srv) await srv.stop();
    if (mounted) execFileSync("umount", [mounted]);
    if (srv) L.removeDir(srv.dir);
  }
});

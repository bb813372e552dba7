// e2e: slow and oversized HTTP clients cannot hang the server (issue 11, item 1). A flood of
// 2000 trickling sockets while fresh requests are served and after which the server answers
// at once; deadlines on the request head (also a keep-alive connection's next head) and the
// body that trickled bytes do not reset; 413 for an oversize Content-Length and for a chunked
// body (chunk size 2^64-1) the moment it passes --max-upload-size; 503 past the per-address
// cap; 400 for a WebSocket upgrade without a key or with a bad version.
"use strict";
const test = require("node:test");
const assert = require("node:assert/strict");
const net = require("net");
const L = require("./lib/latentd.js");

const FLOOD = 2000;

// Connect, write `first`, and collect everything until the server closes (or timeoutMs).
// Resolves { text, closedAfterMs }.
function rawSession(srv, first, { timeoutMs = 8000, onOpen } = {}) {
  return new Promise((resolve) => {
    const chunks = [];
    const t0 = Date.now();
    const sock = net.connect(srv.port, "127.0.0.1", () => {
      if (first) sock.write(first);
      if (onOpen) onOpen(sock);
    });
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      clearTimeout(t);
      sock.destroy();
      resolve({ text: Buffer.concat(chunks).toString("latin1"), closedAfterMs: Date.now() - t0, sock });
    };
    const t = setTimeout(finish, timeoutMs);
    sock.on("data", (c) => chunks.push(c));
    sock.on("close", finish);
    sock.on("error", finish);
  });
}

function statusOf(text) {
  const m = text.match(/^HTTP\/1\.[01] (\d{3})/);
  return m ? +m[1] : 0;
}

async function timedGet(srv, path) {
  const t0 = Date.now();
  const r = await L.request(srv, "GET", path);
  return { status: r.status, ms: Date.now() - t0 };
}

test("2000 trickling sockets: fresh requests are served meanwhile and at once afterwards", async () => {
  // The slow sockets must outlive the flood, so the head deadline is longer than it.
  const srv = await L.startLatentd({ args: ["--head-timeout", "60"], nofile: 16384 });
  const socks = [];
  let trickle;
  try {
    let closedByServer = 0;
    for (let k = 0; k < FLOOD; k++) {
      const s = net.connect(srv.port, "127.0.0.1", () => s.write("GET /queue HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "));
      s.on("error", () => {});
      s.on("close", () => { closedByServer++; });
      socks.push(s);
      if (k % 200 === 199) await L.sleep(50); // let the kernel backlog drain a little
    }
    // One byte a second on every socket, never the end of the head.
    trickle = setInterval(() => { for (const s of socks) if (!s.destroyed && s.writable) s.write("a"); }, 1000);
    const worst = [];
    const t0 = Date.now();
    while (Date.now() - t0 < 12000) {
      const r = await timedGet(srv, "/queue");
      assert.equal(r.status, 200, "a fresh GET /queue is answered during the flood");
      worst.push(r.ms);
      await L.sleep(250);
    }
    worst.sort((a, b) => a - b);
    const p90 = worst[Math.floor(worst.length * 0.9)];
    assert.ok(p90 < 1000, `fresh requests stay fast during the flood (p90 ${p90} ms, all: ${worst.join(",")})`);
    assert.ok(closedByServer < FLOOD / 10, `the slow sockets are held, not dropped (${closedByServer} closed)`);
  } finally {
    clearInterval(trickle);
    for (const s of socks) s.destroy();
  }
  // Recovery the moment the abuse stops.
  await L.sleep(200);
  for (let k = 0; k < 10; k++) {
    const r = await timedGet(srv, "/queue");
    assert.equal(r.status, 200);
    assert.ok(r.ms < 500, `answered at once after the flood (${r.ms} ms)`);
  }
  assert.equal((await srv.stop()).code, 0);
  L.removeDir(srv.dir);
});

test("deadlines, size limits and handshakes", async (t) => {
  const srv = await L.startLatentd({ args: ["--head-timeout", "2", "--body-timeout", "2", "--max-upload-size", "1"] });
  t.after(async () => { assert.equal((await srv.stop()).code, 0); L.removeDir(srv.dir); });

  await t.test("a trickled head gets 408 at the head deadline, not later", async () => {
    let timer;
    const r = await rawSession(srv, "GET /queue HTTP/1.1\r\nHost: x\r\n", {
      onOpen: (s) => { timer = setInterval(() => { if (s.writable) s.write("X"); }, 100); },
    });
    clearInterval(timer);
    assert.equal(statusOf(r.text), 408, JSON.stringify(r.text.slice(0, 80)));
    assert.ok(r.closedAfterMs >= 1500 && r.closedAfterMs < 4500, `closed after ${r.closedAfterMs} ms`);
  });

  await t.test("a keep-alive connection's next head has the same deadline", async () => {
    let timer;
    const r = await rawSession(srv, "GET /queue HTTP/1.1\r\nHost: x\r\n\r\n", {
      onOpen: (s) => {
        s.once("data", () => {
          s.write("GET /queue HTTP/1.1\r\n");
          timer = setInterval(() => { if (s.writable) s.write("X"); }, 100);
        });
      },
    });
    clearInterval(timer);
    assert.equal(statusOf(r.text), 200, "the first request is served");
    assert.ok(r.closedAfterMs < 4500, `the trickled second head is cut off (after ${r.closedAfterMs} ms)`);
  });

  await t.test("a trickled body is cut off at the body deadline", async () => {
    let timer;
    const r = await rawSession(srv, "POST /prompt HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{", {
      onOpen: (s) => { timer = setInterval(() => { if (s.writable) s.write(" "); }, 100); },
    });
    clearInterval(timer);
    assert.ok(r.closedAfterMs < 4500, `closed after ${r.closedAfterMs} ms`);
    assert.ok(statusOf(r.text) !== 200, "no route ran on a partial body");
  });

  await t.test("an oversize Content-Length gets 413", async () => {
    const r = await rawSession(srv, "POST /prompt HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n\r\n", { timeoutMs: 3000 });
    assert.equal(statusOf(r.text), 413, JSON.stringify(r.text.slice(0, 80)));
  });

  await t.test("a chunk size of 2^64-1 gets 413 once the bytes pass the limit", async () => {
    // The client sends a little past the 1 MiB limit, then waits for the answer. One that
    // kept sending after it would have data in flight when the server closes, and its
    // kernel may answer the RST by dropping the 413 unread (seen once in six CI runs with
    // 8 MiB): libmicrohttpd has no lingering close to avoid that.
    const block = Buffer.alloc(64 * 1024, 0x61);
    const total = 1024 * 1024 + 2 * block.length;
    let sent = 0;
    const r = await rawSession(srv, "POST /prompt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n", {
      timeoutMs: 6000,
      onOpen: (s) => {
        const pump = () => {
          while (s.writable && sent < total) {
            sent += block.length;
            if (!s.write(block)) { s.once("drain", pump); return; }
          }
        };
        pump();
      },
    });
    assert.equal(statusOf(r.text), 413, `${JSON.stringify(r.text.slice(0, 80))} after ${sent} bytes sent`);
    assert.ok(r.closedAfterMs < 5000, `closed after ${r.closedAfterMs} ms`);
  });

  await t.test("a WebSocket upgrade without a key or with a bad version gets 400", async () => {
    const base = "GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n";
    for (const head of [
      base + "Sec-WebSocket-Version: 13\r\n\r\n",
      base + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 7\r\n\r\n",
      base + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
    ]) {
      const r = await rawSession(srv, head, { timeoutMs: 3000 });
      assert.equal(statusOf(r.text), 400, `${JSON.stringify(head)} -> ${JSON.stringify(r.text.slice(0, 80))}`);
      assert.match(r.text, /Sec-WebSocket/, "the body says what was wrong");
    }
    const ws = await L.openWs(srv, { clientId: "ok" });
    await ws.waitFor((m) => m.type === "status");
    await ws.close();
  });

  await t.test("the server still answers after all of it", async () => {
    assert.equal((await timedGet(srv, "/queue")).status, 200);
  });
});

test("per-address cap: 503 past it, served again once a connection closes", async () => {
  const srv = await L.startLatentd({ args: ["--max-connections-per-ip", "4"] });
  const held = [];
  try {
    // Four keep-alive connections, each with one request served and left open.
    for (let k = 0; k < 4; k++) {
      const s = net.connect(srv.port, "127.0.0.1");
      s.on("error", () => {});
      await new Promise((r) => s.once("connect", r));
      s.write("GET /queue HTTP/1.1\r\nHost: x\r\n\r\n");
      const d = await new Promise((r) => s.once("data", r));
      assert.equal(statusOf(d.toString("latin1")), 200);
      held.push(s);
    }
    const r = await rawSession(srv, "GET /queue HTTP/1.1\r\nHost: x\r\n\r\n", { timeoutMs: 3000 });
    assert.equal(statusOf(r.text), 503, JSON.stringify(r.text.slice(0, 80)));
    held.pop().destroy();
    const ok = await L.waitFor(async () => { try { return (await L.request(srv, "GET", "/queue")).status === 200; } catch { return false; } }, { timeoutMs: 5000 });
    assert.ok(ok);
  } finally {
    for (const s of held) s.destroy();
    assert.equal((await srv.stop()).code, 0);
    L.removeDir(srv.dir);
  }
});

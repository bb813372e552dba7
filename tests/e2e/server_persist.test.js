// e2e: the SQLite job store survives kill -9. Pending jobs run after the restart, the job
// that was running is queued again in its place (once: hardening_oom.test.js covers a job
// running at two crashes), finished history is intact, and the priority counter keeps
// counting.
"use strict";
const test = require("node:test");
const assert = require("node:assert/strict");
const L = require("./lib/latentd.js");

function prompt(prefix, size, batch = 1) {
  return {
    1: { class_type: "EmptyImage", inputs: { width: size, height: size, batch_size: batch, color: 4242 } },
    2: { class_type: "ImageInvert", inputs: { image: ["1", 0] } },
    3: { class_type: "SaveImage", inputs: { images: ["2", 0], filename_prefix: prefix } },
  };
}

test("pending jobs survive kill -9; the running one runs again first", async () => {
  let srv = await L.startLatentd();
  const dir = srv.dir;
  try {
    // One finished job before the crash.
    const first = await L.postPrompt(srv, prompt("before", 8), { prompt_id: "before" });
    assert.equal(first.status, 200);
    await L.waitFor(async () => (await L.request(srv, "GET", "/history/before")).json().before);
    // A slow job, then small ones behind it.
    const slow = await L.postPrompt(srv, prompt("slow", 3072, 3), { prompt_id: "slow", client_id: "c" });
    assert.equal(slow.status, 200);
    const ids = [];
    for (let i = 0; i < 5; i++) {
      const r = await L.postPrompt(srv, prompt(`p${i}`, 8), { prompt_id: `pending-${i}`, extra_data: { extra_pnginfo: { workflow: { n: i } } } });
      assert.equal(r.status, 200);
      ids.push(r.json.prompt_id);
    }
    const snap = (await L.request(srv, "GET", "/queue")).json();
    const running = snap.queue_running.map((i) => i[1]);
    const pending = snap.queue_pending.map((i) => i[1]);
    assert.deepEqual(running, ["slow"], "the slow job is running at the kill");
    assert.deepEqual(pending, ids);
    const lastNumber = snap.queue_pending[snap.queue_pending.length - 1][0];
    await srv.kill9();
    assert.equal(srv.exitSignal, "SIGKILL");

    srv = await L.startLatentd({ baseDir: dir });
    await L.waitIdle(srv);
    const h = (await L.request(srv, "GET", "/history")).json();
    assert.ok(h.before, "history from before the crash is intact");
    assert.equal(h.before.status.status_str, "success");
    const s = h.slow;
    assert.ok(s, "the running job ran again after the restart");
    assert.equal(s.status.status_str, "success");
    for (const id of ids) {
      assert.ok(h[id], `${id} ran after the restart`);
      assert.equal(h[id].status.status_str, "success", id);
      assert.deepEqual(h[id].prompt[3].extra_pnginfo.workflow.n, Number(id.split("-")[1]));
    }
    // They ran in queue order, the interrupted one first (its number is the smallest).
    const order = Object.keys(h);
    assert.deepEqual(order.slice(order.indexOf("slow")), ["slow", ...ids]);
    const next = await L.postPrompt(srv, prompt("next", 8));
    assert.ok(next.json.number > lastNumber, `counter continues (${next.json.number} > ${lastNumber})`);
    await L.waitIdle(srv);
    // A clean stop keeps history too.
    assert.equal((await srv.stop()).code, 0);
    srv = await L.startLatentd({ baseDir: dir });
    assert.ok((await L.request(srv, "GET", `/history/${next.json.prompt_id}`)).json()[next.json.prompt_id]);
  } finally {
    await srv.stop();
    L.removeDir(dir);
  }
});

test("temp/ is wiped at start", async () => {
  const fs = require("fs"), path = require("path");
  let srv = await L.startLatentd();
  const dir = srv.dir;
  try {
    await srv.stop();
    assert.ok(!fs.existsSync(path.join(dir, "temp")), "temp is removed at exit");
    fs.mkdirSync(path.join(dir, "temp", "sub"), { recursive: true });
    fs.writeFileSync(path.join(dir, "temp", "sub", "stale.png"), "x");
    fs.writeFileSync(path.join(dir, "temp", "stale.png"), "x");
    srv = await L.startLatentd({ baseDir: dir });
    assert.ok(!fs.existsSync(path.join(dir, "temp", "stale.png")));
    assert.ok(fs.existsSync(path.join(dir, "temp")));
  } finally {
    await srv.stop();
    L.removeDir(dir);
  }
});

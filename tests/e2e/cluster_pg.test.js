// e2e: several latentd processes on one PostgreSQL store (issue 18). A private PostgreSQL
// server is started for the test (lib/postgres.js); without one the tests skip, saying why.
//   - N prompts posted round-robin to three fronts by WebSocket clients connected to other
//     fronts: each runs exactly once, each client gets its own events, in ComfyUI's order;
//     /queue, /history, /system_stats workers are cluster-wide; /view on any front serves
//     any worker's output; an upload through one front is usable by prompts on any worker;
//     /interrupt on one front stops the prompt on the worker that runs it.
//   - kill -9 of the worker running a job, twice: re-run once after its lease expires,
//     then failed with a message (srv_store.h's attempts rule); the queue drains.
//   - model affinity: prompts naming a checkpoint go to the live worker that holds it
//     (--affinity-wait), so each worker loads its checkpoint once.
"use strict";
const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("fs");
const path = require("path");
const L = require("./lib/latentd.js");
const P = require("./lib/postgres.js");

const N = parseInt(process.env.LATENTD_CLUSTER_PROMPTS || "300", 10);

// SaveImage is node 3; `more` extra ImageInverts (nodes 4..) sit between the first and
// the save, so a long prompt has node boundaries, where an interrupt is seen, all along
// its run (one 3072^2 x 3 chain spent its time in the save, the last node: an interrupt
// relayed through PostgreSQL on a loaded machine arrived after it began: 1 of 4 clean CI
// runs).
function invertPrompt(prefix, size = 8, batch = 1, more = 0) {
  const p = {
    1: { class_type: "EmptyImage", inputs: { width: size, height: size, batch_size: batch, color: 4242 } },
    2: { class_type: "ImageInvert", inputs: { image: ["1", 0] } },
  };
  let last = "2";
  for (let i = 0; i < more; i++) {
    p[4 + i] = { class_type: "ImageInvert", inputs: { image: [last, 0] } };
    last = String(4 + i);
  }
  p[3] = { class_type: "SaveImage", inputs: { images: [last, 0], filename_prefix: prefix } };
  return p;
}

function loadPrompt(prefix, image) {
  return {
    1: { class_type: "LoadImage", inputs: { image } },
    2: { class_type: "ImageInvert", inputs: { image: ["1", 0] } },
    3: { class_type: "SaveImage", inputs: { images: ["2", 0], filename_prefix: prefix } },
  };
}

async function withPostgres(t, fn) {
  const pg = await P.startPostgres();
  if (pg.skip) {
    t.skip(`PostgreSQL unavailable: ${pg.skip}`);
    return;
  }
  const servers = [];
  try {
    await fn(pg, servers);
  } catch (e) {
    for (const s of servers) console.error(`--- ${s.dir}\n${s.log().slice(-3000)}`);
    throw e;
  } finally {
    for (const s of servers) { await s.stop(); L.removeDir(s.dir); }
    await pg.stop();
  }
}

async function startCluster(servers, url, n, extra = []) {
  for (let i = 0; i < n; i++)
    servers.push(await L.startLatentd({ args: ["--database-url", url, "--lease-seconds", "3", ...extra] }));
  return servers.slice(-n);
}

const history = async (s) => (await L.request(s, "GET", "/history")).json();

// The events of one prompt, in arrival order, as [type, node?] pairs.
function promptEvents(ws, pid) {
  return ws.messages.filter((m) => m.data && m.data.prompt_id === pid).map((m) => m.type);
}

test("three processes share one queue, history and event stream", { timeout: 300000 }, async (t) => {
  await withPostgres(t, async (pg, servers) => {
    const url = pg.createDatabase("cluster");
    const fronts = await startCluster(servers, url, 3);
    // Every live process is listed, with its device, beside ComfyUI's own fields.
    const stats = await L.waitFor(async () => {
      const s = (await L.request(fronts[0], "GET", "/system_stats")).json();
      return s.workers && s.workers.length === 3 && s;
    });
    assert.ok(stats.system && Array.isArray(stats.devices), "ComfyUI's fields are still there");
    assert.ok(stats.workers.every((w) => w.worker === true && w.device && w.pid > 0));
    assert.deepEqual(new Set(stats.workers.map((w) => w.pid)), new Set(fronts.map((f) => f.proc.pid)));

    // An upload through front 0; prompts naming it are validated and run everywhere.
    const png = L.pngRGBA(4, 4, (x, y) => [x * 60, y * 60, 7, 255]);
    const m = L.multipart({ image: { filename: "shared.png", data: png, type: "image/png" } });
    const up = await L.request(fronts[0], "POST", "/upload/image", { body: m.body, headers: { "Content-Type": m.contentType } });
    assert.equal(up.status, 200);

    const clients = [];
    for (let k = 0; k < 3; k++) clients.push(await L.openWs(fronts[k], { clientId: `client-${k}` }));
    const posted = []; // { pid, client }
    const t0 = Date.now();
    for (let i = 0; i < N; i++) {
      const front = i % 3, client = (i + 1) % 3; // posted to one front by a client on another
      const pid = `p-${String(i).padStart(4, "0")}`;
      const prompt = i % 2 ? invertPrompt(pid) : loadPrompt(pid, "shared.png");
      const r = await L.postPrompt(fronts[front], prompt, { prompt_id: pid, client_id: `client-${client}` });
      assert.equal(r.status, 200, r.text);
      posted.push({ pid, client });
    }
    // Cluster-wide history: every front sees every prompt finish.
    const h = await L.waitFor(async () => {
      const hh = await history(fronts[1]);
      return posted.every((p) => hh[p.pid]) && hh;
    }, { timeoutMs: 240000, intervalMs: 200 });
    const secs = (Date.now() - t0) / 1000;
    console.log(`# ${N} prompts through 3 workers in ${secs.toFixed(2)} s (${(N / secs).toFixed(1)}/s)`);
    for (const p of posted) {
      const e = h[p.pid];
      assert.equal(e.status.status_str, "success", `${p.pid}: ${JSON.stringify(e.status.messages)}`);
      const starts = e.status.messages.filter((x) => x[0] === "execution_start");
      assert.equal(starts.length, 1, `${p.pid} started once`);
    }
    for (const f of fronts) {
      const q = (await L.request(f, "GET", "/queue")).json();
      assert.deepEqual([q.queue_running.length, q.queue_pending.length], [0, 0]);
      assert.equal(Object.keys(await history(f)).length, N);
      assert.equal((await L.request(f, "GET", "/prompt")).json().exec_info.queue_remaining, 0);
    }
    // Each ran exactly once: one output file per prompt across all the workers' folders,
    // and more than one worker did the work.
    const made = new Map();
    const busy = new Set();
    for (const f of fronts)
      for (const name of fs.readdirSync(path.join(f.dir, "output"))) {
        const pid = name.replace(/_\d+_\.png$/, "");
        made.set(pid, (made.get(pid) || 0) + 1);
        busy.add(f.dir);
      }
    for (const p of posted) assert.equal(made.get(p.pid), 1, `${p.pid}: one output file`);
    assert.ok(busy.size >= 2, `work spread over ${busy.size} workers`);

    // Each client got the events of its own prompts, in ComfyUI's order, and no others.
    await L.waitFor(() => posted.every((p) => promptEvents(clients[p.client], p.pid).includes("execution_success")), { timeoutMs: 20000 });
    await new Promise((r) => setTimeout(r, 500));
    for (const p of posted) {
      const ev = promptEvents(clients[p.client], p.pid);
      const core = ev.filter((x) => x !== "status" && x !== "progress" && x !== "progress_state" && x !== "execution_cached");
      assert.equal(core[0], "execution_start", `${p.pid}: ${core}`);
      assert.equal(core.filter((x) => x === "executed").length, 1, `${p.pid}: ${core}`);
      assert.ok(core.indexOf("executing") < core.indexOf("executed"), `${p.pid}: ${core}`);
      assert.equal(core[core.length - 2], "execution_success", `${p.pid}: ${core}`);
      assert.equal(core[core.length - 1], "executing", `${p.pid}: ${core} (executing{node:null} last)`);
      for (let k = 0; k < 3; k++)
        if (k !== p.client) assert.equal(promptEvents(clients[k], p.pid).length, 0, `${p.pid} leaked to client-${k}`);
    }

    // /view on every front serves an output whichever worker made it.
    for (const p of posted.slice(0, 6)) {
      const img = h[p.pid].outputs["3"].images[0];
      const q = `/view?filename=${encodeURIComponent(img.filename)}&subfolder=${encodeURIComponent(img.subfolder)}&type=${img.type}`;
      const bodies = [];
      for (const f of fronts) {
        const r = await L.request(f, "GET", q);
        assert.equal(r.status, 200, `${q} on ${f.url}`);
        bodies.push(r.body);
      }
      assert.ok(bodies.every((b) => b.equals(bodies[0])), "the same bytes everywhere");
      assert.equal(L.decodePng(bodies[0]).width, p.pid.endsWith("0") || Number(p.pid.slice(2)) % 2 === 0 ? 4 : 8);
    }

    // /interrupt on a front that does not run the prompt reaches the worker that does.
    const slowClient = clients[0];
    const r = await L.postPrompt(fronts[0], invertPrompt("slow", 3072, 3, 12), { prompt_id: "slow", client_id: "client-0" });
    assert.equal(r.status, 200);
    const runner = await L.waitFor(async () => {
      const s = (await L.request(fronts[0], "GET", "/system_stats")).json();
      return s.workers.find((w) => w.running === "slow");
    }, { timeoutMs: 20000, intervalMs: 20 });
    const other = fronts.find((f) => f.proc.pid !== runner.pid);
    assert.equal((await L.request(other, "POST", "/interrupt", { json: { prompt_id: "slow" } })).status, 200);
    const hs = await L.waitFor(async () => (await L.request(fronts[2], "GET", "/history/slow")).json().slow, { timeoutMs: 30000 });
    assert.equal(hs.status.status_str, "error");
    assert.ok(hs.status.messages.some((x) => x[0] === "execution_interrupted"), JSON.stringify(hs.status.messages));
    await slowClient.waitFor((m) => m.type === "execution_interrupted" && m.data.prompt_id === "slow");
    for (const c of clients) await c.close();
  });
});

test("kill -9 of the worker running a job: re-run once, then failed; the queue drains", { timeout: 300000 }, async (t) => {
  await withPostgres(t, async (pg, servers) => {
    const url = pg.createDatabase("crash");
    const workers = await startCluster(servers, url, 3);
    const [api] = await startCluster(servers, url, 1, ["--no-worker"]);
    const ws = await L.openWs(api, { clientId: "watcher" });
    const stats = (await L.request(api, "GET", "/system_stats")).json();
    assert.equal(stats.workers.find((w) => w.pid === api.proc.pid).worker, false, "--no-worker is listed as such");

    assert.equal((await L.postPrompt(api, invertPrompt("slow", 3072, 3), { prompt_id: "slow", client_id: "watcher" })).status, 200);
    const small = [];
    for (let i = 0; i < 6; i++) {
      const pid = `small-${i}`;
      assert.equal((await L.postPrompt(api, invertPrompt(pid), { prompt_id: pid, client_id: "watcher" })).status, 200);
      small.push(pid);
    }
    const killed = new Set();
    const starts = () => promptEvents(ws, "slow").filter((x) => x === "execution_start").length;
    const killRunner = async (nth) => {
      // A dead worker stays listed (with its job) until its heartbeat and lease run out.
      const w = await L.waitFor(async () => {
        const s = (await L.request(api, "GET", "/system_stats")).json();
        return s.workers.find((x) => x.running === "slow" && !killed.has(x.pid));
      }, { timeoutMs: 60000, intervalMs: 20 });
      // Kill it once its run has begun and been announced (the nth execution_start reached
      // the watcher): listed as running, a worker that had only claimed the job could die
      // before starting it, and the run would leave no start to count.
      await L.waitFor(async () => starts() >= nth, { timeoutMs: 60000, intervalMs: 20 });
      const victim = workers.find((s) => s.proc.pid === w.pid);
      killed.add(w.pid);
      await victim.kill9();
      return victim;
    };
    // First death: its lease runs out and another worker runs it again.
    const first = await killRunner(1);
    // Second death: the job was running each of the 2 times a worker died: failed.
    const second = await killRunner(2);
    assert.notEqual(first.proc.pid, second.proc.pid);
    const h = await L.waitFor(async () => {
      const hh = await history(api);
      return hh.slow && small.every((p) => hh[p]) && hh;
    }, { timeoutMs: 60000, intervalMs: 200 });
    assert.equal(h.slow.status.status_str, "error");
    const err = h.slow.status.messages.find((x) => x[0] === "execution_error");
    assert.match(err[1].exception_message, /died each of the 2 times/);
    for (const p of small) assert.equal(h[p].status.status_str, "success", p);
    await L.waitIdle(api);
    // The watcher heard the verdict, then idle, for the failed prompt.
    await ws.waitFor((m) => m.type === "execution_error" && m.data.prompt_id === "slow", 10000);
    const ev = promptEvents(ws, "slow");
    assert.equal(ev.filter((x) => x === "execution_start").length, 2, `two starts: ${ev}`);
    assert.equal(ev[ev.length - 1], "executing", `${ev}`);
    // The survivor keeps working.
    const survivor = workers.find((s) => s !== first && s !== second);
    assert.equal((await L.postPrompt(survivor, invertPrompt("after"), { prompt_id: "after" })).status, 200);
    await L.waitFor(async () => (await L.request(api, "GET", "/history/after")).json().after, { timeoutMs: 20000 });
    await ws.close();
  });
});

test("PostgreSQL restarted mid-run: the processes reconnect and carry on; nothing is lost", { timeout: 300000 }, async (t) => {
  await withPostgres(t, async (pg, servers) => {
    const url = pg.createDatabase("restart");
    const fronts = await startCluster(servers, url, 2);
    const ws = await L.openWs(fronts[1], { clientId: "r" });
    const ids = [];
    const post = async (i) => {
      const pid = `r-${i}`;
      // A front may answer 500 while its connection is being re-established: retry.
      await L.waitFor(async () => (await L.postPrompt(fronts[i % 2], invertPrompt(pid, 1024, 2), { prompt_id: pid, client_id: "r" })).status === 200,
        { timeoutMs: 20000, intervalMs: 200 });
      ids.push(pid);
    };
    for (let i = 0; i < 10; i++) await post(i);
    const before = Object.keys(await history(fronts[0])).length;
    assert.ok(before < 10, `the restart comes mid-run (${before} of 10 done)`);
    await pg.restart();
    for (let i = 10; i < 20; i++) await post(i);
    const h = await L.waitFor(async () => {
      try {
        const hh = await history(fronts[0]);
        return ids.every((p) => hh[p]) && hh;
      } catch { return false; }
    }, { timeoutMs: 120000, intervalMs: 300 });
    for (const p of ids) assert.equal(h[p].status.status_str, "success", `${p}: ${JSON.stringify(h[p].status.messages)}`);
    await L.waitIdle(fronts[1], 30000);
    // Events still flow after the restart.
    await ws.waitFor((m) => m.type === "execution_success" && m.data.prompt_id === "r-19", 30000);
    assert.ok(fronts.some((f) => /reconnected|connection restored/.test(f.log())), "a reconnection is logged");
    await ws.close();
  });
});

// Model affinity (srv_store_pg.c pg_claim): two workers, two checkpoints, prompts naming
// them alternately. Worker A is made to hold c1 and B c2 (the models of the last job each
// ran, as pg_finish records them); every c1 prompt must then run on A and every c2 prompt
// on B, so each loads its checkpoint once. Plain FIFO would hand them out by arrival.
test("model affinity: a prompt goes to the worker that holds its checkpoint", { timeout: 300000 }, async (t) => {
  const gen = process.env.LATENTD_GEN_CKPT || path.join(path.dirname(L.latentdBin()), "gen_ckpt");
  if (!fs.existsSync(gen)) { t.skip(`no ${gen}`); return; }
  const os = require("os");
  const { spawnSync } = require("child_process");
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "latentd-aff-"));
  for (const [n, seed] of [["c1", "1"], ["c2", "2"]]) {
    const r = spawnSync(gen, ["--tiny", "--seed", seed, path.join(tmp, `${n}.safetensors`)], { encoding: "utf8" });
    assert.equal(r.status, 0, r.stderr);
  }
  const setup = (dir) => {
    for (const n of ["c1", "c2"]) fs.copyFileSync(path.join(tmp, `${n}.safetensors`), path.join(dir, "models", "checkpoints", `${n}.safetensors`));
  };
  const decode = (ckpt, prefix) => ({
    1: { class_type: "CheckpointLoaderSimple", inputs: { ckpt_name: ckpt } },
    2: { class_type: "EmptyLatentImage", inputs: { width: 64, height: 64, batch_size: 1 } },
    3: { class_type: "VAEDecode", inputs: { samples: ["2", 0], vae: ["1", 2] } },
    4: { class_type: "SaveImage", inputs: { images: ["3", 0], filename_prefix: prefix } },
  });
  try {
    await withPostgres(t, async (pg, servers) => {
      const url = pg.createDatabase("affinity");
      for (let i = 0; i < 2; i++)
        servers.push(await L.startLatentd({ setup, args: ["--database-url", url, "--affinity-wait", "120"] }));
      const [A, B] = servers;
      // B registers itself after it starts listening: wait until A's view lists both.
      let workers = [];
      for (let i = 0; i < 100; i++) {
        workers = (await L.request(A, "GET", "/system_stats")).json().workers;
        if (servers.every((s) => workers.some((x) => x.pid === s.proc.pid))) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      const idOf = (s) => {
        const w = workers.find((x) => x.pid === s.proc.pid);
        assert.ok(w, `worker of pid ${s.proc.pid} listed: ${JSON.stringify(workers)}`);
        return w.id;
      };
      pg.psql("affinity", `UPDATE latentd_workers SET models='{checkpoints/c1.safetensors}' WHERE id='${idOf(A)}'`);
      pg.psql("affinity", `UPDATE latentd_workers SET models='{checkpoints/c2.safetensors}' WHERE id='${idOf(B)}'`);
      const want = {};
      for (let i = 0; i < 12; i++) {
        const ck = i % 2 ? "c2" : "c1";
        const pid = `aff-${i}`;
        const r = await L.postPrompt(servers[i % 2], decode(`${ck}.safetensors`, pid), { prompt_id: pid });
        assert.equal(r.status, 200, r.text);
        want[pid] = ck === "c1" ? A : B;
      }
      const h = await L.waitFor(async () => {
        const hh = await history(A);
        return Object.keys(want).every((p) => hh[p]) && hh;
      }, { timeoutMs: 120000, intervalMs: 300 });
      for (const p of Object.keys(want)) {
        assert.equal(h[p].status.status_str, "success", `${p}: ${JSON.stringify(h[p].status.messages)}`);
        assert.match(want[p].log(), new RegExp(`prompt '${p}': started`), `${p} ran on the worker holding its checkpoint`);
      }
      for (const [s, ck] of [[A, "c1"], [B, "c2"]]) {
        const loads = s.log().match(/loaded '[^']*checkpoints\/c\d\.safetensors'/g) || [];
        assert.deepEqual(loads.map((l) => l.slice(-15, -1)), [`${ck}.safetensors`], "one load of its own checkpoint");
      }
    });
  } finally {
    L.removeDir(tmp);
  }
});

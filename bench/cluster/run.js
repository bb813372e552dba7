// bench/cluster/run.js LATENTD_BIN — throughput and latency of latentd processes sharing one
// PostgreSQL store (issue 18), against one process on SQLite, all in the same run:
//   - model-free prompts (EmptyImage 64x64 -> ImageInvert -> SaveImage) through 1, 2 and 3
//     workers: prompts/s and the ratio to 1 worker;
//   - submit -> execution_start p50/p99 as seen by a WebSocket client (under load, and idle
//     with one prompt at a time): one process on
//     SQLite (events in process), one on PostgreSQL (events through the database), and a
//     client on an API-only front while workers elsewhere run the prompts (cross-instance);
//   - the queue alone: POST /prompt through three --no-worker fronts (no worker drains it),
//     prompts/s accepted into one database;
//   - tiny-checkpoint txt2img prompts through 1, 2 and 3 workers: prompts/s and ratios;
//   - model affinity: 2 workers, tiny checkpoints c1/c2 named alternately by txt2img
//     prompts, with --affinity-wait 0 (FIFO) and 10: checkpoint loads and wall time.
// PROMPTS (default 200), CONCURRENCY (posting clients, default 8).
"use strict";
const path = require("path");
const L = require("../../tests/e2e/lib/latentd.js");
const P = require("../../tests/e2e/lib/postgres.js");

const N = parseInt(process.env.PROMPTS || "200", 10);
const C = parseInt(process.env.CONCURRENCY || "8", 10);

const prompt = (prefix) => ({
  1: { class_type: "EmptyImage", inputs: { width: 64, height: 64, batch_size: 1, color: 4242 } },
  2: { class_type: "ImageInvert", inputs: { image: ["1", 0] } },
  3: { class_type: "SaveImage", inputs: { images: ["2", 0], filename_prefix: prefix } },
});

const pct = (v, p) => { const s = [...v].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(p * s.length))]; };

// Post N prompts from C concurrent posters to `fronts` (round-robin); a client on `wsFront`
// times execution_start and counts execution_success.
async function drive(fronts, wsFront, tag) {
  const ws = await L.openWs(wsFront, { clientId: `bench-${tag}` });
  const posted = new Map(), lat = [];
  let done = 0, lastDone = 0;
  const finished = new Promise((resolve) => {
    ws.ws.on("message", (data, bin) => {
      if (bin) return;
      const m = JSON.parse(data.toString());
      if (m.type === "execution_start" && posted.has(m.data.prompt_id)) lat.push(performance.now() - posted.get(m.data.prompt_id));
      if (m.type === "execution_success" && ++done === N) { lastDone = performance.now(); resolve(); }
    });
  });
  const t0 = performance.now();
  let next = 0;
  await Promise.all(Array.from({ length: C }, async () => {
    while (next < N) {
      const i = next++, pid = `${tag}-${i}`;
      posted.set(pid, performance.now());
      const r = await L.postPrompt(fronts[i % fronts.length], prompt(pid), { prompt_id: pid, client_id: `bench-${tag}` });
      if (r.status !== 200) throw new Error(`${pid}: ${r.status} ${r.text}`);
    }
  }));
  await finished;
  await ws.close();
  return { rate: N / ((lastDone - t0) / 1000), p50: pct(lat, 0.5), p99: pct(lat, 0.99) };
}

// One prompt at a time on an idle system: submit -> execution_start is the event path
// itself, not time spent waiting in the queue.
async function idleLatency(front, wsFront, tag, n = 30) {
  const ws = await L.openWs(wsFront, { clientId: `idle-${tag}` });
  const lat = [];
  for (let i = 0; i < n; i++) {
    const pid = `${tag}-idle-${i}`;
    const start = ws.next((m) => m.type === "execution_start" && m.data.prompt_id === pid, 20000);
    const ok = ws.next((m) => m.type === "execution_success" && m.data.prompt_id === pid, 20000);
    const t = performance.now();
    await L.postPrompt(front, prompt(pid), { prompt_id: pid, client_id: `idle-${tag}` });
    await start;
    lat.push(performance.now() - t);
    await ok;
  }
  await ws.close();
  return { p50: pct(lat, 0.5), p99: pct(lat, 0.99) };
}

async function cluster(url, workers, apiFronts = 0) {
  const s = [];
  for (let i = 0; i < workers; i++) s.push(await L.startLatentd({ args: ["--database-url", url] }));
  for (let i = 0; i < apiFronts; i++) s.push(await L.startLatentd({ args: ["--database-url", url, "--no-worker"] }));
  return s;
}

// Two workers, AFF_PROMPTS txt2img prompts (tiny checkpoints, 64x64, 4 steps, each its own
// seed) naming c1 and c2 alternately, posted at once: checkpoint loads and wall time.
async function affinity(pg, wait, ckptDir, workers = 2, ckpts = ["c1", "c2"], tag = `aff${wait}`) {
  const fs = require("fs");
  const wf = JSON.parse(fs.readFileSync(path.join(__dirname, "../../tests/fixtures/default_workflow_api.json"), "utf8"));
  const setup = (dir) => { for (const n of ["c1", "c2"]) fs.copyFileSync(path.join(ckptDir, `${n}.safetensors`), path.join(dir, "models/checkpoints", `${n}.safetensors`)); };
  const url = pg.createDatabase(tag);
  const s = [];
  for (let i = 0; i < workers; i++) s.push(await L.startLatentd({ setup, args: ["--database-url", url, "--affinity-wait", String(wait)] }));
  const n = parseInt(process.env.AFF_PROMPTS || "24", 10);
  const ws = await L.openWs(s[0], { clientId: "aff" });
  const t0 = performance.now();
  for (let i = 0; i < n; i++) {
    const w = JSON.parse(JSON.stringify(wf));
    w["4"].inputs.ckpt_name = `${ckpts[i % ckpts.length]}.safetensors`;
    w["3"].inputs.seed = 1000 + i; w["3"].inputs.steps = 4;
    w["5"].inputs.width = w["5"].inputs.height = 64;
    const r = await L.postPrompt(s[i % s.length], w, { prompt_id: `${tag}-${i}`, client_id: "aff" });
    if (r.status !== 200) throw new Error(`${r.status} ${r.text}`);
  }
  await ws.waitFor((m) => m.type === "execution_success" && m.data.prompt_id === `${tag}-${n - 1}`, 300000);
  await L.waitIdle(s[0], 300000);
  const wall = (performance.now() - t0) / 1000;
  const loads = s.map((x) => (x.log().match(/loaded '[^']*checkpoints\/c[12]\.safetensors'/g) || []).length).reduce((a, b) => a + b, 0);
  await ws.close();
  await stopAll(s);
  return { wall, loads, n };
}

async function stopAll(s) { for (const x of s) { await x.stop(); L.removeDir(x.dir); } }

(async () => {
  const pg = await P.startPostgres();
  if (pg.skip) { console.log(`skipped: ${pg.skip}`); process.exit(0); }
  const out = [];
  try {
    // One process on SQLite: the baseline for event latency.
    let s = [await L.startLatentd()];
    const sqIdle = await idleLatency(s[0], s[0], "sqlite");
    const sq = await drive(s, s[0], "sqlite");
    await stopAll(s);
    out.push(["1 process, SQLite", sq]);
    const rates = {};
    for (const w of [1, 2, 3]) {
      s = await cluster(pg.createDatabase(`w${w}`), w);
      const r = await drive(s, s[0], `pg${w}`);
      await stopAll(s);
      rates[w] = r.rate;
      out.push([`${w} worker${w > 1 ? "s" : ""}, PostgreSQL (client on a worker)`, r]);
    }
    // Cross-instance: the client and the posts on an API-only front, 3 workers elsewhere.
    s = await cluster(pg.createDatabase("crossinst"), 3, 1);
    const crossIdle = await idleLatency(s[3], s[3], "cross");
    const cross = await drive([s[3]], s[3], "cross");
    await stopAll(s);
    out.push(["3 workers, client on a --no-worker front", cross]);

    console.log(`model-free prompts: ${N}, ${C} posting clients`);
    console.log("case                                              prompts/s  start p50 ms  start p99 ms");
    for (const [k, v] of out)
      console.log(`${k.padEnd(50)}${v.rate.toFixed(1).padStart(9)}${v.p50.toFixed(1).padStart(14)}${v.p99.toFixed(1).padStart(14)}`);
    console.log(`scaling vs 1 worker: 2 workers ${(rates[2] / rates[1]).toFixed(2)}x, 3 workers ${(rates[3] / rates[1]).toFixed(2)}x (${require("os").cpus().length} cores)`);
    console.log("(start latency above includes the wait in a queue of N; idle, one prompt at a time:)");
    console.log(`submit -> execution_start, idle: one SQLite process p50 ${sqIdle.p50.toFixed(1)} ms p99 ${sqIdle.p99.toFixed(1)} ms; ` +
      `cross-instance (API front -> worker -> API front) p50 ${crossIdle.p50.toFixed(1)} ms p99 ${crossIdle.p99.toFixed(1)} ms ` +
      `(+${(crossIdle.p50 - sqIdle.p50).toFixed(1)} ms)`);

    // The queue alone: three API-only fronts accept prompts into one database.
    s = await cluster(pg.createDatabase("intake"), 0, 3);
    const M = N * 5;
    const t0 = performance.now();
    let next = 0;
    await Promise.all(Array.from({ length: 4 * C }, async () => {
      while (next < M) {
        const i = next++;
        const r = await L.postPrompt(s[i % 3], prompt(`q${i}`), { prompt_id: `q${i}` });
        if (r.status !== 200) throw new Error(`${r.status} ${r.text}`);
      }
    }));
    const qrate = M / ((performance.now() - t0) / 1000);
    const q = (await L.request(s[0], "GET", "/queue")).json();
    await stopAll(s);
    console.log(`queue alone: ${M} prompts accepted through 3 fronts into one database at ${qrate.toFixed(0)}/s (${q.queue_pending.length} pending after)`);

    const gen = process.env.LATENTD_GEN_CKPT || path.join(path.dirname(L.latentdBin()), "gen_ckpt");
    const fs = require("fs"), os = require("os"), { spawnSync } = require("child_process");
    if (fs.existsSync(gen)) {
      const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "bench-aff-"));
      for (const [n, seed] of [["c1", "1"], ["c2", "2"]])
        spawnSync(gen, ["--tiny", "--seed", seed, path.join(tmp, `${n}.safetensors`)]);
      // Tiny-checkpoint throughput (one checkpoint, each prompt its own seed) with 1-3 workers.
      const tiny = {};
      for (const w of [1, 2, 3]) tiny[w] = await affinity(pg, 10, tmp, w, ["c1"], `tiny${w}`);
      console.log(`tiny-checkpoint txt2img (64x64, 4 steps), ${tiny[1].n} prompts: ` +
        [1, 2, 3].map((w) => `${w} worker${w > 1 ? "s" : ""} ${(tiny[w].n / tiny[w].wall).toFixed(1)}/s`).join(", ") +
        ` (ratios ${(tiny[1].wall / tiny[2].wall).toFixed(2)}x, ${(tiny[1].wall / tiny[3].wall).toFixed(2)}x; ${require("os").cpus().length} cores)`);
      const fifo = await affinity(pg, 0, tmp);
      const aff = await affinity(pg, 10, tmp);
      L.removeDir(tmp);
      console.log(`model affinity, 2 workers, ${aff.n} tiny txt2img prompts naming 2 checkpoints alternately: ` +
        `FIFO ${fifo.loads} checkpoint loads, ${fifo.wall.toFixed(1)} s; --affinity-wait 10 ${aff.loads} loads, ${aff.wall.toFixed(1)} s ` +
        `(wall ratio ${(aff.wall / fifo.wall).toFixed(2)})`);
    } else {
      console.log(`model affinity: skipped (no ${gen})`);
    }
  } finally {
    await pg.stop();
  }
})().catch((e) => { console.error(e); process.exit(1); });

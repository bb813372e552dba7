// e2e: text to image through the real server (issue 7, comfy-api.md §4.5, §6.5, §6.6, §8).
// The default workflow (spec/default_workflow_api.json, scaled to 64x64 and 3 steps, with a
// tiny random-weight checkpoint from gen_ckpt) is POSTed over HTTP while a WS client listens:
//   - the PNG lands in output/ and is served by /view, with `prompt` and `workflow` tEXt
//     chunks (right after IHDR, non-ASCII escaped) and 8-bit RGB pixels;
//   - the WS events come in ComfyUI's order with their fields (status, execution_start,
//     execution_cached, progress_state/executing per node, per step progress_state, type-4
//     preview, progress, executed for SaveImage, execution_success, status, executing null);
//   - history holds the outputs;
//   - re-queuing the same prompt runs nothing; a new seed re-runs only 3, 8, 9;
//   - same seed gives the same pixels on a second server (--cache-none, run twice), a
//     different seed different pixels;
//   - POST /interrupt mid-sampling ends that job with execution_interrupted and the queued
//     job after it succeeds;
//   - a checkpoint name not on disk is value_not_in_list; a truncated checkpoint fails node 4
//     with execution_error naming the file, and the next prompt still runs.
// The preview client negotiates supports_preview_metadata (what the frontend does), so
// previews are type 4 and sit between progress_state and progress (§4.5). Skips when
// gen_ckpt or the SD1.5 nodes are not built.
"use strict";
const { describe, it, before, after } = require("node:test");
const assert = require("node:assert/strict");
const fs = require("fs");
const path = require("path");
const { spawnSync } = require("child_process");
const L = require("./lib/latentd.js");

const gen = process.env.LATENTD_GEN_CKPT || path.join(path.dirname(L.latentdBin()), "gen_ckpt");
const DEFAULT_WORKFLOW = path.join(L.SOURCE, "tests", "fixtures", "default_workflow_api.json");
const NODES = ["KSampler", "CheckpointLoaderSimple", "CLIPTextEncode", "VAEDecode", "EmptyLatentImage", "SaveImage"];
const ORDER = ["4", "5", "7", "6", "3", "8", "9"]; // §6.3 for the frontend's key order
const STEPS = 3;
const SEED = 156680208700286;

// ComfyUI's default workflow (a copy of spec/default_workflow_api.json, same key order:
// the execution order depends on it).
function defaultWorkflow() {
  return JSON.parse(fs.readFileSync(DEFAULT_WORKFLOW, "utf8"));
}

function workflow({ seed = SEED, steps = STEPS, ckpt = "tiny.safetensors" } = {}) {
  const w = defaultWorkflow();
  w["3"].inputs.seed = seed;
  w["3"].inputs.steps = steps;
  w["4"].inputs.ckpt_name = ckpt;
  w["5"].inputs.width = 64;
  w["5"].inputs.height = 64;
  return w;
}

// A UI-format graph stand-in for extra_pnginfo.workflow; the non-ASCII title must come back
// intact through the \uXXXX escaping that tEXt (Latin-1) requires (§8.2).
const UI_WORKFLOW = { last_node_id: 9, nodes: [{ id: 9, type: "SaveImage", title: "Sauvegardé ✓ 画像" }], version: 0.4 };

function genCkpt(out, ...extra) {
  const r = spawnSync(gen, ["--tiny", ...extra, out], { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`gen_ckpt ${extra.join(" ")} failed: ${r.stderr}`);
}

// PNG chunk types in file order.
function pngChunks(buf) {
  const out = [];
  for (let off = 8; off < buf.length; off += 12 + buf.readUInt32BE(off)) out.push(buf.toString("ascii", off + 4, off + 8));
  return out;
}

const isDone = (pid) => (m) => m.type === "executing" && m.data && m.data.node === null && m.data.prompt_id === pid;

// POSTs `prompt` for client `c` and resolves with the messages this client got from the
// POST until the prompt's executing{node:null}.
async function run(srv, c, prompt, extra = {}) {
  const from = c.ws.messages.length;
  const r = await L.postPrompt(srv, prompt, { client_id: c.id, ...extra });
  assert.equal(r.status, 200, r.text);
  const pid = r.json.prompt_id;
  await c.ws.waitFor(isDone(pid), 60000, from);
  const msgs = c.ws.messages.slice(from);
  const end = msgs.findIndex(isDone(pid));
  return { pid, msgs: msgs.slice(0, end + 1) };
}

// One token per message; progress_state becomes the one node entry that changed since the
// previous snapshot ("ps:<id>:<state>:<value>/<max>"), after checking the snapshot's shape.
function tokens(msgs, pid) {
  let prev = {};
  const started = new Set();
  return msgs.map((m) => {
    if (m.binary) {
      const t = m.binary.readUInt32BE(0);
      if (t === 4) {
        const n = m.binary.readUInt32BE(4);
        const meta = JSON.parse(m.binary.subarray(8, 8 + n).toString());
        assert.deepEqual(meta, { node_id: "3", prompt_id: pid, display_node_id: "3", parent_node_id: null, real_node_id: "3", image_type: "image/jpeg" });
        assert.deepEqual([...m.binary.subarray(8 + n, 8 + n + 3)], [0xff, 0xd8, 0xff], "preview is a JPEG");
      }
      return `bin${t}`;
    }
    const d = m.data;
    switch (m.type) {
      case "status":
        assert.equal(d.sid, undefined, "only the connect-time status carries sid");
        return `status:${d.status.exec_info.queue_remaining}`;
      case "execution_start": case "execution_success":
        assert.equal(d.prompt_id, pid);
        assert.ok(Math.abs(d.timestamp - Date.now()) < 120000, `timestamp ${d.timestamp}`);
        return m.type;
      case "execution_cached":
        assert.equal(d.prompt_id, pid);
        assert.equal(typeof d.timestamp, "number");
        return `cached:${d.nodes.join(",")}`;
      case "executing":
        assert.equal(d.prompt_id, pid);
        if (d.node !== null) assert.equal(d.display_node, d.node);
        return `executing:${d.node}`;
      case "progress":
        assert.equal(d.prompt_id, pid);
        assert.ok(Number.isInteger(d.value) && Number.isInteger(d.max), JSON.stringify(d));
        return `progress:${d.node}:${d.value}/${d.max}`;
      case "executed":
        assert.equal(d.prompt_id, pid);
        assert.equal(d.display_node, d.node);
        return `executed:${d.node}:${d.output.images.map((i) => i.filename).join(",")}`;
      case "progress_state": {
        assert.equal(d.prompt_id, pid);
        const changed = [];
        for (const [id, e] of Object.entries(d.nodes)) {
          assert.deepEqual(Object.keys(e).sort(), ["display_node_id", "max", "node_id", "parent_node_id", "prompt_id", "real_node_id", "state", "value"]);
          assert.equal(e.node_id, id); assert.equal(e.display_node_id, id); assert.equal(e.real_node_id, id);
          assert.equal(e.parent_node_id, null); assert.equal(e.prompt_id, pid);
          assert.ok(["running", "finished"].includes(e.state), e.state);
          if (e.state === "finished") assert.equal(e.value, e.max, `finished node ${id} at ${e.value}/${e.max}`);
          const p = prev[id];
          // finished: value = the last max (ComfyUI's finish_progress), so 3/3 for the sampler.
          if (!p || p.value !== e.value || p.max !== e.max || p.state !== e.state) changed.push(`ps:${id}:${e.state}:${e.value}/${e.max}`);
          started.add(id);
        }
        for (const id of Object.keys(prev)) assert.ok(id in d.nodes, `node ${id} dropped from progress_state`);
        prev = d.nodes;
        assert.equal(changed.length, 1, `one node changes per progress_state: ${changed}`);
        return changed[0];
      }
      default:
        return m.type;
    }
  });
}

function outputFiles(srv) {
  return fs.readdirSync(path.join(srv.dir, "output")).filter((f) => f.endsWith(".png")).sort();
}

function pixels(srv, name) {
  return L.decodePng(fs.readFileSync(path.join(srv.dir, "output", name))).pixels;
}

describe("txt2img end to end", () => {
  let A = null, B = null; // A: classic cache + latent2rgb previews; B: --cache-none, no previews
  let ca = null, cb = null, observer = null;
  let skip = null;
  let first = null; // { pid, msgs, file }

  before(async () => {
    if (!fs.existsSync(gen)) { skip = `no ${gen}`; return; }
    const setup = (dir) => {
      const ck = path.join(dir, "models", "checkpoints");
      genCkpt(path.join(ck, "tiny.safetensors"));
      // Header intact, tensor data cut short: loading must fail cleanly.
      genCkpt(path.join(ck, "broken.safetensors"), "--truncate", "1000000");
    };
    [A, B] = await Promise.all([
      L.startLatentd({ args: ["--preview-method", "latent2rgb", "--preview-size", "64"], setup }),
      L.startLatentd({ args: ["--cache-none"], setup }),
    ]);
    const info = (await L.request(A, "GET", "/object_info")).json();
    const missing = NODES.filter((n) => !info[n]);
    if (missing.length) { skip = `nodes not registered: ${missing}`; return; }
    ca = { id: "t2i-a", ws: await L.openWs(A, { clientId: "t2i-a" }) };
    ca.ws.send({ type: "feature_flags", data: { supports_preview_metadata: true } });
    await ca.ws.waitFor((m) => m.type === "feature_flags");
    observer = await L.openWs(A, { clientId: "t2i-observer" });
    cb = { id: "t2i-b", ws: await L.openWs(B, { clientId: "t2i-b" }) };
  });

  after(async () => {
    for (const c of [ca && ca.ws, observer, cb && cb.ws]) if (c) await c.close();
    const logs = [];
    for (const s of [A, B]) if (s) {
      const r = await s.stop();
      logs.push([s, r, s.log()]);
    }
    // Clean shutdown, and nothing from the sanitizers when built with them.
    for (const [s, r, log] of logs) {
      L.removeDir(s.dir);
      assert.deepEqual(r, { code: 0, signal: null }, log.slice(-3000));
      assert.ok(!/AddressSanitizer|LeakSanitizer|runtime error:/.test(log), log.slice(-6000));
    }
  });

  it("runs the default workflow: events in order, PNG with metadata, /view, history", async (t) => {
    if (skip) { t.skip(skip); return; }
    const obsFrom = observer.messages.length;
    const r = await run(A, ca, workflow(), { extra_data: { extra_pnginfo: { workflow: UI_WORKFLOW } } });
    const errs = r.msgs.filter((m) => m.type === "execution_error");
    assert.equal(errs.length, 0, JSON.stringify(errs));

    // The whole stream, message by message (§4.5 with a metadata client).
    const want = ["status:1", "status:1", "execution_start", "cached:"];
    for (const n of ORDER) {
      want.push(`ps:${n}:running:0/1`, `executing:${n}`);
      if (n === "3") for (let k = 1; k <= STEPS; k++) want.push(`ps:3:running:${k}/${STEPS}`, "bin4", `progress:3:${k}/${STEPS}`);
      if (n === "9") want.push("executed:9:ComfyUI_00001_.png");
      want.push(`ps:${n}:finished:${n === "3" ? `${STEPS}/${STEPS}` : "1/1"}`);
    }
    want.push("execution_success", "status:0", "executing:null");
    assert.deepEqual(tokens(r.msgs, r.pid), want);
    const exe = r.msgs.find((m) => m.type === "executed").data;
    assert.deepEqual(exe.output, { images: [{ filename: "ComfyUI_00001_.png", subfolder: "", type: "output" }] });

    // Execution events go to the prompt's client only; status reaches every socket.
    await L.waitFor(() => observer.messages.slice(obsFrom).filter((m) => m.type === "status").length >= 3);
    const seen = observer.messages.slice(obsFrom).map((m) => (m.binary ? "binary" : m.type));
    assert.deepEqual([...new Set(seen)], ["status"], seen.join(" "));

    // The file on disk: 8-bit RGB 64x64, chunks IHDR, tEXt prompt, tEXt workflow, IDAT..., IEND.
    assert.deepEqual(outputFiles(A), ["ComfyUI_00001_.png"]);
    const file = fs.readFileSync(path.join(A.dir, "output", "ComfyUI_00001_.png"));
    const ch = pngChunks(file);
    assert.deepEqual(ch.slice(0, 4), ["IHDR", "tEXt", "tEXt", "IDAT"], ch.join(" "));
    assert.equal(ch[ch.length - 1], "IEND");
    const png = L.decodePng(file);
    assert.deepEqual([png.width, png.height, png.channels], [64, 64, 3]);
    assert.deepEqual(Object.keys(png.text), ["prompt", "workflow"]);
    assert.ok(/^[\x20-\x7e]*$/.test(png.text.workflow), "non-ASCII escaped in tEXt");
    assert.deepEqual(JSON.parse(png.text.workflow), UI_WORKFLOW);
    assert.deepEqual(JSON.parse(png.text.prompt), workflow());
    // Random weights still give an image, not a flat fill.
    assert.ok(new Set(png.pixels).size > 8, "image has some variation");

    // /view serves the same bytes.
    const v = await L.request(A, "GET", "/view?filename=ComfyUI_00001_.png&subfolder=&type=output");
    assert.equal(v.status, 200);
    assert.equal(v.headers["content-type"], "image/png");
    assert.ok(v.body.equals(file), "/view returns the file");

    // History: prompt, outputs, status with the three messages, meta.
    const h = (await L.request(A, "GET", `/history/${r.pid}`)).json()[r.pid];
    assert.ok(h, "history entry");
    assert.equal(h.prompt[1], r.pid);
    assert.deepEqual(h.prompt[2], workflow());
    assert.deepEqual(h.prompt[3].extra_pnginfo, { workflow: UI_WORKFLOW });
    assert.deepEqual(h.prompt[4], ["9"]);
    assert.deepEqual(h.outputs, { 9: exe.output });
    assert.equal(h.status.status_str, "success");
    assert.equal(h.status.completed, true);
    assert.deepEqual(h.status.messages.map((m) => m[0]), ["execution_start", "execution_cached", "execution_success"]);
    // ComfyUI's meta for the output node, plus latentd's memory plans for the nodes that
    // ran a model: CLIP (6, 7), the UNet (3) and the VAE (8).
    assert.deepEqual(h.meta[9], { node_id: "9", display_node: "9", parent_node: null, real_node_id: "9" });
    assert.deepEqual(Object.keys(h.meta).sort(), ["3", "6", "7", "8", "9"]);
    for (const id of ["3", "6", "7", "8"]) {
      const plans = h.meta[id].memory;
      assert.ok(Array.isArray(plans) && plans.length >= 1, `memory plans for node ${id}`);
      for (const p of plans) {
        assert.ok(p.models.length >= 1 && p.bytes_resident + p.bytes_streamed > 0, JSON.stringify(p));
        assert.ok(p.peak_bytes > 0 && p.measured_ms >= 0 && p.activation_bytes > 0, JSON.stringify(p));
      }
    }
    assert.equal(h.meta[9].memory, undefined, "SaveImage runs no model");
    first = { pid: r.pid, pixels: png.pixels };
  });

  it("re-queuing the identical prompt runs nothing and writes no file", async (t) => {
    if (skip || !first) { t.skip(skip || "first run failed"); return; }
    const r = await run(A, ca, workflow(), { extra_data: { extra_pnginfo: { workflow: { different: true } } } });
    assert.deepEqual(tokens(r.msgs, r.pid), ["status:1", "status:1", "execution_start", "cached:3,4,5,6,7,8,9",
      "executed:9:ComfyUI_00001_.png", "ps:9:finished:1/1", "execution_success", "status:0", "executing:null"]);
    assert.deepEqual(outputFiles(A), ["ComfyUI_00001_.png"]);
    const h = (await L.request(A, "GET", `/history/${r.pid}`)).json()[r.pid];
    assert.deepEqual(h.outputs, { 9: { images: [{ filename: "ComfyUI_00001_.png", subfolder: "", type: "output" }] } });
  });

  it("a new seed re-runs only KSampler, VAEDecode and SaveImage and changes the pixels", async (t) => {
    if (skip || !first) { t.skip(skip || "first run failed"); return; }
    const r = await run(A, ca, workflow({ seed: SEED + 1 }));
    const tk = tokens(r.msgs, r.pid);
    assert.equal(tk[3], "cached:4,5,6,7");
    assert.deepEqual(tk.filter((x) => x.startsWith("executing:")), ["executing:3", "executing:8", "executing:9", "executing:null"]);
    assert.equal(tk.filter((x) => x.startsWith("progress:")).length, STEPS);
    assert.ok(tk.includes("execution_success"), tk.join(" "));
    assert.deepEqual(outputFiles(A), ["ComfyUI_00001_.png", "ComfyUI_00002_.png"]);
    assert.ok(!pixels(A, "ComfyUI_00002_.png").equals(first.pixels), "a different seed gives different pixels");
  });

  it("same seed gives the same pixels on another server, run twice with --cache-none", async (t) => {
    if (skip || !first) { t.skip(skip || "first run failed"); return; }
    for (const name of ["ComfyUI_00001_.png", "ComfyUI_00002_.png"]) {
      const r = await run(B, cb, workflow());
      const tk = tokens(r.msgs, r.pid);
      assert.equal(tk[3], "cached:", "--cache-none caches nothing");
      assert.deepEqual(tk.filter((x) => x.startsWith("executing:")), [...ORDER.map((n) => `executing:${n}`), "executing:null"]);
      assert.ok(!tk.some((x) => x.startsWith("bin")), "no binary frames without --preview-method");
      assert.ok(tk.includes(`executed:9:${name}`), tk.join(" "));
      assert.ok(pixels(B, name).equals(first.pixels), `${name} on server B matches server A's image`);
    }
  });

  it("POST /interrupt mid-sampling ends the job; the next queued job succeeds", async (t) => {
    if (skip || !first) { t.skip(skip || "first run failed"); return; }
    const c = ca.ws;
    const from = c.messages.length;
    const long = await L.postPrompt(A, workflow({ seed: 7, steps: 100 }), { client_id: ca.id });
    const next = await L.postPrompt(A, workflow({ seed: 8 }), { client_id: ca.id });
    assert.equal(long.status, 200, long.text);
    assert.equal(next.status, 200, next.text);
    const lp = long.json.prompt_id, np = next.json.prompt_id;
    await c.waitFor((m) => m.type === "progress" && m.data.prompt_id === lp && m.data.value >= 2, 30000, from);
    assert.equal((await L.request(A, "POST", "/interrupt")).status, 200);
    await c.waitFor(isDone(np), 60000, from);
    const msgs = c.messages.slice(from);
    const mine = (pid) => msgs.filter((m) => !m.binary && m.data && m.data.prompt_id === pid);
    const lm = mine(lp);
    const intr = lm.find((m) => m.type === "execution_interrupted");
    assert.ok(intr, lm.map((m) => m.type).join(" "));
    assert.equal(intr.data.node_id, "3");
    assert.equal(intr.data.node_type, "KSampler");
    assert.ok(Array.isArray(intr.data.executed) && !intr.data.executed.includes("3"), JSON.stringify(intr.data.executed));
    assert.ok(!lm.some((m) => ["execution_success", "execution_error", "executed"].includes(m.type)));
    assert.ok(!lm.some((m) => m.type === "progress" && m.data.value === 100), "sampling stopped early");
    // After the interrupt: status, then executing{null} for the long job, then the next job.
    const iIntr = msgs.indexOf(intr), iDone = msgs.findIndex(isDone(lp));
    assert.ok(iIntr < iDone && msgs.slice(iIntr + 1, iDone).every((m) => m.type === "status"), "interrupted → status → executing null");
    const nm = mine(np);
    assert.ok(msgs.indexOf(nm[0]) > iDone, "the next job starts after the interrupted one ended");
    assert.ok(nm.some((m) => m.type === "execution_success"), nm.map((m) => m.type).join(" "));
    const hist = (await L.request(A, "GET", `/history/${lp}`)).json()[lp];
    assert.equal(hist.status.status_str, "error");
    assert.equal(hist.status.completed, false);
    assert.equal(hist.status.messages.at(-1)[0], "execution_interrupted");
    assert.equal(outputFiles(A).length, 3, "only the next job wrote a file");
  });

  it("an unknown checkpoint name fails validation with value_not_in_list", async (t) => {
    if (skip || !first) { t.skip(skip || "first run failed"); return; }
    const from = ca.ws.messages.length;
    const r = await L.postPrompt(A, workflow({ ckpt: "nope.safetensors" }), { client_id: ca.id });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error.type, "prompt_outputs_failed_validation");
    const e4 = r.json.node_errors["4"];
    assert.ok(e4, JSON.stringify(r.json.node_errors));
    assert.deepEqual(Object.keys(r.json.node_errors), ["4"]);
    assert.equal(e4.class_type, "CheckpointLoaderSimple");
    assert.deepEqual(e4.dependent_outputs, ["9"]);
    assert.equal(e4.errors[0].type, "value_not_in_list");
    assert.equal(e4.errors[0].details, "ckpt_name: 'nope.safetensors' not in ['broken.safetensors', 'tiny.safetensors']");
    assert.equal(e4.errors[0].extra_info.received_value, "nope.safetensors");
    await L.sleep(200);
    assert.deepEqual(ca.ws.messages.slice(from), [], "no WS traffic for a validation failure");
  });

  it("a truncated checkpoint fails node 4 with execution_error naming the file; the server goes on", async (t) => {
    if (skip || !first) { t.skip(skip || "first run failed"); return; }
    const r = await run(A, ca, workflow({ ckpt: "broken.safetensors" }));
    const tk = tokens(r.msgs, r.pid);
    const err = r.msgs.find((m) => m.type === "execution_error");
    assert.ok(err, tk.join(" "));
    assert.equal(err.data.node_id, "4");
    assert.equal(err.data.node_type, "CheckpointLoaderSimple");
    assert.match(err.data.exception_message, /broken\.safetensors/);
    assert.ok(err.data.exception_message.endsWith("\n"), "exception_message ends with a newline");
    assert.equal(typeof err.data.exception_type, "string");
    assert.deepEqual(err.data.current_inputs, { ckpt_name: ["broken.safetensors"] });
    assert.ok(!tk.includes("execution_success"));
    assert.deepEqual(tk.slice(tk.indexOf("executing:4")), ["executing:4", "execution_error", "status:0", "executing:null"]);
    const h = (await L.request(A, "GET", `/history/${r.pid}`)).json()[r.pid];
    assert.equal(h.status.status_str, "error");
    assert.equal(h.status.messages.at(-1)[0], "execution_error");
    // The next prompt (good checkpoint, new seed) runs end to end.
    const ok = await run(A, ca, workflow({ seed: 99 }));
    assert.ok(ok.msgs.some((m) => m.type === "execution_success"), tokens(ok.msgs, ok.pid).join(" "));
    assert.equal(outputFiles(A).length, 4);
  });
});

// png.js — read the text chunks ComfyUI and latentd write into PNGs (comfy-api.md §8.2):
// tEXt "prompt" (API graph) and "workflow" (litegraph graph). iTXt and zTXt are read too,
// since other tools re-save images with them.

const SIG = [137, 80, 78, 71, 13, 10, 26, 10];

async function inflate(bytes) {
  const ds = new DecompressionStream("deflate");
  const stream = new Blob([bytes]).stream().pipeThrough(ds);
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

// Returns {key: text} for every text chunk. Throws on a file that is not a PNG.
export async function readPngText(buffer) {
  const bytes = new Uint8Array(buffer);
  if (bytes.length < 8 || SIG.some((b, i) => bytes[i] !== b)) throw new Error("not a PNG file");
  const view = new DataView(buffer instanceof ArrayBuffer ? buffer : bytes.buffer);
  const latin1 = new TextDecoder("latin1"), utf8 = new TextDecoder("utf-8");
  const out = {};
  let off = 8;
  while (off + 12 <= bytes.length) {
    const len = view.getUint32(off);
    const type = String.fromCharCode(...bytes.subarray(off + 4, off + 8));
    const data = bytes.subarray(off + 8, off + 8 + len);
    if (off + 12 + len > bytes.length) break; // truncated: keep what we have
    const nul = data.indexOf(0);
    if (nul > 0 && (type === "tEXt" || type === "iTXt" || type === "zTXt")) {
      const key = latin1.decode(data.subarray(0, nul));
      try {
        if (type === "tEXt") out[key] = latin1.decode(data.subarray(nul + 1));
        else if (type === "zTXt") out[key] = latin1.decode(await inflate(data.subarray(nul + 2)));
        else {
          const compressed = data[nul + 1];
          let p = nul + 3;
          p = data.indexOf(0, p) + 1; // language tag
          p = data.indexOf(0, p) + 1; // translated keyword
          const text = data.subarray(p);
          out[key] = utf8.decode(compressed ? await inflate(text) : text);
        }
      } catch (e) { console.warn(`png chunk ${key}:`, e); }
    }
    if (type === "IEND") break;
    off += 12 + len;
  }
  return out;
}

// {workflow, prompt} parsed from a PNG's chunks (either may be null).
export async function readComfyMetadata(buffer) {
  const t = await readPngText(buffer);
  const parse = (s) => { if (s == null) return null; try { return JSON.parse(s); } catch { return null; } };
  return { workflow: parse(t.workflow), prompt: parse(t.prompt) };
}

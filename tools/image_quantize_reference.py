#!/usr/bin/env python3
"""Fixtures for latentd's ImageQuantize numerics (nodes/image/node_quant.c), written by Pillow.

ComfyUI's Quantize node (comfy_extras/nodes_post_processing.py) calls
im.quantize(colors) for a median-cut palette, then im.quantize(palette=pal_im,
dither=...) to map the image, or first adds its own Bayer matrix (transcribed below
from the node, numpy float32 as there). For each test image and case this writes:

  - the median-cut palette (its real length: Pillow 9.x pads the C palette to 256
    with black; the length is the larger of the highest index the median-cut image
    uses and the last non-black entry, plus one),
  - "modern": the mapping Pillow >= 10.1 gives (the palette holds exactly those
    entries): a P image whose palette is put with exactly those entries makes Pillow
    9.x map the same way, and its getpalette() gives the Bayer spread's count,
  - "legacy": the indices Pillow 9.x gives with ComfyUI's code unchanged (256-entry
    palette, black padding, Bayer spread 2 * 256 / 256).

Format (little-endian), one file per image: b"LQ01", u32 w, h, u32 input_stored,
[w*h*3 RGB bytes if stored, else the xorshift32 image below], u32 n_cases, then per
case: u32 colors, u32 dither (0 none, 1 floyd-steinberg, else the Bayer order),
u32 n_pal, n_pal*3 bytes, u32 idx_stored, then modern and legacy indices (w*h bytes
each) when stored, or else their FNV-1a 64 hashes (u64 each).

Run once with Debian's python3 (numpy, Pillow 9.4):
  /usr/bin/python3 tools/image_quantize_reference.py tests/fixtures/image_nodes
"""
import math
import os
import struct
import sys

import numpy as np
from PIL import Image


def xorshift_image(w, h, seed):
    """Bytes from xorshift32 (x ^= x << 13; x ^= x >> 17; x ^= x << 5), low byte each."""
    x = seed
    out = bytearray(w * h * 3)
    for i in range(len(out)):
        x ^= (x << 13) & 0xFFFFFFFF
        x ^= x >> 17
        x ^= (x << 5) & 0xFFFFFFFF
        out[i] = x & 0xFF
    return bytes(out)


def gradient_image(w, h):
    a = np.zeros((h, w, 3), np.uint8)
    for y in range(h):
        for x in range(w):
            a[y, x] = ((x * 4) & 255, (y * 5) & 255, ((x + y) * 2 + (x * y) % 7) & 255)
    return a.tobytes()


def few_image(w, h):
    cols = [(250, 250, 250), (200, 30, 40), (90, 90, 200), (30, 160, 60), (60, 60, 60)]
    a = np.zeros((h, w, 3), np.uint8)
    for y in range(h):
        for x in range(w):
            a[y, x] = cols[((x // 5) + (y // 4) * 3) % len(cols)]
    return a.tobytes()


def bayer_add(im, num_colors, order):
    """ComfyUI's Quantize.bayer before its quantize call, in numpy float32."""
    def normalized_bayer_matrix(n):
        if n == 0:
            return np.zeros((1, 1), "float32")
        q = 4 ** n
        m = q * normalized_bayer_matrix(n - 1)
        return np.bmat(((m - 1.5, m + 0.5), (m + 1.5, m - 0.5))) / q

    spread = 2 * 256 / num_colors
    # np.matrix's __rmul__ is np.dot(spread, m): float64, so the matrix torch adds is too.
    mat = np.asarray(spread * normalized_bayer_matrix(int(math.log2(order))) + 0.5)
    assert mat.dtype == np.float64
    res = np.array(im).astype(np.float32)
    tiled = np.tile(mat, (math.ceil(res.shape[0] / order), math.ceil(res.shape[1] / order)))
    # float32 result.add_(float64 matrix): computed in float64, stored as float32.
    res = (res.astype(np.float64) + tiled[: res.shape[0], : res.shape[1], None]).astype(np.float32)
    res = np.clip(res, 0, 255)
    return Image.fromarray(res.astype(np.uint8))


def palette_length(pal_im):
    pal = pal_im.getpalette()
    used = int(np.array(pal_im).max()) + 1
    nonblack = max((i + 1 for i in range(len(pal) // 3) if any(pal[3 * i: 3 * i + 3])), default=0)
    return max(used, nonblack)


def map_indices(im, pal_im, dither, num_colors):
    if dither >= 2:
        return np.array(bayer_add(im, num_colors, dither).quantize(palette=pal_im, dither=Image.Dither.NONE))
    d = Image.Dither.FLOYDSTEINBERG if dither == 1 else Image.Dither.NONE
    return np.array(im.quantize(palette=pal_im, dither=d))


def fnv64(b):
    h = 0xCBF29CE484222325
    for x in b:
        h = ((h ^ x) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def write(path, w, h, rgb, stored, cases, store_idx):
    im = Image.frombytes("RGB", (w, h), rgb)
    out = bytearray(b"LQ01" + struct.pack("<III", w, h, stored))
    if stored:
        out += rgb
    out += struct.pack("<I", len(cases))
    for colors, dither in cases:
        pal_im = im.quantize(colors=colors)
        n = palette_length(pal_im)
        pal = pal_im.getpalette()[: 3 * n]
        exact = Image.new("P", (1, 1))
        exact.putpalette(pal)
        assert len(exact.getpalette()) // 3 == n
        modern = map_indices(im, exact, dither, n).astype(np.uint8).tobytes()
        legacy = map_indices(im, pal_im, dither, len(pal_im.getpalette()) // 3).astype(np.uint8).tobytes()
        out += struct.pack("<III", colors, dither, n) + bytes(pal) + struct.pack("<I", store_idx)
        if store_idx:
            out += modern + legacy
        else:
            out += struct.pack("<QQ", fnv64(modern), fnv64(legacy))
    with open(path, "wb") as f:
        f.write(out)


def main():
    d = sys.argv[1]
    os.makedirs(d, exist_ok=True)
    every = [(c, m) for c in (256, 16, 5, 2) for m in (0, 1, 4)] + [(1, 0), (7, 2), (7, 8), (7, 16), (3, 1)]
    write(os.path.join(d, "quant_gradient.bin"), 64, 48, gradient_image(64, 48), 1, every, 1)
    write(os.path.join(d, "quant_noise.bin"), 40, 30, xorshift_image(40, 30, 2463534242), 1, every, 1)
    write(os.path.join(d, "quant_few.bin"), 32, 24, few_image(32, 24), 1,
          [(16, 0), (16, 1), (16, 4), (3, 0), (3, 1), (2, 8)], 1)
    # More than 65536 colours: Pillow's hash drops a bit per channel before the cut.
    write(os.path.join(d, "quant_big.bin"), 320, 256, xorshift_image(320, 256, 88172645), 0,
          [(256, 0), (256, 1), (64, 2), (2, 1)], 0)


if __name__ == "__main__":
    main()

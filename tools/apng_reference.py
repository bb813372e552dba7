#!/usr/bin/env python3
"""An APNG written by Pillow, for test_image_apng (tests/fixtures/image_nodes/apng_pil.png).

Three 6x5 RGB frames, pixel (x, y) channel k of frame f = (37x + 11y + 50f + 80k) & 255,
frame 1 differing from frame 0 everywhere, frame 2 equal to frame 1 but for the 2x2 block
at (3, 2) (so Pillow crops it), saved as ComfyUI's SaveAnimatedPNG saves (save_all,
duration 166, compress_level 4). The test decodes it with its own reader to check that
reader against Pillow's writer, then holds latentd's file to the same layout.

usage: /usr/bin/python3 tools/apng_reference.py tests/fixtures/image_nodes/apng_pil.png \
         tests/fixtures/image_nodes/apng_ops.png
"""
import sys

import numpy as np
from PIL import Image


def frame(f):
    y, x = np.mgrid[0:5, 0:6]
    a = np.stack([(37 * x + 11 * y + 50 * f + 80 * k) & 255 for k in range(3)], -1)
    return a.astype(np.uint8)


frames = [frame(0), frame(1), frame(1).copy()]
frames[2][2:4, 3:5] = 7
ims = [Image.fromarray(a) for a in frames]
ims[0].save(sys.argv[1], compress_level=4, save_all=True, duration=166, append_images=ims[1:])
back = Image.open(sys.argv[1])
assert back.n_frames == 3
for i in range(3):
    back.seek(i)
    assert np.array_equal(np.array(back.convert("RGB")), frames[i])


def rgba_case(path):
    """apng_ops.png + apng_ops.rgba: RGBA frames with dispose background/previous and blend
    over, and the frames Pillow reads back (RGBA, w*h*4 bytes each, concatenated)."""
    from PIL.PngImagePlugin import Blend, Disposal
    y, x = np.mgrid[0:6, 0:7]
    frames = []
    for f in range(4):
        a = np.stack([(30 * x + 20 * f) & 255, (40 * y + 60 * f) & 255, (x * y * 9 + f) & 255,
                      np.where((x + y + f) % 3 == 0, 0, 90 + 40 * f)], -1).astype(np.uint8)
        frames.append(Image.fromarray(a, "RGBA"))
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=100,
                   disposal=[Disposal.OP_NONE, Disposal.OP_BACKGROUND, Disposal.OP_PREVIOUS, Disposal.OP_NONE],
                   blend=[Blend.OP_SOURCE, Blend.OP_OVER, Blend.OP_OVER, Blend.OP_OVER])
    back = Image.open(path)
    out = bytearray()
    for i in range(back.n_frames):
        back.seek(i)
        out += back.convert("RGBA").tobytes()
    with open(path[:-4] + ".rgba", "wb") as fh:
        fh.write(out)
    return back.n_frames


if len(sys.argv) > 2:
    print(rgba_case(sys.argv[2]), "frames")

#!/usr/bin/python3
"""Independent float64 reference for latentd's SD2.x (ComfyUI's supported_models.SD20, written
from ComfyUI's sd2_clip.py / model_sampling.py and the SD1.5 / SDXL references, not from latentd's
C code): the OpenCLIP ViT-H text encoder (OpenCLIP names under cond_stage_model.model., GELU,
64-wide heads, the penultimate layer *with* the final LayerNorm, prompts padded with id 0, the
projected pooled output) and one v-prediction denoise step of the UNet (SD1.5's structure with
Linear projections and 64-wide heads, no ADM input): model input x / sqrt(sigma^2 + 1), the
timestep nearest sigma in log space, and V_PREDICTION's
x0 = x / (sigma^2 + 1) - out * sigma / sqrt(sigma^2 + 1). Everything else is imported from
reference_sdxl.py (RefXL's OpenCLIP renaming, text encoder, UNet) and reference_sd15.py.

Run once to regenerate tests/fixtures/models/sd2_tiny_expected.txt (committed, so CI needs no
Python):

    build/gen_ckpt --arch sd2-v --tiny /tmp/sd2v.safetensors
    /usr/bin/python3 tools/reference_sd2.py models /tmp/sd2v.safetensors
    build/gen_ckpt --arch sd2-v --tiny --dtype f16 /tmp/sd2v16.safetensors
    /usr/bin/python3 tools/reference_sd2.py txt2img /tmp/sd2v16.safetensors

txt2img writes sd2_txt2img_expected.json, a whole default-graph txt2img on the 768-v file that
e2e_sd2 compares pixel by pixel.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_sd15 import FIX, Ref, Tokenizer, fixture_line, tokenize_prompt, wave  # noqa: E402
from reference_sdxl import TXT2IMG, RefXL, sample_decode  # noqa: E402

PAD_H = 0  # SD2ClipHTokenizer: pad_with_end=False, so the pad token is 0
SCALE = 0.18215  # latent_formats.SD15, which SD20 uses


class RefSD2(RefXL):
    def __init__(self, path):
        Ref.__init__(self, path)
        self.refiner = False
        # One encoder, OpenCLIP-H, renamed as bigG is; 'g' selects pad 0 and the pooled output.
        self.enc = {'g': (self.openclip_to_hf('cond_stage_model.model.'), 'gelu')}


def sigma_table():
    """ModelSamplingDiscrete's sigmas (float64 -> float32) and float32 log-sigmas."""
    import numpy as np
    betas = np.linspace(0.00085 ** 0.5, 0.012 ** 0.5, 1000, dtype=np.float64) ** 2
    ac = np.cumprod(1.0 - betas)
    s = ((1 - ac) / ac) ** 0.5
    return s.astype(np.float32), np.log(s).astype(np.float32)


# The UNet case: batch 2 on a 9x7 latent, one sigma per sample (the top of the schedule and a
# middle one), a 77-token context from a wave; the same inputs as the C test builds.
UNET_H, UNET_W, UNET_SIGMAS = 9, 7, [14.614642, 0.8]
SD2_PROMPTS = [('a photo of a cat', -2), ('a photo of a cat', -1),
               ('a (red:1.5) cat, ((masterpiece)), [blue] sky', -2)]


def cmd_models(path):
    import numpy as np
    torch = __import__('torch')
    tok = Tokenizer()
    lines = []
    r = RefSD2(path)
    for k, (text, layer) in enumerate(SD2_PROMPTS):
        c, pooled = r.encode('g', tokenize_prompt(tok, text, pad=PAD_H), layer, norm=True)
        lines.append(fixture_line('sd2_%d.cond' % k, c))
        lines.append(fixture_line('sd2_%d.pooled' % k, pooled))
    P = 'model.diffusion_model.'
    B = len(UNET_SIGMAS)
    ctx_dim = r.W(P + 'input_blocks.1.1.transformer_blocks.0.attn2.to_k.weight').shape[1]
    x = torch.tensor(wave(B * 4 * UNET_H * UNET_W, 0.37, 0.1)).reshape(B, 4, UNET_H, UNET_W) * 3.0
    ctx = torch.tensor(wave(B * 77 * ctx_dim, 0.011, 0.5)).reshape(B, 77, ctx_dim)
    sig = torch.tensor([float(np.float32(s)) for s in UNET_SIGMAS], dtype=torch.float64)
    _, logs = sigma_table()
    ts = [float(np.argmin(np.abs(np.log(np.float32(s)) - logs))) for s in UNET_SIGMAS]
    lines.append(fixture_line('sd2v.t', torch.tensor(ts, dtype=torch.float64)))
    s = sig.reshape(B, 1, 1, 1)
    xin = x / torch.sqrt(s * s + 1)
    out, _ = r.unet(xin, ts, ctx, None)
    lines.append(fixture_line('sd2v.out', out))
    x0 = x / (s * s + 1) - out * s / torch.sqrt(s * s + 1)
    lines.append(fixture_line('sd2v.x0', x0))
    with open(os.path.join(FIX, 'sd2_tiny_expected.txt'), 'w') as f:
        f.write('# tools/reference_sd2.py models <gen_ckpt --arch sd2-v --tiny> (seed 42, f32): '
                'name ndim shape... mean|x| sum nsamples (index value)...\n')
        f.write('\n'.join(lines) + '\n')
    print('wrote %d fixture lines' % len(lines))


def cmd_txt2img(path):
    """ComfyUI's default graph on the e2e's tiny 768-v file (sd2v.safetensors, f16) with
    reference_sdxl.py's TXT2IMG settings: the H conditioning, KSampler with V_PREDICTION's
    x0, VAEDecode of x / 0.18215, SaveImage's 8-bit pixels."""
    import base64
    import json
    r = RefSD2(path)
    tok = Tokenizer()
    P = TXT2IMG
    conds = [(r.encode('g', tokenize_prompt(tok, t, pad=PAD_H), norm=True)[0], None)
             for t in (P['positive'], P['negative'])]
    px = sample_decode(r, conds, P, SCALE, predict='v')
    out = dict(P, pixels_rgb_b64=base64.b64encode(px.tobytes()).decode('ascii'),
               note='tools/reference_sd2.py txt2img <gen_ckpt --arch sd2-v --tiny --dtype f16>')
    with open(os.path.join(FIX, 'sd2_txt2img_expected.json'), 'w') as f:
        json.dump(out, f, indent=1)
        f.write('\n')
    print('mean pixel', float(px.mean()))


if __name__ == '__main__':
    if len(sys.argv) >= 3 and sys.argv[1] == 'models':
        cmd_models(sys.argv[2])
    elif len(sys.argv) >= 3 and sys.argv[1] == 'txt2img':
        cmd_txt2img(sys.argv[2])
    else:
        sys.exit(__doc__)

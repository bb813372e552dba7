#!/usr/bin/python3
"""Independent reference for latentd's SDXL base and refiner, written from shared/spec/sdxl.md
(not from latentd's C code, not from ComfyUI's): the two tokenizations (pad ids differ), CLIP-L
and OpenCLIP bigG hidden states and bigG's pooled output, the ADM vector, the UNet (3 or 4 levels
walked from the file's keys, linear projections, 64-wide heads, label_emb) and the VAE decode of a
latent divided by SDXL's scale factor. What SDXL shares with SD1.5 (tokenizer, prompt syntax,
safetensors reader, norms, attention, ResBlock, VAE) is imported from reference_sd15.py.

Run once (Debian: apt-get install python3-torch python3-numpy) to regenerate the fixtures in
tests/fixtures/models/, which are committed so CI needs no Python:

    build/gen_ckpt --arch sdxl --tiny /tmp/sdxl.safetensors
    build/gen_ckpt --arch sdxl-refiner --tiny /tmp/refiner.safetensors
    /usr/bin/python3 tools/reference_sdxl.py tokenizer
    /usr/bin/python3 tools/reference_sdxl.py models /tmp/sdxl.safetensors /tmp/refiner.safetensors
    build/gen_ckpt --arch sdxl --tiny --dtype f16 /tmp/sdxl16.safetensors
    /usr/bin/python3 tools/reference_sdxl.py txt2img /tmp/sdxl16.safetensors

The tokenizer section needs only the standard library.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_sd15 import (FIX, Ref, Tokenizer, fixture_line, tokenize_prompt,  # noqa: E402
                            wave)

BOS, EOS = 49406, 49407
PAD_L, PAD_G = EOS, 0          # §4.1: CLIP-L pads with the end token, bigG with id 0
SCALE = 0.13025                # §7: latent_formats SDXL.scale_factor
ADM_EMBED = 256                # §5.1: Timestep(256)

# ---------------------------------------------------------------- tokenizers (§4.1)


def cmd_tokenizer():
    """Both lists per corpus prompt: `n hw`, then n CLIP-L chunks, then n bigG chunks."""
    tok = Tokenizer()
    with open(os.path.join(FIX, 'tokenizer_corpus.json'), encoding='utf-8') as f:
        corpus = json.load(f)
    lines = []
    for text in corpus:
        both = [tokenize_prompt(tok, text, pad=p) for p in (PAD_L, PAD_G)]
        assert len(both[0]) == len(both[1])
        hw = any(w != 1.0 for c in both[0] for _, w in c)
        lines.append('%d %d' % (len(both[0]), int(hw)))
        for chunks in both:
            for c in chunks:
                assert len(c) == 77
                lines.append(' '.join(str(t) if w == 1.0 else '%d:%.9g' % (t, w) for t, w in c))
    with open(os.path.join(FIX, 'sdxl_tokenizer_expected.txt'), 'w') as f:
        f.write('\n'.join(lines) + '\n')
    print('wrote %d prompts' % len(corpus))


# ---------------------------------------------------------------- models, torch float64

OPENCLIP_LAYER = {  # §1.3: OpenCLIP file name -> Hugging Face name of the same weight
    'ln_1': 'layer_norm1', 'ln_2': 'layer_norm2', 'attn.out_proj': 'self_attn.out_proj',
    'mlp.c_fc': 'mlp.fc1', 'mlp.c_proj': 'mlp.fc2',
}


class RefXL(Ref):
    def __init__(self, path, refiner=False):
        super().__init__(path)
        self.refiner = refiner
        # §1.1 / §1.2: CLIP-L (HF names) only in the base; bigG under embedders.1 (base) or .0.
        self.enc = {}
        if not refiner:
            self.enc['l'] = ('conditioner.embedders.0.transformer.text_model.', 'quick')
        self.enc['g'] = (self.openclip_to_hf('conditioner.embedders.%d.model.' % (0 if refiner else 1)),
                         'gelu')

    def openclip_to_hf(self, src):
        """Rename bigG's OpenCLIP tensors (§1.3) into HF names under 'bigG.'; split in_proj by rows."""
        dst = 'bigG.'
        w = self.w
        w[dst + 'embeddings.token_embedding.weight'] = w[src + 'token_embedding.weight']
        w[dst + 'embeddings.position_embedding.weight'] = w[src + 'positional_embedding']
        i = 0
        while src + 'transformer.resblocks.%d.ln_1.weight' % i in w:
            s = src + 'transformer.resblocks.%d.' % i
            d = dst + 'encoder.layers.%d.' % i
            for a, b in OPENCLIP_LAYER.items():
                for sfx in ('weight', 'bias'):
                    w[d + b + '.' + sfx] = w[s + a + '.' + sfx]
            D = w[s + 'attn.in_proj_weight'].shape[1]
            for k, name in enumerate(('q_proj', 'k_proj', 'v_proj')):
                w[d + 'self_attn.%s.weight' % name] = w[s + 'attn.in_proj_weight'][k * D:(k + 1) * D]
                w[d + 'self_attn.%s.bias' % name] = w[s + 'attn.in_proj_bias'][k * D:(k + 1) * D]
            i += 1
        for sfx in ('weight', 'bias'):
            w[dst + 'final_layer_norm.' + sfx] = w[src + 'ln_final.' + sfx]
        self.proj = w[src + 'text_projection']  # pooled = row . P (P as stored, §1.3)
        return dst

    def width(self, e):
        return self.W(self.enc[e][0] + 'final_layer_norm.weight').shape[0]

    # -- text encoders (§4.2, §4.3): all hidden states, and the final-LN last layer
    def encoder(self, e, ids):
        torch = self.torch
        P, act = self.enc[e]
        tokw = self.W(P + 'embeddings.token_embedding.weight')
        x = torch.stack([tokw[torch.tensor(s)] for s in ids])
        x = x + self.W(P + 'embeddings.position_embedding.weight')[:len(ids[0])]
        heads = x.shape[-1] // 64  # 64-wide heads in both encoders
        hidden = []
        l = 0
        while self.has(P + 'encoder.layers.%d.layer_norm1.weight' % l):
            p = P + 'encoder.layers.%d.' % l
            h = self.ln(x, p + 'layer_norm1')
            a = self.attention(self.lin(h, p + 'self_attn.q_proj'), self.lin(h, p + 'self_attn.k_proj'),
                               self.lin(h, p + 'self_attn.v_proj'), heads, causal=True)
            x = x + self.lin(a, p + 'self_attn.out_proj')
            h = self.lin(self.ln(x, p + 'layer_norm2'), p + 'mlp.fc1')
            if act == 'quick':
                h = h * torch.sigmoid(1.702 * h)
            else:  # exact erf GELU (§4.3)
                h = 0.5 * h * (1 + torch.special.erf(h / 2 ** 0.5))
            x = x + self.lin(h, p + 'mlp.fc2')
            hidden.append(x)
            l += 1
        return hidden, self.ln(x, P + 'final_layer_norm')

    def encode(self, e, chunks, layer=-2, norm=False):
        """§4.4: the selected layer (CLIPSetLastLayer index, -2 = default), no final LN (norm:
        with it, as SD2's layer_norm_hidden_state), emphasis against this encoder's own empty
        sequence; pooled (bigG) from chunk 0's first end token."""
        import numpy as np
        pad = PAD_G if e == 'g' else PAD_L
        ids = [[t for t, _ in c] for c in chunks]
        ws = [[w for _, w in c] for c in chunks]
        hw = any(w != 1.0 for c in ws for w in c)
        if hw:
            ids.append([BOS, EOS] + [pad] * 75)
        hidden, last = self.encoder(e, ids)
        sel = hidden[len(hidden) + layer]
        if norm:
            sel = self.ln(sel, self.enc[e][0] + 'final_layer_norm')
        n = len(chunks)
        out = sel[:n].clone()
        if hw:
            E = sel[n]
            for c in range(n):
                for j in range(77):
                    if ws[c][j] != 1.0:
                        out[c, j] = (out[c, j] - E[j]) * float(np.float32(ws[c][j])) + E[j]
        pooled = None
        if e == 'g':
            pooled = last[0, ids[0].index(EOS)] @ self.proj
        return out.reshape(1, n * 77, -1), pooled

    # -- ADM vector (§5.1)
    def embed(self, v):
        """E(v) as torch float32 computes it: float32 frequencies, v * f in float32, cos first."""
        torch = self.torch
        half = ADM_EMBED // 2
        f = torch.exp(-torch.log(torch.tensor(10000.0, dtype=torch.float32)) *
                      torch.arange(half, dtype=torch.float32) / half)
        a = torch.tensor(v, dtype=torch.float32) * f
        return torch.cat([torch.cos(a), torch.sin(a)]).double()

    def adm(self, pooled, sizes):
        """Base: (h, w, crop_h, crop_w, target_h, target_w); refiner: (h, w, crop_h, crop_w,
        aesthetic score)."""
        return self.torch.cat([pooled] + [self.embed(float(v)) for v in sizes])

    # -- UNet (§6): blocks walked from the keys, linear projections, 64-wide heads
    def st(self, x, p, ctx):
        B, C, H, Wd = x.shape
        heads = C // 64
        h = self.gn(x, p + '.norm', 1e-6).permute(0, 2, 3, 1).reshape(B, H * Wd, C)
        h = self.lin(h, p + '.proj_in')  # tokens first, then the Linear (§6.2)
        d = 0
        while self.has(p + '.transformer_blocks.%d.norm1.weight' % d):
            q = p + '.transformer_blocks.%d.' % d
            n = self.ln(h, q + 'norm1')
            a = self.attention(self.lin(n, q + 'attn1.to_q', False), self.lin(n, q + 'attn1.to_k', False),
                               self.lin(n, q + 'attn1.to_v', False), heads)
            h = h + self.lin(a, q + 'attn1.to_out.0')
            n = self.ln(h, q + 'norm2')
            a = self.attention(self.lin(n, q + 'attn2.to_q', False), self.lin(ctx, q + 'attn2.to_k', False),
                               self.lin(ctx, q + 'attn2.to_v', False), heads)
            h = h + self.lin(a, q + 'attn2.to_out.0')
            n = self.ln(h, q + 'norm3')
            u = self.lin(n, q + 'ff.net.0.proj')
            half = u.shape[-1] // 2
            val, gate = u[..., :half], u[..., half:]
            h = h + self.lin(val * (0.5 * gate * (1 + self.torch.special.erf(gate / 2 ** 0.5))),
                             q + 'ff.net.2')
            d += 1
        h = self.lin(h, p + '.proj_out')
        return h.reshape(B, H, Wd, C).permute(0, 3, 1, 2) + x

    def unet(self, x, t, ctx, y):
        import torch.nn.functional as F
        torch = self.torch
        P = 'model.diffusion_model.'
        probes = {}
        mc = self.W(P + 'input_blocks.0.0.weight').shape[0]
        half = mc // 2
        freq = torch.exp(-torch.log(torch.tensor(10000.0, dtype=torch.float32)) *
                         torch.arange(half, dtype=torch.float32) / half).double()
        a = torch.tensor(t, dtype=torch.float64)[:, None] * freq[None]
        emb = torch.cat([torch.cos(a), torch.sin(a)], 1)
        probes['t_emb'] = emb
        temb = self.lin(self.silu(self.lin(emb, P + 'time_embed.0')), P + 'time_embed.2')
        probes['time_embed'] = temb
        # §5.3: emb = time_embed + label_emb(y), and every ResBlock takes SiLU(emb); a UNet
        # without an ADM input (SD2.x, y None) uses time_embed alone
        emb = temb
        if y is not None:
            emb = temb + self.lin(self.silu(self.lin(y, P + 'label_emb.0.0')), P + 'label_emb.0.2')
        h = self.conv(x, P + 'input_blocks.0.0')
        probes['input_blocks.0'] = h
        hs = [h]
        i = 1
        while self.has(P + 'input_blocks.%d.0.op.weight' % i) or \
                self.has(P + 'input_blocks.%d.0.in_layers.0.weight' % i):
            p = P + 'input_blocks.%d.' % i
            if self.has(p + '0.op.weight'):
                h = F.conv2d(h, self.W(p + '0.op.weight'), self.W(p + '0.op.bias'), 2, 1)
            else:
                h = self.resblock(h, p + '0', emb)
                if self.has(p + '1.norm.weight'):
                    h = self.st(h, p + '1', ctx)
            probes['input_blocks.%d' % i] = h
            hs.append(h)
            i += 1
        h = self.resblock(h, P + 'middle_block.0', emb)
        h = self.st(h, P + 'middle_block.1', ctx)
        h = self.resblock(h, P + 'middle_block.2', emb)
        probes['middle_block'] = h
        i = 0
        while self.has(P + 'output_blocks.%d.0.in_layers.0.weight' % i):
            p = P + 'output_blocks.%d.' % i
            h = self.resblock(torch.cat([h, hs.pop()], 1), p + '0', emb)
            sub = 1
            if self.has(p + '1.norm.weight'):
                h = self.st(h, p + '1', ctx)
                sub = 2
            if self.has(p + '%d.conv.weight' % sub):
                nxt = hs[-1]
                h = self.conv(self.nearest(h, nxt.shape[2], nxt.shape[3]), p + '%d.conv' % sub)
            probes['output_blocks.%d' % i] = h
            i += 1
        assert not hs
        h = self.conv(self.silu(self.gn(h, P + 'out.0', 1e-5)), P + 'out.2')
        probes['eps'] = h
        return h, probes


# The UNet cases both sides run: batch 2, an odd latent (9 x 7), two timesteps, a 154-token
# context from a wave, y built from a wave "pooled" vector with per-sample sizes.
UNET_H, UNET_W, UNET_T = 9, 7, [999.0, 1.0]
BASE_SIZES = [(72, 56, 0, 0, 72, 56), (1024, 768, 8, 16, 1024, 1024)]
REFINER_SIZES = [(72, 56, 0, 0, 6.0), (72, 56, 0, 0, 2.5)]
SDXL_TEXT_G = 'a (glass:1.3) bottle on a table'
SDXL_TEXT_L = 'a ' + 'red ' * 90 + 'bottle'
UNET_PROBES = ('t_emb', 'time_embed', 'input_blocks.0', 'input_blocks.1', 'input_blocks.4',
               'middle_block', 'output_blocks.2', 'eps')


def unet_case(r, name, sizes, lines):
    torch = r.torch
    P = 'model.diffusion_model.'
    B = len(sizes)
    ctx_dim = r.W(P + 'input_blocks.4.1.transformer_blocks.0.attn2.to_k.weight').shape[1]
    adm_in = r.W(P + 'label_emb.0.0.weight').shape[1]
    pw = adm_in - (len(sizes[0]) * ADM_EMBED)
    x = torch.tensor(wave(B * 4 * UNET_H * UNET_W, 0.37, 0.1)).reshape(B, 4, UNET_H, UNET_W)
    ctx = torch.tensor(wave(B * 154 * ctx_dim, 0.011, 0.5)).reshape(B, 154, ctx_dim)
    pooled = torch.tensor(wave(B * pw, 0.13, 0.7)).reshape(B, pw)
    y = torch.stack([r.adm(pooled[b], sizes[b]) for b in range(B)])
    lines.append(fixture_line('%s.y' % name, y))
    _, probes = r.unet(x, UNET_T, ctx, y)
    n_out = sum(1 for k in probes if k.startswith('output_blocks.'))
    for n in UNET_PROBES + ('output_blocks.%d' % (n_out - 1),):  # the last output block
        lines.append(fixture_line('%s.%s' % (name, n), probes[n]))


def cmd_models(base_path, refiner_path):
    torch = __import__('torch')
    tok = Tokenizer()
    lines = []
    r = RefXL(base_path)
    # Text: default (penultimate), CLIPSetLastLayer(-1), emphasis, a 2-chunk prompt, and an
    # explicit end token in the text (bigG's padding starts after the *appended* end token).
    prompts = [('a photo of a cat', -2), ('a photo of a cat', -1),
               ('a (red:1.5) cat, ((masterpiece)), [blue] sky', -2),
               ('a ' + 'very ' * 80 + 'long prompt', -2),
               ('<|endoftext|> inside <|startoftext|>', -2)]
    for k, (text, layer) in enumerate(prompts):
        cl, _ = r.encode('l', tokenize_prompt(tok, text, pad=PAD_L), layer)
        cg, pooled = r.encode('g', tokenize_prompt(tok, text, pad=PAD_G), layer)
        lines.append(fixture_line('xl%d.l' % k, cl))
        lines.append(fixture_line('xl%d.g' % k, cg))
        lines.append(fixture_line('xl%d.pooled' % k, pooled))
        if k == 0:  # CLIPTextEncode's conditioning: CLIP-L's features first (§4.5)
            lines.append(fixture_line('xl0.cond', torch.cat([cl, cg], 2)))
            sizes = (64, 64, 0, 0, 64, 64)  # CLIPTextEncode on an 8x8 latent (§5.2)
            lines.append(fixture_line('xl0.y', r.adm(pooled, sizes)))
    # CLIPTextEncodeSDXL (§4.7) with text_l longer than text_g: bigG's list is evened out
    # with chunks of the empty prompt, [start, end, 0 x 75]; text_g's weight is bigG's alone.
    g = tokenize_prompt(tok, SDXL_TEXT_G, pad=PAD_G)
    l = tokenize_prompt(tok, SDXL_TEXT_L, pad=PAD_L)
    g += [[(BOS, 1.0), (EOS, 1.0)] + [(PAD_G, 1.0)] * 75] * (len(l) - len(g))
    cl, _ = r.encode('l', l)
    cg, pooled = r.encode('g', g)
    lines.append(fixture_line('xlsdxl.cond', torch.cat([cl, cg], 2)))
    lines.append(fixture_line('xlsdxl.pooled', pooled))
    unet_case(r, 'xlunet', BASE_SIZES, lines)
    z = torch.tensor(wave(4 * 5 * 6, 0.23, 0.3)).reshape(1, 4, 5, 6)
    z = (z.float() / torch.tensor(SCALE, dtype=torch.float32)).double()  # float32 as ComfyUI divides
    img, _ = r.decode(z)
    lines.append(fixture_line('xlvae.out', img))
    # Refiner: bigG alone (embedders.0), 4 levels, ADM with the aesthetic score.
    rr = RefXL(refiner_path, refiner=True)
    cg, pooled = rr.encode('g', tokenize_prompt(tok, 'a photo of a cat', pad=PAD_G))
    lines.append(fixture_line('rf0.g', cg))
    lines.append(fixture_line('rf0.pooled', pooled))
    unet_case(rr, 'rfunet', REFINER_SIZES, lines)
    with open(os.path.join(FIX, 'sdxl_tiny_expected.txt'), 'w') as f:
        f.write('# tools/reference_sdxl.py models <gen_ckpt --arch sdxl --tiny> '
                '<gen_ckpt --arch sdxl-refiner --tiny> (seed 42, f32): name ndim shape... '
                'mean|x| sum nsamples (index value)...\n')
        f.write('\n'.join(lines) + '\n')
    print('wrote %d fixture lines' % len(lines))


# ---------------------------------------------------------------- a whole txt2img (§0, sd15 §5-§7)

TXT2IMG = {'seed': 5, 'steps': 3, 'cfg': 8.0, 'sampler': 'euler', 'scheduler': 'normal',
           'width': 64, 'height': 64, 'positive': 'a (glass:1.2) bottle', 'negative': 'text, watermark'}


def sample_decode(r, conds, P, scale, predict='eps'):
    """KSampler (euler, normal, CFG) from seed noise on conds [(context, y or None)], then
    VAEDecode of x / scale and SaveImage's 8-bit pixels [H, W, 3]. The sampler runs in float32
    as ComfyUI's does, the UNet and VAE in float64 cast to float32. predict: the model's
    sampling type, 'eps' or 'v' (V_PREDICTION's calculate_denoised, sigma_data 1)."""
    import numpy as np
    torch = __import__('torch')
    f32 = torch.float32
    h, w = P['height'] // 8, P['width'] // 8
    # sd15 §5.1-5.2: the sigma table, timestep(sigma) and sigma(t)
    i = torch.arange(1000, dtype=torch.float64)
    betas = (0.00085 ** 0.5 + i * (0.012 ** 0.5 - 0.00085 ** 0.5) / 999) ** 2
    ac = torch.cumprod(1 - betas, 0)
    sig64 = ((1 - ac) / ac) ** 0.5
    log_sigmas = sig64.log().to(f32)
    sigma_max, sigma_min = sig64[-1].to(f32), sig64[0].to(f32)

    def timestep(sigma):
        return float((sigma.log() - log_sigmas).abs().argmin())

    def sigma_of(t):
        t = t.clamp(0, 999)
        lo, hi = int(t.floor()), int(t.ceil())
        wt = t - t.floor()
        return ((1 - wt) * log_sigmas[lo] + wt * log_sigmas[hi]).exp()

    ts = torch.linspace(timestep(sigma_max), timestep(sigma_min), P['steps'], dtype=f32)  # normal
    sigmas = torch.stack([sigma_of(t) for t in ts] + [torch.tensor(0.0, dtype=f32)])
    # sd15 §6.1: one CPU randn draw after seeding; §5.4: x = n * sqrt(1 + s0^2) (max denoise)
    torch.manual_seed(P['seed'])
    noise = torch.randn([1, 4, h, w], dtype=f32)
    x = noise * torch.sqrt(1.0 + sigmas[0] ** 2)

    def denoise(x, sigma, cond):
        xc = x / (sigma ** 2 + 1.0) ** 0.5  # sd15 §3.9
        out, _ = r.unet(xc.double(), [timestep(sigma)], cond[0], cond[1])
        out = out.to(f32)
        if predict == 'v':
            return x * 1.0 / (sigma ** 2 + 1.0) - out * sigma * 1.0 / (sigma ** 2 + 1.0) ** 0.5
        return x - out * sigma

    for k in range(P['steps']):  # euler with CFG (sd15 §5.3, §5.7)
        s, sn = sigmas[k], sigmas[k + 1]
        pos, neg = denoise(x, s, conds[0]), denoise(x, s, conds[1])
        den = neg + (pos - neg) * torch.tensor(P['cfg'], dtype=f32)
        d = (x - den) / s
        x = x + d * (sn - s)
    z = x / torch.tensor(scale, dtype=f32)
    img, _ = r.decode(z.double())
    img = torch.clamp((img.to(f32) + 1.0) / 2.0, 0.0, 1.0)  # VAEDecode's process_output
    print('sigmas', [float(v) for v in sigmas])
    return np.clip(img[0].permute(1, 2, 0).numpy() * 255.0, 0, 255).astype(np.uint8)  # SaveImage


def cmd_txt2img(path):
    """ComfyUI's default graph on the tiny SDXL (the e2e's sdxl.safetensors, f16): CLIPTextEncode
    x2, EmptyLatentImage, KSampler (euler, normal), VAEDecode, SaveImage's 8-bit pixels. The
    sampler runs in float32 as ComfyUI's does; the UNet and VAE in float64, cast to float32."""
    import base64
    torch = __import__('torch')
    r = RefXL(path)
    tok = Tokenizer()
    P = TXT2IMG
    conds = []
    for text in (P['positive'], P['negative']):
        cl, _ = r.encode('l', tokenize_prompt(tok, text, pad=PAD_L))
        cg, pooled = r.encode('g', tokenize_prompt(tok, text, pad=PAD_G))
        sizes = (P['height'], P['width'], 0, 0, P['height'], P['width'])  # §5.2: latent x 8
        conds.append((torch.cat([cl, cg], 2), r.adm(pooled, sizes)[None]))
    px = sample_decode(r, conds, P, SCALE)
    out = dict(P, pixels_rgb_b64=base64.b64encode(px.tobytes()).decode('ascii'),
               note='tools/reference_sdxl.py txt2img <gen_ckpt --arch sdxl --tiny --dtype f16>')
    with open(os.path.join(FIX, 'sdxl_txt2img_expected.json'), 'w') as f:
        json.dump(out, f, indent=1)
        f.write('\n')
    print('mean pixel', float(px.mean()))


if __name__ == '__main__':
    if len(sys.argv) >= 2 and sys.argv[1] == 'tokenizer':
        cmd_tokenizer()
    elif len(sys.argv) >= 4 and sys.argv[1] == 'models':
        cmd_models(sys.argv[2], sys.argv[3])
    elif len(sys.argv) >= 3 and sys.argv[1] == 'txt2img':
        cmd_txt2img(sys.argv[2])
    else:
        print(__doc__)
        sys.exit(2)

#!/usr/bin/python3
"""Independent reference for latentd's SD1.5 models, written from shared/spec/sd15.md
(not from ComfyUI's code): CLIP tokenizer + prompt syntax, CLIP text encoder, UNet, VAE.

Run once (Debian: apt-get install python3-torch python3-numpy) to regenerate the small
fixtures in tests/fixtures/models/, which are committed so CI needs no Python:

    build/gen_ckpt --tiny /tmp/tiny.safetensors
    python3 tools/reference_sd15.py tokenizer
    python3 tools/reference_sd15.py models /tmp/tiny.safetensors

The tokenizer section needs only the standard library.
"""
import json
import os
import re
import struct
import sys
import unicodedata as ud

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKDIR = os.path.join(ROOT, 'models', 'data', 'sd1_tokenizer')
FIX = os.path.join(ROOT, 'tests', 'fixtures', 'models')

# ---------------------------------------------------------------- tokenizer (§2.1-2.5)

def bytes_to_unicode():
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


class Tokenizer:
    def __init__(self):
        with open(os.path.join(TOKDIR, 'vocab.json'), encoding='utf-8') as f:
            self.vocab = json.load(f)
        with open(os.path.join(TOKDIR, 'merges.txt'), encoding='utf-8') as f:
            lines = f.read().split('\n')[1:]
        merges = [tuple(l.split(' ')) for l in lines if l]
        self.ranks = {m: i for i, m in enumerate(merges)}
        self.byte_enc = bytes_to_unicode()

    @staticmethod
    def is_cjk(cp):
        return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
                or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F
                or 0x2B820 <= cp <= 0x2CEAF or 0xF900 <= cp <= 0xFAFF
                or 0x2F800 <= cp <= 0x2FA1F)

    def normalize(self, text):
        out = []
        for ch in text:
            cp = ord(ch)
            cat = ud.category(ch)
            if ch in '\t\n\r ' or cat == 'Zs':
                out.append(' ')
                continue
            if cp == 0 or cp == 0xFFFD or cat.startswith('C'):
                continue
            if self.is_cjk(cp):
                out.append(' ' + ch + ' ')
            else:
                out.append(ch)
        text = ud.normalize('NFC', ''.join(out))
        return ' '.join(w.lower() for w in text.split())

    @staticmethod
    def cls(ch):
        c = ud.category(ch)
        if ch.isspace():
            return 'S'
        return c[0] if c[0] in 'LN' else 'P'

    def pretokenize(self, text):
        i, n, out = 0, len(text), []
        while i < n:
            ch = text[i]
            if ch.isspace():
                i += 1
                continue
            m = None
            for lit in ('<|startoftext|>', '<|endoftext|>'):
                if text.startswith(lit, i):
                    m = lit
                    break
            if m is None and ch == "'":
                for c in ("'s", "'t", "'re", "'ve", "'m", "'ll", "'d"):
                    if text.startswith(c, i):
                        m = c
                        break
            if m is None:
                k = self.cls(ch)
                j = i + 1
                if k == 'L':
                    while j < n and self.cls(text[j]) == 'L':
                        j += 1
                elif k == 'P':
                    while j < n and self.cls(text[j]) == 'P':
                        j += 1
                m = text[i:j]
            out.append(m)
            i += len(m)
        return out

    def bpe(self, word):
        syms = list(word[:-1]) + [word[-1] + '</w>']
        while len(syms) > 1:
            pairs = [(self.ranks.get((a, b), 1 << 30), a, b) for a, b in zip(syms, syms[1:])]
            r, a, b = min(pairs)
            if r == 1 << 30:
                break
            out, i = [], 0
            while i < len(syms):
                if i + 1 < len(syms) and syms[i] == a and syms[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            syms = out
        return [self.vocab[s] for s in syms]

    def encode(self, text):
        ids = []
        for p in self.pretokenize(self.normalize(text)):
            if p == '<|startoftext|>':
                ids.append(49406)
            elif p == '<|endoftext|>':
                ids.append(49407)
            else:
                ids += self.bpe(''.join(self.byte_enc[b] for b in p.encode('utf-8')))
        return ids

# ---------------------------------------------------------------- prompt syntax (§2.6-2.7)

def parse_parentheses(s):
    items, cur, depth = [], '', 0
    for c in s:
        if c == '(':
            if depth == 0:
                if cur:
                    items.append(cur)
                cur = '('
            else:
                cur += '('
            depth += 1
        elif c == ')':
            depth -= 1
            if depth == 0:
                items.append(cur + ')')
                cur = ''
            else:
                cur += ')'
        else:
            cur += c
    if cur:
        items.append(cur)
    return items


def token_weights(s, w):
    out = []
    for x in parse_parentheses(s):
        if len(x) >= 2 and x[0] == '(' and x[-1] == ')':
            x = x[1:-1]
            weight = w * 1.1
            k = x.rfind(':')
            if k > 0:
                try:
                    weight = float(x[k + 1:])
                    x = x[:k]
                except ValueError:
                    pass
            out += token_weights(x, weight)
        else:
            out.append((x, w))
    return out


def tokenize_prompt(tok, text, embeds=None, pad=49407):
    """Chunks of (id, weight); `pad` fills after the end token (sdxl.md §4.1: bigG pads with 0)."""
    text = text.replace('\\)', '\0\1').replace('\\(', '\0\2')
    groups = []
    for seg, w in token_weights(text, 1.0):
        seg = seg.replace('\0\1', ')').replace('\0\2', '(')
        parts = re.split(' embedding:|\nembedding:', seg)
        pieces = [parts[0]] + ['embedding:' + p for p in parts[1:]]
        for word in [p for p in pieces if p != '']:
            if word.startswith('embedding:'):
                name = word[len('embedding:'):].strip('\n')
                sp = name.split()
                name0 = sp[0] if sp else ''
                leftover = ' '.join(sp[1:])
                emb = (embeds or {}).get(name0)
                stripped = name0.rstrip(',')
                if emb is None and len(stripped) < len(name0):
                    emb = (embeds or {}).get(stripped)
                    leftover = '{} {}'.format(name0[len(stripped):], leftover)
                if emb is not None:
                    groups.append([(('E', emb[k]), w) for k in range(emb.shape[0])])
                if leftover == '':
                    continue
                word = leftover
            groups.append([(t, w) for t in tok.encode(word)])
    chunks, batch = [], [(49406, 1.0)]
    chunks.append(batch)
    for g in groups:
        large = len(g) >= 8
        while g:
            if len(g) + len(batch) > 76:
                rem = 77 - len(batch) - 1
                if large:
                    batch += g[:rem]
                    batch.append((49407, 1.0))
                    g = g[rem:]
                else:
                    batch.append((49407, 1.0))
                    batch += [(pad, 1.0)] * rem
                batch = [(49406, 1.0)]
                chunks.append(batch)
            else:
                batch += g
                g = []
    batch.append((49407, 1.0))
    batch += [(pad, 1.0)] * (77 - len(batch))
    return chunks


def cmd_tokenizer():
    tok = Tokenizer()
    with open(os.path.join(FIX, 'tokenizer_corpus.json'), encoding='utf-8') as f:
        corpus = json.load(f)
    lines = []
    for text in corpus:
        chunks = tokenize_prompt(tok, text)
        hw = any(w != 1.0 for c in chunks for _, w in c)
        lines.append('%d %d' % (len(chunks), int(hw)))
        for c in chunks:
            assert len(c) == 77
            lines.append(' '.join(str(t) if w == 1.0 else '%d:%.9g' % (t, w) for t, w in c))
    with open(os.path.join(FIX, 'tokenizer_expected.txt'), 'w') as f:
        f.write('\n'.join(lines) + '\n')
    print('wrote %d prompts' % len(corpus))



# ---------------------------------------------------------------- models (§2.10-§4), torch float64

def load_safetensors(path):
    import numpy as np
    with open(path, 'rb') as f:
        n = struct.unpack('<Q', f.read(8))[0]
        hdr = json.loads(f.read(n))
        data = f.read()
    meta = hdr.pop('__metadata__', {})
    out = {}
    for k, v in hdr.items():
        a, b = v['data_offsets']
        raw = data[a:b]
        if v['dtype'] == 'F32':
            arr = np.frombuffer(raw, dtype='<f4')
        elif v['dtype'] == 'F16':
            arr = np.frombuffer(raw, dtype='<f2').astype(np.float32)
        elif v['dtype'] == 'BF16':
            arr = (np.frombuffer(raw, dtype='<u2').astype(np.uint32) << 16).view(np.float32)
        else:
            continue
        out[k] = arr.reshape(v['shape']) if v['shape'] else arr.reshape(())
    return out, meta


def wave(n, a, b):
    """Deterministic inputs shared with the C tests: (float)sin(a*i + b)."""
    import numpy as np
    i = np.arange(n, dtype=np.float64)
    return np.sin(a * i + b).astype(np.float32).astype(np.float64)


class Ref:
    def __init__(self, path):
        import torch
        self.torch = torch
        arrs, meta = load_safetensors(path)
        self.w = {k: torch.tensor(v, dtype=torch.float64) for k, v in arrs.items()}
        self.clip_heads = int(meta.get('latentd.clip_heads', 12))
        self.unet_heads = int(meta.get('latentd.unet_heads', 8))

    def W(self, k):
        return self.w[k]

    def has(self, k):
        return k in self.w

    # -- primitives, written out from §8
    def gn(self, x, p, eps):
        torch = self.torch
        B, C = x.shape[:2]
        g = x.reshape(B, 32, -1)
        mu = g.mean(-1, keepdim=True)
        var = ((g - mu) ** 2).mean(-1, keepdim=True)
        g = ((g - mu) / torch.sqrt(var + eps)).reshape(x.shape)
        shp = (1, C) + (1,) * (x.dim() - 2)
        return g * self.W(p + '.weight').reshape(shp) + self.W(p + '.bias').reshape(shp)

    def ln(self, x, p, eps=1e-5):
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return (x - mu) / self.torch.sqrt(var + eps) * self.W(p + '.weight') + self.W(p + '.bias')

    def conv(self, x, p, stride=1, pad=1):
        import torch.nn.functional as F
        w = self.W(p + '.weight')
        if w.dim() == 2:
            w = w[:, :, None, None]
        return F.conv2d(x, w, self.W(p + '.bias'), stride, pad)

    def lin(self, x, p, bias=True):
        w = self.W(p + '.weight')
        if w.dim() == 4:
            w = w[:, :, 0, 0]
        y = x @ w.t()
        return y + self.W(p + '.bias') if bias else y

    @staticmethod
    def silu(x):
        return x / (1 + (-x).exp())

    def attention(self, q, k, v, heads, causal=False):
        torch = self.torch
        B, T, C = q.shape
        S = k.shape[1]
        d = C // heads
        q = q.reshape(B, T, heads, d).transpose(1, 2)
        k = k.reshape(B, S, heads, d).transpose(1, 2)
        v = v.reshape(B, S, heads, d).transpose(1, 2)
        s = q @ k.transpose(-1, -2) / (d ** 0.5)
        if causal:
            s = s + torch.triu(torch.full((T, S), -3.4028234663852886e38, dtype=s.dtype), 1)
        s = s - s.max(-1, keepdim=True).values
        p = s.exp()
        p = p / p.sum(-1, keepdim=True)
        return (p @ v).transpose(1, 2).reshape(B, T, C)

    # -- CLIP
    def clip(self, ids, clip_skip=-1):
        torch = self.torch
        P = 'cond_stage_model.transformer.text_model.'
        tokw = self.W(P + 'embeddings.token_embedding.weight')
        rows = []
        for seq in ids:
            rows.append(torch.stack([torch.tensor(t[1], dtype=torch.float64) if isinstance(t, tuple)
                                     else tokw[t] for t in seq]))
        x = torch.stack(rows) + self.W(P + 'embeddings.position_embedding.weight')[:len(ids[0])]
        probes = {'embeddings': x.clone()}
        L = 0
        while self.has(P + 'encoder.layers.%d.layer_norm1.weight' % L):
            L += 1
        keep = L + clip_skip + 1 if (clip_skip < 0 and -clip_skip <= L) else L
        sel = None
        for l in range(L):
            p = P + 'encoder.layers.%d.' % l
            h = self.ln(x, p + 'layer_norm1')
            a = self.attention(self.lin(h, p + 'self_attn.q_proj'), self.lin(h, p + 'self_attn.k_proj'),
                               self.lin(h, p + 'self_attn.v_proj'), self.clip_heads, causal=True)
            x = x + self.lin(a, p + 'self_attn.out_proj')
            h = self.lin(self.ln(x, p + 'layer_norm2'), p + 'mlp.fc1')
            h = h * torch.sigmoid(1.702 * h)
            x = x + self.lin(h, p + 'mlp.fc2')
            if l == 0:
                probes['layer.0'] = x.clone()
            if l + 1 == keep:
                sel = x.clone()
        last = self.ln(x, P + 'final_layer_norm')
        sel = self.ln(sel, P + 'final_layer_norm')
        return sel, last, probes

    def encode_prompt(self, tok, text, clip_skip=-1, embeds=None):
        import numpy as np
        chunks = tokenize_prompt(tok, text, embeds)
        ids = [[t for t, _ in c] for c in chunks]
        ws = [[w for _, w in c] for c in chunks]
        hw = any(w != 1.0 for c in ws for w in c)
        if hw:
            ids.append([49406] + [49407] * 76)
        sel, last, probes = self.clip(ids, clip_skip)
        n = len(chunks)
        out = sel[:n].clone()
        if hw:
            E = sel[n]
            for c in range(n):
                for j in range(77):
                    w = float(np.float32(ws[c][j]))
                    if ws[c][j] != 1.0:
                        out[c, j] = (out[c, j] - E[j]) * w + E[j]
        pos = ids[0].index(49407)
        pooled = last[0, pos]
        return out.reshape(1, n * 77, -1), pooled, probes

    # -- UNet
    def resblock(self, x, p, temb):
        h = self.conv(self.silu(self.gn(x, p + '.in_layers.0', 1e-5)), p + '.in_layers.2')
        h = h + self.lin(self.silu(temb), p + '.emb_layers.1')[:, :, None, None]
        h = self.conv(self.silu(self.gn(h, p + '.out_layers.0', 1e-5)), p + '.out_layers.3')
        skip = self.conv(x, p + '.skip_connection', pad=0) if self.has(p + '.skip_connection.weight') else x
        return skip + h

    def st(self, x, p, ctx):
        import torch.nn.functional as F
        B, C, H, Wd = x.shape
        h = self.conv(self.gn(x, p + '.norm', 1e-6), p + '.proj_in', pad=0)
        h = h.permute(0, 2, 3, 1).reshape(B, H * Wd, C)
        d = 0
        while self.has(p + '.transformer_blocks.%d.norm1.weight' % d):
            q = p + '.transformer_blocks.%d.' % d
            n = self.ln(h, q + 'norm1')
            a = self.attention(self.lin(n, q + 'attn1.to_q', False), self.lin(n, q + 'attn1.to_k', False),
                               self.lin(n, q + 'attn1.to_v', False), self.unet_heads)
            h = h + self.lin(a, q + 'attn1.to_out.0')
            n = self.ln(h, q + 'norm2')
            a = self.attention(self.lin(n, q + 'attn2.to_q', False), self.lin(ctx, q + 'attn2.to_k', False),
                               self.lin(ctx, q + 'attn2.to_v', False), self.unet_heads)
            h = h + self.lin(a, q + 'attn2.to_out.0')
            n = self.ln(h, q + 'norm3')
            u = self.lin(n, q + 'ff.net.0.proj')
            half = u.shape[-1] // 2
            val, gate = u[..., :half], u[..., half:]
            g = 0.5 * gate * (1 + self.torch.special.erf(gate / 2 ** 0.5))
            h = h + self.lin(val * g, q + 'ff.net.2')
            d += 1
        h = h.reshape(B, H, Wd, C).permute(0, 3, 1, 2)
        return self.conv(h, p + '.proj_out', pad=0) + x

    @staticmethod
    def nearest(x, th, tw):
        import numpy as np
        H, W = x.shape[2], x.shape[3]
        def idx(o, i):
            if o == 2 * i:
                return [d // 2 for d in range(o)]
            sc = np.float32(i) / np.float32(o)
            return [min(int(np.floor(np.float32(d) * sc)), i - 1) for d in range(o)]
        ri, ci = idx(th, H), idx(tw, W)
        return x[:, :, ri][:, :, :, ci]

    def unet(self, x, t, ctx):
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
        h = self.conv(x, P + 'input_blocks.0.0')
        probes['input_blocks.0'] = h
        hs = [h]
        idx = 1
        for l in range(4):
            for r in range(2):
                p = P + 'input_blocks.%d.' % idx
                h = self.resblock(h, p + '0', temb)
                if self.has(p + '1.norm.weight'):
                    h = self.st(h, p + '1', ctx)
                probes['input_blocks.%d' % idx] = h
                hs.append(h)
                idx += 1
            if l < 3:
                import torch.nn.functional as F
                p = P + 'input_blocks.%d.0.op' % idx
                h = F.conv2d(h, self.W(p + '.weight'), self.W(p + '.bias'), 2, 1)
                probes['input_blocks.%d' % idx] = h
                hs.append(h)
                idx += 1
        h = self.resblock(h, P + 'middle_block.0', temb)
        h = self.st(h, P + 'middle_block.1', ctx)
        h = self.resblock(h, P + 'middle_block.2', temb)
        probes['middle_block'] = h
        for i in range(12):
            p = P + 'output_blocks.%d.' % i
            h = torch.cat([h, hs.pop()], 1)
            h = self.resblock(h, p + '0', temb)
            sub = 1
            if self.has(p + '1.norm.weight'):
                h = self.st(h, p + '1', ctx)
                sub = 2
            if self.has(p + '%d.conv.weight' % sub):
                nxt = hs[-1]
                h = self.conv(self.nearest(h, nxt.shape[2], nxt.shape[3]), p + '%d.conv' % sub)
            probes['output_blocks.%d' % i] = h
        h = self.conv(self.silu(self.gn(h, P + 'out.0', 1e-5)), P + 'out.2')
        probes['eps'] = h
        return h, probes

    # -- VAE
    def vres(self, x, p):
        h = self.conv(self.silu(self.gn(x, p + '.norm1', 1e-6)), p + '.conv1')
        h = self.conv(self.silu(self.gn(h, p + '.norm2', 1e-6)), p + '.conv2')
        sc = self.conv(x, p + '.nin_shortcut', pad=0) if self.has(p + '.nin_shortcut.weight') else x
        return sc + h

    def vattn(self, x, p):
        B, C, H, Wd = x.shape
        h = self.gn(x, p + '.norm', 1e-6)
        t = h.permute(0, 2, 3, 1).reshape(B, H * Wd, C)
        a = self.attention(self.lin(t, p + '.q'), self.lin(t, p + '.k'), self.lin(t, p + '.v'), 1)
        o = self.lin(a, p + '.proj_out').reshape(B, H, Wd, C).permute(0, 3, 1, 2)
        return x + o

    def vmid(self, h, side):
        P = 'first_stage_model.' + side + '.mid.'
        h = self.vres(h, P + 'block_1')
        h = self.vattn(h, P + 'attn_1')
        return self.vres(h, P + 'block_2')

    def decode(self, z):
        P = 'first_stage_model.'
        probes = {}
        h = self.conv(z, P + 'post_quant_conv', pad=0)
        h = self.conv(h, P + 'decoder.conv_in')
        h = self.vmid(h, 'decoder')
        probes['decoder.mid'] = h
        for l in (3, 2, 1, 0):
            for b in range(3):
                h = self.vres(h, P + 'decoder.up.%d.block.%d' % (l, b))
            if l > 0:
                h = h.repeat_interleave(2, 2).repeat_interleave(2, 3)
                h = self.conv(h, P + 'decoder.up.%d.upsample.conv' % l)
            probes['decoder.up.%d' % l] = h
        h = self.conv(self.silu(self.gn(h, P + 'decoder.norm_out', 1e-6)), P + 'decoder.conv_out')
        probes['decoder.out'] = h
        return h, probes

    def encode(self, img):
        import torch.nn.functional as F
        P = 'first_stage_model.'
        probes = {}
        h = self.conv(img, P + 'encoder.conv_in')
        for l in range(4):
            for b in range(2):
                h = self.vres(h, P + 'encoder.down.%d.block.%d' % (l, b))
            if l < 3:
                h = F.pad(h, (0, 1, 0, 1))
                h = self.conv(h, P + 'encoder.down.%d.downsample.conv' % l, stride=2, pad=0)
            probes['encoder.down.%d' % l] = h
        h = self.vmid(h, 'encoder')
        probes['encoder.mid'] = h
        h = self.conv(self.silu(self.gn(h, P + 'encoder.norm_out', 1e-6)), P + 'encoder.conv_out')
        h = self.conv(h, P + 'quant_conv', pad=0)
        probes['moments'] = h
        return h[:, :4], probes


def tiled_scale(s, fn, ty, tx, o, scale, out_ch):
    """sd15.md §4.5 for one sample s [1, C, H, W]; scale = output/input size."""
    torch = __import__('torch')
    H, W = s.shape[2], s.shape[3]
    OH, OW = round(H * scale), round(W * scale)
    if H <= ty and W <= tx:
        return fn(s)
    out = torch.zeros(1, out_ch, OH, OW, dtype=s.dtype)
    wsum = torch.zeros(1, 1, OH, OW, dtype=s.dtype)
    def starts(L, T):
        return [0] if L <= T else list(range(0, L - o, T - o))
    for sy in starts(H, ty):
        for sx in starts(W, tx):
            py, px = max(0, min(H - o, sy)), max(0, min(W - o, sx))
            ly, lx = min(ty, H - py), min(tx, W - px)
            ps = fn(s[:, :, py:py + ly, px:px + lx])
            oh, ow = ps.shape[2], ps.shape[3]
            mask = torch.ones(1, 1, oh, ow, dtype=s.dtype)
            F = round(o * scale)
            for k in range(F):
                f = (k + 1) / F
                if F < oh:
                    mask[:, :, k, :] *= f
                    mask[:, :, oh - 1 - k, :] *= f
                if F < ow:
                    mask[:, :, :, k] *= f
                    mask[:, :, :, ow - 1 - k] *= f
            oy, ox = round(py * scale), round(px * scale)
            out[:, :, oy:oy + oh, ox:ox + ow] += ps * mask
            wsum[:, :, oy:oy + oh, ox:ox + ow] += mask
    return out / wsum


def tiled3(x, fn, T, o, scale, out_ch):
    torch = __import__('torch')
    res = []
    for b in range(x.shape[0]):
        s = x[b:b + 1]
        acc = (tiled_scale(s, fn, 2 * T, T // 2, o, scale, out_ch) +
               tiled_scale(s, fn, T // 2, 2 * T, o, scale, out_ch) +
               tiled_scale(s, fn, T, T, o, scale, out_ch)) / 3.0
        res.append(acc)
    return torch.cat(res, 0)


def fixture_line(name, t, nsamp=24):
    import numpy as np
    a = np.asarray(t.detach().numpy(), dtype=np.float64)
    flat = a.reshape(-1)
    n = flat.size
    idx = sorted(set([int(i * (n - 1) / (nsamp - 1)) for i in range(nsamp)] + [int(np.argmax(np.abs(flat)))]))
    parts = [name, str(a.ndim)] + [str(d) for d in a.shape]
    parts += ['%.9g' % np.abs(flat).mean(), '%.9g' % flat.sum(), str(len(idx))]
    for i in idx:
        parts += [str(i), '%.9g' % flat[i]]
    return ' '.join(parts)


def cmd_models(path):
    import numpy as np
    torch = __import__('torch')
    r = Ref(path)
    tok = Tokenizer()
    lines = []
    # CLIP
    prompts = [('a photo of a cat', -1), ('a photo of a cat', -2),
               ('a (red:1.5) cat, ((masterpiece)), [blue] sky', -1),
               ('a ' + 'very ' * 80 + 'long prompt', -1)]
    for k, (text, skip) in enumerate(prompts):
        cond, pooled, probes = r.encode_prompt(tok, text, skip)
        lines.append(fixture_line('clip%d.cond' % k, cond))
        lines.append(fixture_line('clip%d.pooled' % k, pooled))
        if k == 0:
            for n in ('embeddings', 'layer.0'):
                lines.append(fixture_line('clip%d.%s' % (k, n), probes[n]))
    D = r.W('cond_stage_model.transformer.text_model.final_layer_norm.weight').shape[0]
    # Textual inversion: a 2-vector embedding 'myemb' (wave 0.77, 0.2), one missing name.
    embeds = {'myemb': wave(2 * D, 0.77, 0.2).reshape(2, D)}
    cond, pooled, _ = r.encode_prompt(tok, 'a (embedding:myemb:1.2) photo, embedding:missing cat', -1,
                                      embeds)
    lines.append(fixture_line('clip4.cond', cond))
    lines.append(fixture_line('clip4.pooled', pooled))
    # UNet case A: B=1, 8x8, t=500, 77 tokens
    cases = [('unetA', 1, 8, 8, [500.0], 77), ('unetB', 2, 9, 7, [999.0, 1.0], 154)]
    for name, B, H, Wd, t, T in cases:
        x = torch.tensor(wave(B * 4 * H * Wd, 0.37, 0.1)).reshape(B, 4, H, Wd)
        ctx = torch.tensor(wave(B * T * D, 0.011, 0.5)).reshape(B, T, D)
        eps, probes = r.unet(x, t, ctx)
        for n in ('t_emb', 'time_embed', 'input_blocks.0', 'input_blocks.1', 'input_blocks.3',
                  'input_blocks.4', 'middle_block', 'output_blocks.2', 'output_blocks.11', 'eps'):
            lines.append(fixture_line('%s.%s' % (name, n), probes[n]))
    # VAE decode z [1,4,5,6]; encode img [1,3,32,40]
    z = torch.tensor(wave(4 * 5 * 6, 0.23, 0.3)).reshape(1, 4, 5, 6)
    img, probes = r.decode(z)
    for n in ('decoder.mid', 'decoder.up.3', 'decoder.up.1', 'decoder.out'):
        lines.append(fixture_line('vaedec.%s' % n, probes[n]))
    im = torch.tensor(wave(3 * 32 * 40, 0.051, 0.2)).reshape(1, 3, 32, 40)
    mean, probes = r.encode(im)
    for n in ('encoder.down.0', 'encoder.down.3', 'encoder.mid', 'moments'):
        lines.append(fixture_line('vaeenc.%s' % n, probes[n]))
    lines.append(fixture_line('vaeenc.mean', mean))
    # Round trip: encode(decode(z)) mean
    mean2, _ = r.encode(img.clamp(-1, 1))
    lines.append(fixture_line('vaert.mean', mean2))
    # Tiled decode (tile 4, overlap 1 latent px) and tiled encode (tile 32, overlap 8 px)
    zt = torch.tensor(wave(2 * 4 * 7 * 9, 0.19, 0.4)).reshape(2, 4, 7, 9)
    dec = tiled3(zt, lambda a: r.decode(a)[0], 4, 1, 8, 3)
    lines.append(fixture_line('vaetiled.dec', dec))
    it = torch.tensor(wave(3 * 48 * 64, 0.043, 0.6)).reshape(1, 3, 48, 64)
    enc = tiled3(it, lambda a: r.encode(a)[0], 32, 8, 1 / 8, 4)
    lines.append(fixture_line('vaetiled.enc', enc))
    with open(os.path.join(FIX, 'sd15_tiny_expected.txt'), 'w') as f:
        f.write('# tools/reference_sd15.py models <gen_ckpt --tiny, seed 42, f32>: name ndim shape... '
                'mean|x| sum nsamples (index value)...\n')
        f.write('\n'.join(lines) + '\n')
    print('wrote %d fixture lines' % len(lines))


if __name__ == '__main__':
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    if sys.argv[1] == 'tokenizer':
        cmd_tokenizer()
    elif sys.argv[1] == 'models':
        cmd_models(sys.argv[2])
    else:
        print(__doc__)
        sys.exit(2)

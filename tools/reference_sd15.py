#!/usr/bin/env python3
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


def tokenize_prompt(tok, text):
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
                stripped = name0.rstrip(',')
                if len(stripped) < len(name0):
                    leftover = '{} {}'.format(name0[len(stripped):], leftover)
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
                    batch += [(49407, 1.0)] * rem
                batch = [(49406, 1.0)]
                chunks.append(batch)
            else:
                batch += g
                g = []
    batch.append((49407, 1.0))
    batch += [(49407, 1.0)] * (77 - len(batch))
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


if __name__ == '__main__':
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    if sys.argv[1] == 'tokenizer':
        cmd_tokenizer()
    elif sys.argv[1] == 'models':
        import reference_models  # noqa: F401  (defined below when torch is present)
    else:
        print(__doc__)
        sys.exit(2)

/*
 * GIF decoding (all frames), for LoadImage's "multi-frame file -> batch".
 *
 * Frames are composited on an RGBA canvas the size of the logical screen, as
 * PIL presents them: each frame draws its non-transparent pixels over what the
 * previous frame left, after applying the previous frame's disposal (1: keep,
 * 2: clear its rectangle to transparent, 3: restore what was there before). The
 * canvas starts transparent, so a transparent pixel of the first frame has alpha
 * 0 and LoadImage turns it into mask 1.
 *
 * Limits: 4096 frames, 16384 x 16384 pixels; a truncated file keeps the frames
 * decoded so far (as PIL does), a file without any frame is an error.
 */
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "node_gif.h"

#define GIF_MAX_FRAMES 4096

struct rd {
    const uint8_t *p;
    size_t n, off;
};

static int rd_u8(struct rd *r, int *v)
{
    if (r->off >= r->n)
        return -1;
    *v = r->p[r->off++];
    return 0;
}

static int rd_u16(struct rd *r, int *v)
{
    if (r->off + 2 > r->n)
        return -1;
    *v = r->p[r->off] | r->p[r->off + 1] << 8;
    r->off += 2;
    return 0;
}

/* Concatenate data sub-blocks into `out` (reset first). */
static int rd_blocks(struct rd *r, struct buf *out)
{
    buf_reset(out);
    for (;;) {
        int len;
        if (rd_u8(r, &len) < 0)
            return -1;
        if (len == 0)
            return 0;
        if (r->off + (size_t)len > r->n)
            return -1;
        buf_add(out, r->p + r->off, (size_t)len);
        r->off += (size_t)len;
    }
}

/* LZW-decode `in` into `out` (at most npix indices). Returns the number decoded (the
 * caller reads the rest as index 0: short data is padded) or -1 on a bad code. */
static long lzw_decode(const uint8_t *in, size_t n, int min_code, uint8_t *out, size_t npix)
{
    if (min_code < 2 || min_code > 11)
        return -1;
    static __thread uint16_t prefix[4096];
    static __thread uint8_t suffix[4096], stack[4097];
    int clear = 1 << min_code, eoi = clear + 1, next = clear + 2, size = min_code + 1;
    int old = -1, first = 0;
    size_t o = 0, bitpos = 0, nbits = n * 8;
    for (int i = 0; i < clear; i++) {
        prefix[i] = 0xffff;
        suffix[i] = (uint8_t)i;
    }
    while (o < npix && bitpos + (size_t)size <= nbits) {
        int code = 0;
        for (int b = 0; b < size; b++, bitpos++)
            code |= ((in[bitpos >> 3] >> (bitpos & 7)) & 1) << b;
        if (code == clear) {
            size = min_code + 1;
            next = clear + 2;
            old = -1;
            continue;
        }
        if (code == eoi)
            break;
        int sp = 0, c = code;
        if (old < 0) {
            if (code >= clear)
                return -1;
            out[o++] = (uint8_t)code;
            old = first = code;
            continue;
        }
        if (code > next || (code >= clear && code < clear + 2))
            return -1;
        if (code == next) {
            stack[sp++] = (uint8_t)first;
            c = old;
        }
        while (c >= clear) {
            if (sp >= 4096)
                return -1;
            stack[sp++] = suffix[c];
            c = prefix[c];
        }
        stack[sp++] = (uint8_t)c;
        first = c;
        while (sp > 0 && o < npix)
            out[o++] = stack[--sp];
        if (next < 4096) {
            prefix[next] = (uint16_t)old;
            suffix[next] = (uint8_t)first;
            next++;
            if (next == (1 << size) && size < 12)
                size++;
        }
        old = code;
    }
    return (long)o;
}

/*
 * The most indices `n` bytes of LZW data can produce: each code adds one string, at most
 * one longer than any before it and at most 4096 long. Frames may declare up to
 * 65535 x 65535 pixels whatever their data; sizing the index buffer by the declaration
 * made a 100-byte GIF cost gigabytes (found with tests/fuzz/fuzz_image_load).
 */
static size_t lzw_max_output(size_t n, int min_code)
{
    size_t k = n * 8 / (size_t)(min_code < 2 ? 3 : min_code + 1); /* codes */
    return k <= 4096 ? k * (k + 1) / 2 : k * 4096;
}

int node__gif_load(const uint8_t *data, size_t n, const char *path, struct node_image_file *out,
                   struct err *e)
{
    struct rd r = {data, n, 0};
    if (n < 13 || (memcmp(data, "GIF87a", 6) && memcmp(data, "GIF89a", 6)))
        return err_set(e, ERR_INVALID, "cannot decode '%s': not a GIF file", path);
    r.off = 6;
    int W, H, flags, bg, aspect;
    rd_u16(&r, &W);
    rd_u16(&r, &H);
    rd_u8(&r, &flags);
    rd_u8(&r, &bg);
    rd_u8(&r, &aspect);
    if (W <= 0 || H <= 0 || W > 16384 || H > 16384)
        return err_set(e, ERR_INVALID, "cannot decode '%s': bad GIF size %dx%d", path, W, H);
    /* PIL's decompression-bomb limit applies to GIFs too (a 40-byte file declaring
     * 16382x14850 got a 970 MB canvas per frame; found with tests/fuzz/fuzz_image_load). */
    if ((uint64_t)W * (uint64_t)H > NODE_IMAGE_MAX_PIXELS)
        return err_set(e, ERR_TOO_LARGE,
                       "cannot decode '%s': Image size (%llu pixels) exceeds limit of %llu pixels, "
                       "could be decompression bomb DOS attack.",
                       path, (unsigned long long)W * (unsigned long long)H,
                       (unsigned long long)NODE_IMAGE_MAX_PIXELS);
    uint8_t gct[256 * 3] = {0};
    int gct_n = 0;
    if (flags & 0x80) {
        gct_n = 2 << (flags & 7);
        if (r.off + (size_t)gct_n * 3 > n)
            return err_set(e, ERR_INVALID, "cannot decode '%s': truncated GIF", path);
        memcpy(gct, data + r.off, (size_t)gct_n * 3);
        r.off += (size_t)gct_n * 3;
    }
    size_t npx = (size_t)W * H;
    uint8_t *canvas = xcalloc(npx, 4), *saved = xmalloc(npx * 4);
    struct buf blk;
    buf_init(&blk);
    int transp = -1, disposal = 0, cap = 0;
    out->frames = NULL;
    out->n_frames = 0;
    int rc = 0;
    for (;;) {
        int t;
        if (rd_u8(&r, &t) < 0 || t == 0x3b)
            break;
        if (t == 0x21) { /* extension */
            int label;
            if (rd_u8(&r, &label) < 0 || rd_blocks(&r, &blk) < 0)
                break;
            if (label == 0xf9 && blk.len >= 4) {
                disposal = ((uint8_t)blk.ptr[0] >> 2) & 7;
                transp = (blk.ptr[0] & 1) ? (uint8_t)blk.ptr[3] : -1;
            }
            continue;
        }
        if (t != 0x2c)
            break; /* garbage: stop with what we have */
        int fx, fy, fw, fh, ff, min_code;
        if (rd_u16(&r, &fx) < 0 || rd_u16(&r, &fy) < 0 || rd_u16(&r, &fw) < 0 || rd_u16(&r, &fh) < 0 ||
            rd_u8(&r, &ff) < 0)
            break;
        uint8_t lct[256 * 3];
        const uint8_t *ct = gct;
        if (ff & 0x80) {
            int ln = 2 << (ff & 7);
            if (r.off + (size_t)ln * 3 > n)
                break;
            memcpy(lct, data + r.off, (size_t)ln * 3);
            r.off += (size_t)ln * 3;
            ct = lct;
        }
        if (rd_u8(&r, &min_code) < 0 || rd_blocks(&r, &blk) < 0)
            break;
        if (fw <= 0 || fh <= 0 || out->n_frames >= GIF_MAX_FRAMES)
            continue;
        size_t area = (size_t)fw * fh, room = lzw_max_output(blk.len, min_code);
        if (room > area)
            room = area;
        uint8_t *idx = xmalloc(room ? room : 1);
        long got = lzw_decode((const uint8_t *)blk.ptr, blk.len, min_code, idx, room);
        if (got < 0) {
            xfree(idx);
            break;
        }
        if (disposal == 3)
            memcpy(saved, canvas, npx * 4);
        /* Interlaced rows come in passes: 0 (every 8th), 4 (every 8th), 2 (4th), 1 (2nd). */
        int interlaced = (ff & 0x40) != 0, row = 0, pass = 0;
        static const int start[4] = {0, 4, 2, 1}, step[4] = {8, 8, 4, 2};
        for (int i = 0; i < fh; i++) {
            int y = i;
            if (interlaced) {
                while (pass < 4 && row >= fh) {
                    pass++;
                    row = pass < 4 ? start[pass] : 0;
                }
                y = row;
                row += step[pass < 4 ? pass : 3];
            }
            int cy = fy + y;
            if (cy >= H)
                continue; /* off the screen: only pixels on it are drawn */
            for (int x = 0; x < fw && fx + x < W; x++) {
                size_t k = (size_t)i * fw + x;
                int v = k < (size_t)got ? idx[k] : 0;
                int cx = fx + x;
                if (v == transp)
                    continue;
                uint8_t *c = canvas + ((size_t)cy * W + cx) * 4;
                c[0] = ct[3 * v];
                c[1] = ct[3 * v + 1];
                c[2] = ct[3 * v + 2];
                c[3] = 255;
            }
        }
        xfree(idx);
        if (out->n_frames == cap) {
            cap = cap ? 2 * cap : 4;
            out->frames = xrealloc(out->frames, (size_t)cap * sizeof(*out->frames));
        }
        uint8_t *px = xmalloc(npx * 4);
        memcpy(px, canvas, npx * 4);
        out->frames[out->n_frames++] = (struct node_pixels){W, H, 4, px};
        /* This frame's disposal applies before the next one is drawn. */
        if (disposal == 2) {
            for (int y = fy; y < fy + fh && y < H; y++)
                for (int x = fx; x < fx + fw && x < W; x++)
                    memset(canvas + ((size_t)y * W + x) * 4, 0, 4);
        } else if (disposal == 3) {
            memcpy(canvas, saved, npx * 4);
        }
        disposal = 0;
        transp = -1;
    }
    if (out->n_frames == 0) {
        rc = err_set(e, ERR_INVALID, "cannot decode '%s': no image in GIF", path);
        xfree(out->frames);
        out->frames = NULL;
    }
    buf_release(&blk);
    xfree(canvas);
    xfree(saved);
    return rc;
}

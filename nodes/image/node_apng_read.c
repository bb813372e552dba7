/*
 * APNG reading (node_apng_read.h). The chunks are walked once; each frame's
 * compressed data (IDAT, or fdAT without its sequence number) is wrapped in a
 * one-frame PNG with the file's IHDR (its size replaced), PLTE and tRNS, and decoded
 * to RGBA by node_image_decode_rgba, so libpng stays the only PNG decoder.
 */
#include <string.h>
#include <zlib.h>

#include "alloc.h"
#include "buf.h"
#include "node_apng_read.h"

#define APNG_MAX_FRAMES 4096

static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* One frame: its control fields and where its data chunks are. */
struct aframe {
    uint32_t w, h, x, y;
    int dispose, blend;
    struct buf data; /* the zlib stream */
};

/* A chunk with its CRC (libpng checks them in the wrapped PNGs). */
static void put_chunk(struct buf *b, const char *type, const uint8_t *data, size_t n)
{
    uint8_t h[8];
    put_be32(h, (uint32_t)n);
    memcpy(h + 4, type, 4);
    buf_add(b, h, 8);
    if (n)
        buf_add(b, data, n);
    uLong crc = crc32(0L, (const Bytef *)type, 4);
    if (n) /* crc32() of a NULL buffer is the initial value, not a no-op */
        crc = crc32(crc, data, (uInt)n);
    put_be32(h, (uint32_t)crc);
    buf_add(b, h, 4);
}

int node__apng_is_animated(const uint8_t *p, size_t n)
{
    for (size_t off = 8; n >= 12 && off <= n - 12;) {
        uint32_t len = be32(p + off);
        if (!memcmp(p + off + 4, "acTL", 4))
            return 1;
        if (!memcmp(p + off + 4, "IDAT", 4) || len > n - off - 12)
            return 0;
        off += 12 + (size_t)len;
    }
    return 0;
}

/* Pillow's DIV255(dst * (255 - a) + src * a) (ImagingUtils.h BLEND). */
static uint8_t blend(uint8_t dst, uint8_t src, uint8_t a)
{
    unsigned t = (unsigned)dst * (255u - a) + (unsigned)src * a + 128u;
    return (uint8_t)(((t >> 8) + t) >> 8);
}

static void release_frames(struct aframe *f, int n)
{
    for (int i = 0; i < n; i++)
        buf_release(&f[i].data);
    xfree(f);
}

/* Split the file into frames; returns the count or <0 with a message. */
static int collect(const uint8_t *p, size_t n, const char *subject, const uint8_t **ihdr,
                   struct buf *extra, int *has_trns, struct aframe **out, struct err *e)
{
    struct aframe *f = xcalloc(APNG_MAX_FRAMES, sizeof *f);
    int nf = 0, cur = -1;
    *ihdr = NULL;
    for (size_t off = 8; n >= 12 && off <= n - 12;) {
        uint32_t len = be32(p + off);
        const char *type = (const char *)p + off + 4;
        const uint8_t *d = p + off + 8;
        if (len > n - off - 12) {
            release_frames(f, nf);
            return err_set(e, ERR_INVALID, "cannot decode %s: a chunk runs past the end of the file",
                           subject);
        }
        if (!memcmp(type, "IEND", 4))
            break;
        if (!memcmp(type, "IHDR", 4) && len == 13) {
            *ihdr = d;
        } else if (!memcmp(type, "PLTE", 4) || !memcmp(type, "tRNS", 4)) {
            put_chunk(extra, type, d, len);
            *has_trns |= !memcmp(type, "tRNS", 4);
        } else if (!memcmp(type, "fcTL", 4) && len >= 26 && nf < APNG_MAX_FRAMES && *ihdr) {
            cur = nf++;
            f[cur] = (struct aframe){.w = be32(d + 4), .h = be32(d + 8), .x = be32(d + 12),
                                     .y = be32(d + 16), .dispose = d[24], .blend = d[25]};
            buf_init(&f[cur].data);
        } else if (!memcmp(type, "IDAT", 4) && *ihdr) {
            if (cur < 0 && nf < APNG_MAX_FRAMES) {
                /* The default image: not in the animation, but Pillow's frame 0. */
                cur = nf++;
                f[cur] = (struct aframe){.w = be32(*ihdr), .h = be32(*ihdr + 4)};
                buf_init(&f[cur].data);
            }
            if (cur >= 0)
                buf_add(&f[cur].data, d, len);
        } else if (!memcmp(type, "fdAT", 4) && len >= 4 && cur >= 0) {
            buf_add(&f[cur].data, d + 4, len - 4);
        }
        off += 12 + (size_t)len;
    }
    *out = f;
    return nf;
}

int node__apng_load(const uint8_t *p, size_t n, const char *subject, struct node_image_file *out,
                    struct err *e)
{
    memset(out, 0, sizeof *out);
    const uint8_t *ihdr;
    struct buf extra, png;
    buf_init(&extra);
    buf_init(&png);
    struct aframe *f = NULL;
    int has_trns = 0;
    int nf = collect(p, n, subject, &ihdr, &extra, &has_trns, &f, e), rc = 0;
    if (nf < 0) {
        buf_release(&extra);
        return nf;
    }
    uint32_t W = ihdr ? be32(ihdr) : 0, H = ihdr ? be32(ihdr + 4) : 0;
    int has_alpha = ihdr && (ihdr[9] == 4 || ihdr[9] == 6 || has_trns);
    int c = has_alpha ? 4 : 3;
    uint8_t *canvas = NULL, *before = NULL;
    if (nf == 0 || !ihdr || W == 0 || H == 0) {
        rc = err_set(e, ERR_INVALID, "cannot decode %s: no frame in the animation", subject);
        goto out;
    }
    if ((uint64_t)W * H > NODE_IMAGE_MAX_PIXELS / (uint64_t)nf) { /* PIL's limit, over all frames */
        rc = err_set(e, ERR_TOO_LARGE, "Image size (%llu pixels) exceeds limit of %llu pixels, "
                     "could be decompression bomb DOS attack.",
                     (unsigned long long)W * H * (unsigned long long)nf, NODE_IMAGE_MAX_PIXELS);
        goto out;
    }
    canvas = xcalloc((size_t)W * H, 4);
    out->frames = xcalloc((size_t)nf, sizeof *out->frames);
    for (int i = 0; i < nf; i++) {
        struct aframe *a = &f[i];
        if (a->w == 0 || a->h == 0 || a->x > W || a->y > H || a->w > W - a->x || a->h > H - a->y) {
            rc = err_set(e, ERR_INVALID, "cannot decode %s: APNG contains invalid frames", subject);
            goto out;
        }
        if (i > 0) {
            /* The previous frame's dispose op, over its region. */
            const struct aframe *q = &f[i - 1];
            int op = q->dispose == 2 && i - 1 == 0 ? 1 : q->dispose;
            for (uint32_t y = q->y; y < q->y + q->h && op; y++) {
                uint8_t *row = canvas + ((size_t)y * W + q->x) * 4;
                if (op == 2) {
                    memcpy(row, before + (size_t)(y - q->y) * q->w * 4, (size_t)q->w * 4);
                } else {
                    for (uint32_t x = 0; x < q->w; x++) {
                        memset(row + 4 * x, 0, 3);
                        row[4 * x + 3] = has_alpha ? 0 : 255;
                    }
                }
            }
        }
        if (a->dispose == 2 && i > 0) { /* this frame's region, restored by its dispose op */
            if (!before)
                before = xmalloc((size_t)W * H * 4);
            for (uint32_t y = 0; y < a->h; y++)
                memcpy(before + (size_t)y * a->w * 4, canvas + ((size_t)(y + a->y) * W + a->x) * 4,
                       (size_t)a->w * 4);
        }
        uint8_t hd[13];
        memcpy(hd, ihdr, 13);
        put_be32(hd, a->w);
        put_be32(hd + 4, a->h);
        buf_reset(&png);
        buf_add(&png, png_sig, 8);
        put_chunk(&png, "IHDR", hd, 13);
        buf_add(&png, extra.ptr, extra.len);
        put_chunk(&png, "IDAT", (const uint8_t *)a->data.ptr, a->data.len);
        put_chunk(&png, "IEND", NULL, 0);
        struct node_pixels fr = {0};
        int alpha;
        if ((rc = node_image_decode_rgba(png.ptr, png.len, &fr, &alpha, e)) < 0)
            goto out;
        for (uint32_t y = 0; y < a->h; y++) {
            uint8_t *dst = canvas + ((size_t)(y + a->y) * W + a->x) * 4;
            const uint8_t *src = fr.px + (size_t)y * a->w * 4;
            if (a->blend == 1 && i > 0) {
                for (uint32_t k = 0; k < a->w * 4; k++)
                    dst[k] = blend(dst[k], src[k], src[(k & ~3u) + 3]);
            } else {
                memcpy(dst, src, (size_t)a->w * 4);
            }
        }
        xfree(fr.px);
        struct node_pixels *o = &out->frames[out->n_frames++];
        *o = (struct node_pixels){(int)W, (int)H, c, xmalloc((size_t)W * H * c)};
        for (size_t k = 0; k < (size_t)W * H; k++)
            memcpy(o->px + k * c, canvas + k * 4, (size_t)c);
    }
out:
    if (rc < 0)
        node_image_file_release(out);
    release_frames(f, nf);
    xfree(canvas);
    xfree(before);
    buf_release(&extra);
    buf_release(&png);
    return rc;
}

/*
 * APNG writing (node_apng.h). Each kept frame, cropped to its change box, is encoded
 * as a whole PNG by node_png_encode (libpng); its IDAT payloads are the frame's
 * compressed data, which the APNG layout carries in IDAT chunks for the first frame
 * and in sequence-numbered fdAT chunks for the others. The first frame's IHDR is the
 * file's (the first frame is never cropped, so the sizes agree).
 */
#include <string.h>
#include <zlib.h>

#include "alloc.h"
#include "node_apng.h"
#include "node_imageio.h"

static const uint8_t png_signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

static void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Length, type, data, CRC-32 of type and data. `prefix` (4 bytes or NULL) leads the data. */
static void put_chunk(struct buf *out, const char *type, const uint8_t *prefix, const void *data,
                      size_t len)
{
    uint8_t head[8];
    size_t total = len + (prefix ? 4 : 0);
    put_u32(head, (uint32_t)total);
    memcpy(head + 4, type, 4);
    buf_add(out, head, 8);
    uLong crc = crc32(0L, (const Bytef *)type, 4);
    if (prefix) {
        buf_add(out, prefix, 4);
        crc = crc32(crc, prefix, 4);
    }
    if (len) {
        buf_add(out, data, len);
        crc = crc32(crc, (const Bytef *)data, (uInt)len);
    }
    uint8_t tail[4];
    put_u32(tail, (uint32_t)crc);
    buf_add(out, tail, 4);
}

/*
 * Walk a PNG libpng just wrote: calls fn for each chunk after the signature. The
 * input is ours, so a malformed one is a bug.
 */
static void each_chunk(const struct buf *png, void (*fn)(void *u, const char *type,
                                                        const uint8_t *data, size_t len),
                       void *u)
{
    const uint8_t *p = (const uint8_t *)png->ptr + 8, *end = (const uint8_t *)png->ptr + png->len;
    while (p + 12 <= end) {
        uint32_t len = get_u32(p);
        ASSERT(p + 12 + len <= end);
        fn(u, (const char *)p + 4, p + 8, len);
        p += 12 + len;
    }
}

struct frame_out {
    struct buf *out;
    int first;     /* IDAT chunks (else fdAT) */
    uint32_t *seq; /* next sequence number */
    int copy_ihdr;
};

static void emit_frame_chunk(void *u, const char *type, const uint8_t *data, size_t len)
{
    struct frame_out *f = u;
    if (f->copy_ihdr && !memcmp(type, "IHDR", 4)) {
        put_chunk(f->out, "IHDR", NULL, data, len);
    } else if (!memcmp(type, "IDAT", 4)) {
        if (f->first) {
            put_chunk(f->out, "IDAT", NULL, data, len);
        } else {
            uint8_t seq[4];
            put_u32(seq, (*f->seq)++);
            put_chunk(f->out, "fdAT", seq, data, len);
        }
    }
}

/* Bounding box [x0, x1) x [y0, y1) of the pixels where a and b differ; 0 when none. */
static int change_box(const uint8_t *a, const uint8_t *b, int w, int h, int c, int box[4])
{
    int x0 = w, y0 = h, x1 = 0, y1 = 0;
    for (int y = 0; y < h; y++) {
        const uint8_t *ra = a + (size_t)y * w * c, *rb = b + (size_t)y * w * c;
        if (!memcmp(ra, rb, (size_t)w * c))
            continue;
        y0 = y < y0 ? y : y0;
        y1 = y + 1;
        for (int x = 0; x < w; x++) {
            if (memcmp(ra + (size_t)x * c, rb + (size_t)x * c, (size_t)c)) {
                x0 = x < x0 ? x : x0;
                x1 = x + 1 > x1 ? x + 1 : x1;
            }
        }
    }
    if (y1 == 0)
        return 0;
    box[0] = x0;
    box[1] = y0;
    box[2] = x1;
    box[3] = y1;
    return 1;
}

struct kept {
    int frame;
    int box[4];
    long duration; /* ms */
};

static long gcd(long a, long b)
{
    while (b) {
        long t = a % b;
        a = b;
        b = t;
    }
    return a;
}

int node_apng_encode(const uint8_t *const *frames, int n, int w, int h, int c, int level,
                     int duration_ms, const struct node_png_chunk *after, int n_after,
                     struct buf *out, struct err *e)
{
    ASSERT(n >= 1 && (c == 3 || c == 4));
    struct kept *k = xcalloc((size_t)n, sizeof *k);
    int nk = 0;
    for (int i = 0; i < n; i++) {
        int box[4] = {0, 0, w, h};
        if (nk > 0 && !change_box(frames[k[nk - 1].frame], frames[i], w, h, c, box)) {
            k[nk - 1].duration += duration_ms;
            continue;
        }
        k[nk] = (struct kept){.frame = i, .duration = duration_ms};
        memcpy(k[nk].box, box, sizeof box);
        nk++;
    }
    int rc = 0;
    struct buf png, crop;
    buf_init(&png);
    buf_init(&crop);
    buf_add(out, png_signature, 8);
    if (nk == 1) {
        /* Pillow writes the one frame left as an ordinary PNG. */
        if (node_png_encode(frames[0], w, h, c, level, &png) < 0) {
            rc = err_set(e, ERR_INTERNAL, "cannot encode the PNG");
            goto out;
        }
        uint32_t seq = 0;
        struct frame_out f = {.out = out, .first = 1, .seq = &seq, .copy_ihdr = 1};
        each_chunk(&png, emit_frame_chunk, &f);
    } else {
        uint32_t seq = 0;
        for (int j = 0; j < nk; j++) {
            const struct kept *kf = &k[j];
            long num = kf->duration, den = 1000, g = gcd(num, den);
            num /= g;
            den /= g;
            if (num > 65535 || num < 0) {
                rc = err_set(e, ERR_INVALID, "cannot write duration");
                goto out;
            }
            int fw = kf->box[2] - kf->box[0], fh = kf->box[3] - kf->box[1];
            buf_reset(&crop);
            for (int y = kf->box[1]; y < kf->box[3]; y++)
                buf_add(&crop, frames[kf->frame] + ((size_t)y * w + kf->box[0]) * c, (size_t)fw * c);
            buf_reset(&png);
            if (node_png_encode((const uint8_t *)crop.ptr, fw, fh, c, level, &png) < 0) {
                rc = err_set(e, ERR_INTERNAL, "cannot encode frame %d", kf->frame);
                goto out;
            }
            struct frame_out f = {.out = out, .first = j == 0, .seq = &seq};
            if (j == 0) {
                /* The file's IHDR (libpng writes it first), then acTL before any frame. */
                const uint8_t *p = (const uint8_t *)png.ptr + 8;
                ASSERT(!memcmp(p + 4, "IHDR", 4));
                put_chunk(out, "IHDR", NULL, p + 8, get_u32(p));
                uint8_t actl[8];
                put_u32(actl, (uint32_t)nk);
                put_u32(actl + 4, 0); /* num_plays: loop forever */
                put_chunk(out, "acTL", NULL, actl, 8);
            }
            uint8_t fctl[26];
            put_u32(fctl, seq++);
            put_u32(fctl + 4, (uint32_t)fw);
            put_u32(fctl + 8, (uint32_t)fh);
            put_u32(fctl + 12, (uint32_t)kf->box[0]);
            put_u32(fctl + 16, (uint32_t)kf->box[1]);
            fctl[20] = (uint8_t)(num >> 8);
            fctl[21] = (uint8_t)num;
            fctl[22] = (uint8_t)(den >> 8);
            fctl[23] = (uint8_t)den;
            fctl[24] = 0; /* dispose: none */
            fctl[25] = 0; /* blend: source */
            put_chunk(out, "fcTL", NULL, fctl, sizeof fctl);
            each_chunk(&png, emit_frame_chunk, &f);
        }
    }
    for (int i = 0; i < n_after; i++)
        put_chunk(out, after[i].type, NULL, after[i].data, after[i].len);
    put_chunk(out, "IEND", NULL, NULL, 0);
out:
    buf_release(&png);
    buf_release(&crop);
    xfree(k);
    return rc;
}

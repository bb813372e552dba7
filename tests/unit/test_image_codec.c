/*
 * test_image_codec — the codec module's in-memory entry points (node_imageio.h) that
 * the server's /view and /upload routes sit on: PNG encode with tEXt chunks and back
 * (pixels bit-exact, chunks in order), JPEG encode and back (error against the source
 * pixels measured in float64 here), truncated / garbage bytes refused with a
 * message rather than decoded or crashed on, and one decoder behind both entry
 * points: a file through node_image_load and its bytes through node_image_decode_rgba
 * give the same pixels (16-bit PNG samples cut to their high byte, as PIL reads them).
 */
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "buf.h"
#include "harness.h"
#include "node_imageio.h"

static uint8_t *pattern(int w, int h, int c, unsigned seed)
{
    uint8_t *px = xmalloc((size_t)w * h * c);
    for (size_t i = 0; i < (size_t)w * h * c; i++) {
        seed = seed * 1103515245u + 12345u;
        px[i] = (uint8_t)(seed >> 16);
    }
    return px;
}

static void test_png_roundtrip(void)
{
    const int w = 7, h = 5;
    for (int c = 3; c <= 4; c++) {
        uint8_t *px = pattern(w, h, c, 42u + (unsigned)c);
        struct node_text_chunk tx[2] = {{"prompt", "{\"1\": {\"class_type\": \"X\"}}"},
                                        {"workflow", "{}"}};
        struct buf b;
        buf_init(&b);
        EXPECT_OK(node_png_encode_text(px, w, h, c, 4, tx, 2, &b));
        ok(b.len > 8 && memcmp(b.ptr, "\x89PNG\r\n\x1a\n", 8) == 0, "c=%d: PNG signature", c);

        struct node_png_text *t = NULL;
        int nt = node_png_text_read(b.ptr, b.len, &t);
        EXPECT_EQ(nt, 2);
        if (nt == 2) {
            EXPECT_STR(t[0].key, "prompt");
            EXPECT_STR(t[0].text, tx[0].value);
            EXPECT_STR(t[1].key, "workflow");
            EXPECT_STR(t[1].text, "{}");
        }
        node_png_text_free(t, nt);

        struct node_pixels out;
        struct err e = {0};
        int had_alpha = -1;
        EXPECT_OK(node_image_decode_rgba(b.ptr, b.len, &out, &had_alpha, &e));
        EXPECT_EQ(out.w, w);
        EXPECT_EQ(out.h, h);
        EXPECT_EQ(out.c, 4);
        EXPECT_EQ(had_alpha, c == 4);
        int same = out.px != NULL;
        for (int i = 0; same && i < w * h; i++)
            for (int k = 0; k < 4; k++)
                same &= out.px[i * 4 + k] == (k < c ? px[i * c + k] : 255);
        ok(same, "c=%d: PNG pixels round-trip bit-exact (opaque alpha added)", c);
        xfree(out.px);

        /* Without text: node_png_encode is the same encoder, so no chunks come back. */
        struct buf b2;
        buf_init(&b2);
        EXPECT_OK(node_png_encode(px, w, h, c, 6, &b2));
        EXPECT_EQ(node_png_text_read(b2.ptr, b2.len, &t), 0);
        node_png_text_free(t, 0);
        buf_release(&b2);
        buf_release(&b);
        xfree(px);
    }
}

static void test_jpeg_roundtrip(void)
{
    /* A smooth gradient: JPEG at quality 95 must keep it within a few levels. */
    const int w = 24, h = 16;
    uint8_t *rgb = xmalloc((size_t)w * h * 3), *rgba = xmalloc((size_t)w * h * 4);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t v[3] = {(uint8_t)(x * 10), (uint8_t)(y * 15), (uint8_t)(128 + x - y)};
            memcpy(rgb + ((size_t)y * w + x) * 3, v, 3);
            memcpy(rgba + ((size_t)y * w + x) * 4, v, 3);
            rgba[((size_t)y * w + x) * 4 + 3] = (uint8_t)(x * 7);
        }
    uint8_t *j3 = NULL, *j4 = NULL;
    size_t n3 = 0, n4 = 0;
    EXPECT_OK(node_jpeg_encode(rgb, w, h, 3, 95, &j3, &n3));
    EXPECT_OK(node_jpeg_encode(rgba, w, h, 4, 95, &j4, &n4));
    ok(n3 > 3 && j3[0] == 0xff && j3[1] == 0xd8 && j3[2] == 0xff, "JPEG SOI marker");
    ok(n3 == n4 && j4 && memcmp(j3, j4, n3) == 0, "RGBA input encodes as its RGB (alpha dropped)");

    struct node_pixels out;
    struct err e = {0};
    int had_alpha = -1;
    EXPECT_OK(node_image_decode_rgba(j3, n3, &out, &had_alpha, &e));
    EXPECT_EQ(out.w, w);
    EXPECT_EQ(out.h, h);
    EXPECT_EQ(out.c, 4);
    EXPECT_EQ(had_alpha, 0);
    double sum = 0, worst = 0;
    int opaque = out.px != NULL;
    for (int i = 0; out.px && i < w * h; i++) {
        for (int k = 0; k < 3; k++) {
            double d = fabs((double)out.px[i * 4 + k] - (double)rgb[i * 3 + k]);
            sum += d;
            worst = d > worst ? d : worst;
        }
        opaque &= out.px[i * 4 + 3] == 255;
    }
    double mean = sum / (w * h * 3.0);
    ok(opaque, "decoded JPEG is opaque");
    ok(mean < 2.0 && worst <= 16.0, "JPEG q95 error: mean %.3f, worst %.0f levels", mean, worst);
    xfree(out.px);

    /* c = 2 is not encodable as JPEG here. */
    uint8_t *bad = NULL;
    size_t nb = 0;
    EXPECT_EQ(node_jpeg_encode(rgb, w, h, 2, 95, &bad, &nb), ERR_INVALID);
    ok(bad == NULL && nb == 0, "refused encode leaves no output");
    xfree(j3);
    xfree(j4);
    xfree(rgb);
    xfree(rgba);
}

static void expect_refused(const void *p, size_t n, int want, const char *what)
{
    struct node_pixels out = {0};
    struct err e = {0};
    int had_alpha = 0;
    int rc = node_image_decode_rgba(p, n, &out, &had_alpha, &e);
    ok(rc < 0 && (want == 0 || rc == want) && e.msg[0] && out.px == NULL,
       "%s refused (rc %d: %s)", what, rc, e.msg);
}

static void test_bad_bytes(void)
{
    const int w = 32, h = 32;
    uint8_t *px = pattern(w, h, 3, 7u);
    struct buf png;
    buf_init(&png);
    struct node_text_chunk tx[1] = {{"prompt", "{}"}};
    EXPECT_OK(node_png_encode_text(px, w, h, 3, 6, tx, 1, &png));
    uint8_t *jpg = NULL;
    size_t nj = 0;
    EXPECT_OK(node_jpeg_encode(px, w, h, 3, 90, &jpg, &nj));

    expect_refused(png.ptr, png.len / 2, ERR_INVALID, "half a PNG");
    expect_refused(png.ptr, png.len - 13, ERR_INVALID, "a PNG missing its IEND");
    expect_refused(jpg, nj / 2, ERR_INVALID, "half a JPEG");
    expect_refused(jpg, 3, ERR_INVALID, "a bare JPEG SOI");
    expect_refused(png.ptr, 8, 0, "a bare PNG signature");
    static const char garbage[] = "GIF? no: just some text that is not an image";
    expect_refused(garbage, sizeof(garbage), ERR_UNSUPPORTED, "garbage");
    expect_refused(garbage, 0, ERR_UNSUPPORTED, "no bytes");

    /* A PNG whose chunk length runs past the buffer (a 1.9 GB zTXt in 45 bytes). */
    uint8_t bomb[45];
    memcpy(bomb, png.ptr, 33); /* signature + IHDR */
    memcpy(bomb + 33, "\x70\x00\x00\x00zTXtprom", 12);
    expect_refused(bomb, sizeof(bomb), ERR_INVALID, "a chunk longer than the bytes");

    /* Text chunks: none from garbage or the bomb; the header's from half a PNG. */
    struct node_png_text *t = NULL;
    EXPECT_EQ(node_png_text_read(garbage, sizeof(garbage), &t), 0);
    ok(t == NULL, "no text array for garbage");
    EXPECT_EQ(node_png_text_read(bomb, sizeof(bomb), &t), 0);
    int nt = node_png_text_read(png.ptr, png.len / 2, &t);
    EXPECT_EQ(nt, 1);
    if (nt == 1)
        EXPECT_STR(t[0].text, "{}");
    node_png_text_free(t, nt);

    xfree(jpg);
    buf_release(&png);
    xfree(px);
}

/* Bytes to a temporary file and back through node_image_load (one frame). */
static int load_bytes(const void *p, size_t n, struct node_image_file *f)
{
    char path[] = "/tmp/test_image_codec_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    int wrote = write(fd, p, n) == (ssize_t)n;
    close(fd);
    struct err e = {0};
    int rc = wrote ? node_image_load(path, f, &e) : -1;
    unlink(path);
    return rc;
}

/* Whether RGBA `a` is `src` (c channels) widened: gray to R, G, B; alpha 255 when none. */
static int is_widened(const uint8_t *a, const uint8_t *src, int c, size_t npx)
{
    for (size_t i = 0; i < npx; i++) {
        const uint8_t *s = src + i * c, *d = a + i * 4;
        uint8_t want[4] = {s[0], c >= 3 ? s[1] : s[0], c >= 3 ? s[2] : s[0],
                           c == 2 ? s[1] : c == 4 ? s[3] : 255};
        if (memcmp(d, want, 4) != 0)
            return 0;
    }
    return 1;
}

static void png16_write(png_structp png, png_bytep data, png_size_t n)
{
    buf_add(png_get_io_ptr(png), data, n);
}

static void png16_flush(png_structp png)
{
    (void)png;
}

/* A 16-bit RGB PNG whose samples are (hi << 8) | lo, with a gAMA chunk of 1.0: PIL
 * keeps the high bytes and ignores the gamma. */
static void make_png16(int w, int h, const uint8_t *hi, const uint8_t *lo, struct buf *out)
{
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    png_set_write_fn(png, out, png16_write, png16_flush);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, 16, PNG_COLOR_TYPE_RGB,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_set_gAMA(png, info, 1.0);
    png_write_info(png, info);
    uint8_t *row = xmalloc((size_t)w * 6);
    for (int y = 0; y < h; y++) {
        for (int k = 0; k < w * 3; k++) {
            row[2 * k] = hi[y * w * 3 + k];
            row[2 * k + 1] = lo[y * w * 3 + k];
        }
        png_write_row(png, row);
    }
    png_write_end(png, info);
    png_destroy_write_struct(&png, &info);
    xfree(row);
}

static void test_one_decoder(void)
{
    const int w = 9, h = 6;
    struct err e = {0};
    for (int c = 1; c <= 4; c++) {
        uint8_t *px = pattern(w, h, c, 7u * (unsigned)c);
        struct buf b;
        buf_init(&b);
        EXPECT_OK(node_png_encode(px, w, h, c, 6, &b));
        struct node_image_file f = {0};
        struct node_pixels out = {0};
        int had_alpha = -1;
        EXPECT_OK(load_bytes(b.ptr, b.len, &f));
        EXPECT_OK(node_image_decode_rgba(b.ptr, b.len, &out, &had_alpha, &e));
        ok(f.n_frames == 1 && f.frames[0].c == c && !memcmp(f.frames[0].px, px, (size_t)w * h * c),
           "c=%d PNG: the file decodes to the pixels written", c);
        ok(out.px && out.c == 4 && had_alpha == (c == 2 || c == 4) &&
               is_widened(out.px, px, c, (size_t)w * h),
           "c=%d PNG: its bytes decode to the same pixels widened to RGBA", c);
        node_image_file_release(&f);
        xfree(out.px);
        buf_release(&b);
        xfree(px);
    }

    /* One JPEG, both ways: the same libjpeg output (64 x 48: the cut below falls in
     * the scan data). */
    const int jw = 64, jh = 48;
    uint8_t *rgb = pattern(jw, jh, 3, 5u), *jpg = NULL;
    size_t nj = 0;
    EXPECT_OK(node_jpeg_encode(rgb, jw, jh, 3, 90, &jpg, &nj));
    struct node_image_file f = {0};
    struct node_pixels out = {0};
    int had_alpha = -1;
    EXPECT_OK(load_bytes(jpg, nj, &f));
    EXPECT_OK(node_image_decode_rgba(jpg, nj, &out, &had_alpha, &e));
    ok(f.n_frames == 1 && f.frames[0].c == 3 && out.px && had_alpha == 0 &&
           is_widened(out.px, f.frames[0].px, 3, (size_t)jw * jh),
       "JPEG: file and bytes decode to the same pixels");
    /* Truncated: LoadImage fills the missing rows (ComfyUI retries with
     * LOAD_TRUNCATED_IMAGES), an upload is refused (PIL's "image file is truncated"). */
    node_image_file_release(&f);
    xfree(out.px);
    ok(load_bytes(jpg, nj * 2 / 3, &f) == 0 && f.n_frames == 1,
       "a truncated JPEG file still loads");
    EXPECT_EQ(node_image_decode_rgba(jpg, nj * 2 / 3, &out, &had_alpha, &e), ERR_INVALID);
    node_image_file_release(&f);
    xfree(jpg);
    xfree(rgb);

    uint8_t *hi = pattern(w, h, 3, 11u), *lo = pattern(w, h, 3, 13u);
    struct buf b16;
    buf_init(&b16);
    make_png16(w, h, hi, lo, &b16);
    EXPECT_OK(load_bytes(b16.ptr, b16.len, &f));
    EXPECT_OK(node_image_decode_rgba(b16.ptr, b16.len, &out, &had_alpha, &e));
    ok(f.n_frames == 1 && f.frames[0].c == 3 && !memcmp(f.frames[0].px, hi, (size_t)w * h * 3),
       "16-bit PNG file: the high bytes, gAMA ignored");
    ok(out.px && is_widened(out.px, hi, 3, (size_t)w * h), "16-bit PNG bytes: the same");
    node_image_file_release(&f);
    xfree(out.px);
    buf_release(&b16);
    xfree(hi);
    xfree(lo);
}

int main(void)
{
    long live = alloc_live_count();
    test_png_roundtrip();
    test_jpeg_roundtrip();
    test_bad_bytes();
    test_one_decoder();
    ok(alloc_live_count() == live, "no allocation left live (%ld)", alloc_live_count() - live);
    return harness_done();
}

/*
 * test_image_codec — the codec module's in-memory entry points (node_imageio.h) that
 * the server's /view and /upload routes sit on: PNG encode with tEXt chunks and back
 * (pixels bit-exact, chunks in order), JPEG encode and back (error against the source
 * pixels measured in float64 here), and truncated / garbage bytes refused with a
 * message rather than decoded or crashed on.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

int main(void)
{
    long live = alloc_live_count();
    test_png_roundtrip();
    test_jpeg_roundtrip();
    test_bad_bytes();
    ok(alloc_live_count() == live, "no allocation left live (%ld)", alloc_live_count() - live);
    return harness_done();
}

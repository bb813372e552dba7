/*
 * test_image_quantize — ImageQuantize's numerics (nodes/image/node_quant.c) against
 * Pillow, and the node through node_ctx:
 *   - fixtures written by Pillow 9.4 (tools/image_quantize_reference.py, in
 *     tests/fixtures/image_nodes): for a gradient, a noise image, a five-colour image
 *     and a 320x256 noise image of more than 65536 colours (Pillow's hash then drops a
 *     bit per channel), with 1..256 colours: the median-cut palette entry for entry,
 *     and the mapping with no dither, Floyd-Steinberg and ComfyUI's Bayer orders
 *     2..16 index for index, both as Pillow >= 10.1 gives them (palette of exactly the
 *     cut's colours) and as Pillow 9.4 gives them (256 entries padded with black,
 *     which this module reproduces when handed that palette);
 *   - the node: float images in, palette colours / 255 out for each image of a batch,
 *     4-channel images and a bad dither refused with a node error.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "harness.h"
#include "node_quant.h"
#include "node_registry.h"
#include "node_run.h"
#include "nodes_image.h"

static const char *fixture_dir = "tests/fixtures/image_nodes";

struct reader {
    const uint8_t *p, *end;
};

static uint32_t rd_u32(struct reader *r)
{
    ASSERT(r->p + 4 <= r->end);
    uint32_t v = r->p[0] | r->p[1] << 8 | r->p[2] << 16 | (uint32_t)r->p[3] << 24;
    r->p += 4;
    return v;
}

static uint64_t rd_u64(struct reader *r)
{
    uint64_t lo = rd_u32(r);
    return lo | (uint64_t)rd_u32(r) << 32;
}

static const uint8_t *rd_bytes(struct reader *r, size_t n)
{
    ASSERT(r->p + n <= r->end);
    const uint8_t *p = r->p;
    r->p += n;
    return p;
}

static uint8_t *read_file(const char *name, size_t *n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", fixture_dir, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = xmalloc((size_t)len);
    *n = fread(b, 1, (size_t)len, f);
    fclose(f);
    return b;
}

/* The generator's xorshift32 image (low byte of each state). */
static void xorshift_image(uint8_t *out, size_t n, uint32_t x)
{
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        out[i] = (uint8_t)x;
    }
}

static uint64_t fnv64(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* Indices for one case: the dither code as the fixture's (0, 1, or a Bayer order). */
static void map_case(const uint8_t *rgb, int w, int h, const uint8_t pal[][3], int n_pal,
                     int bayer_colours, int dither, uint8_t *idx)
{
    if (dither >= 2) {
        uint8_t *tmp = xmalloc((size_t)w * h * 3);
        node_quant_bayer(rgb, w, h, dither, bayer_colours, tmp);
        node_quant_map(tmp, w, h, pal, n_pal, 0, idx);
        xfree(tmp);
    } else {
        node_quant_map(rgb, w, h, pal, n_pal, dither, idx);
    }
}

static int idx_matches(const uint8_t *got, const struct reader *r, size_t n, int stored,
                       const uint8_t *want, uint64_t hash)
{
    (void)r;
    return stored ? !memcmp(got, want, n) : fnv64(got, n) == hash;
}

static void check_fixture(const char *name, uint32_t seed)
{
    size_t len;
    uint8_t *file = read_file(name, &len);
    ok(file != NULL, "fixture %s/%s readable", fixture_dir, name);
    if (!file)
        return;
    struct reader r = {file, file + len};
    ok(!memcmp(rd_bytes(&r, 4), "LQ01", 4), "%s: magic", name);
    int w = (int)rd_u32(&r), h = (int)rd_u32(&r);
    size_t n = (size_t)w * h;
    uint8_t *rgb = xmalloc(n * 3);
    if (rd_u32(&r))
        memcpy(rgb, rd_bytes(&r, n * 3), n * 3);
    else
        xorshift_image(rgb, n * 3, seed);
    uint32_t n_cases = rd_u32(&r);
    uint8_t *idx = xmalloc(n);
    int pal_ok = 0, modern_ok = 0, legacy_ok = 0;
    char first_bad[160] = "";
    for (uint32_t c = 0; c < n_cases; c++) {
        int colors = (int)rd_u32(&r), dither = (int)rd_u32(&r), n_want = (int)rd_u32(&r);
        uint8_t want_pal[256][3] = {{0}};
        memcpy(want_pal, rd_bytes(&r, (size_t)n_want * 3), (size_t)n_want * 3);
        int stored = (int)rd_u32(&r);
        const uint8_t *modern = NULL, *legacy = NULL;
        uint64_t h_modern = 0, h_legacy = 0;
        if (stored) {
            modern = rd_bytes(&r, n);
            legacy = rd_bytes(&r, n);
        } else {
            h_modern = rd_u64(&r);
            h_legacy = rd_u64(&r);
        }
        uint8_t pal[256][3];
        int n_pal = 0;
        struct err e = {0};
        int rc = node_quant_median_cut(rgb, n, colors, pal, &n_pal, &e);
        int p_ok = rc == 0 && n_pal == n_want && !memcmp(pal, want_pal, (size_t)n_want * 3);
        pal_ok += p_ok;
        /* Pillow >= 10.1: the palette as cut, the Bayer spread over its length. */
        map_case(rgb, w, h, (const uint8_t(*)[3])want_pal, n_want, n_want, dither, idx);
        int m_ok = idx_matches(idx, &r, n, stored, modern, h_modern);
        modern_ok += m_ok;
        /* Pillow 9.4: padded with black to 256 entries, and a spread over 256. */
        map_case(rgb, w, h, (const uint8_t(*)[3])want_pal, 256, 256, dither, idx);
        int l_ok = idx_matches(idx, &r, n, stored, legacy, h_legacy);
        legacy_ok += l_ok;
        if ((!p_ok || !m_ok || !l_ok) && !first_bad[0])
            snprintf(first_bad, sizeof first_bad,
                     "first miss: colors %d dither %d: palette %s (%d vs %d), modern %s, legacy %s",
                     colors, dither, p_ok ? "ok" : "differs", n_pal, n_want, m_ok ? "ok" : "differs",
                     l_ok ? "ok" : "differs");
    }
    ok(pal_ok == (int)n_cases, "%s (%dx%d): median-cut palettes equal Pillow's in %d/%u cases %s",
       name, w, h, pal_ok, n_cases, first_bad);
    ok(modern_ok == (int)n_cases, "%s: mappings equal Pillow >= 10.1's in %d/%u cases", name,
       modern_ok, n_cases);
    ok(legacy_ok == (int)n_cases, "%s: with the 256-entry padded palette, equal Pillow 9.4's in %d/%u",
       name, legacy_ok, n_cases);
    xfree(idx);
    xfree(rgb);
    xfree(file);
}

/* ---- the node ---- */

static struct node_env env;
static char last_msg[256];

static struct value *run_quantize(struct value *img, int colors, const char *dither)
{
    const struct node_class *cls = &nodes_image_quantize;
    struct value *in[4] = {0}, *out[1] = {0};
    in[node_class_input_index(cls, "image")] = img;
    in[node_class_input_index(cls, "colors")] = value_new_int(colors);
    in[node_class_input_index(cls, "dither")] = value_new_string(dither);
    struct node_ctx c;
    node_ctx_init(&c, cls, "1", &env, in, out);
    int rc = cls->run(&c);
    snprintf(last_msg, sizeof last_msg, "%s: %s", c.exc_type, c.exc_message.ptr ? c.exc_message.ptr : "");
    node_ctx_release(&c);
    for (int i = 0; i < 4; i++)
        value_unref(in[i]);
    return rc < 0 ? NULL : out[0];
}

static void test_node(void)
{
    /* Two 20x12 images; (v + 0.5) / 255 makes torch's *255 -> uint8 cast give v. */
    const int W = 20, H = 12, B = 2;
    int64_t shape[4] = {B, H, W, 3};
    struct value *img = value_new_tensor("IMAGE", 4, shape);
    uint8_t *px = xmalloc((size_t)B * H * W * 3);
    xorshift_image(px, (size_t)B * H * W * 3, 12345);
    for (size_t i = 0; i < (size_t)B * H * W * 3; i++) {
        px[i] = (uint8_t)((i % 3 == 0 ? px[i] : px[i] / 4) & 0xff);
        img->data[i] = ((float)px[i] + 0.5f) / 255.0f;
    }
    static const char *const dithers[] = {"none", "floyd-steinberg", "bayer-4"};
    for (int d = 0; d < 3; d++) {
        struct value *out = run_quantize(value_ref(img), 6, dithers[d]);
        int same = out && out->ndim == 4 && out->shape[0] == B && out->shape[3] == 3;
        for (int b = 0; b < B && same; b++) {
            const uint8_t *p = px + (size_t)b * H * W * 3;
            uint8_t pal[256][3], idx[20 * 12];
            int n_pal;
            struct err e = {0};
            node_quant_median_cut(p, (size_t)H * W, 6, pal, &n_pal, &e);
            map_case(p, W, H, (const uint8_t(*)[3])pal, n_pal, n_pal, d == 2 ? 4 : d, idx);
            for (int i = 0; i < H * W && same; i++)
                for (int k = 0; k < 3; k++)
                    same &= out->data[((size_t)b * H * W + i) * 3 + k] == (float)pal[idx[i]][k] / 255.0f;
        }
        ok(same, "ImageQuantize(6 colours, %s): each image its own palette, colours / 255", dithers[d]);
        value_unref(out);
    }
    value_unref(img);
    xfree(px);

    int64_t rgba[4] = {1, 4, 4, 4};
    struct value *four = value_new_tensor("IMAGE", 4, rgba);
    ok(run_quantize(four, 8, "none") == NULL && strstr(last_msg, "ValueError") &&
           strstr(last_msg, "3 channels"),
       "a 4-channel image is a node error: %s", last_msg);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        fixture_dir = argv[1];
    check_fixture("quant_gradient.bin", 0);
    check_fixture("quant_noise.bin", 0);
    check_fixture("quant_few.bin", 0);
    check_fixture("quant_big.bin", 88172645u);
    test_node();
    return harness_done();
}

/*
 * test_image_apng — the APNG writer (nodes/image/node_apng.c) and SaveAnimatedPNG:
 *   - a reader written here (chunks, CRCs, acTL/fcTL/fdAT sequence numbers, each
 *     frame's data decoded by libpng as a PNG of the fcTL size and composited at its
 *     offsets, dispose none / blend source) first decodes an APNG Pillow wrote
 *     (tools/apng_reference.py) to the frames it was given, then decodes ours;
 *   - ours has Pillow's layout for the same frames (chunk sequence, fcTL sizes and
 *     offsets: a frame cropped to its changes), and Pillow >= 10's choices: a repeated
 *     frame dropped with its duration added (166 + 166 ms -> 83/250 s), a single
 *     frame written as a plain PNG, "cannot write duration" past 65535/1 s... and the
 *     "comf" chunks after the image data;
 *   - reading (node_image_load, behind LoadImage and LoadImageOutput): every frame, as
 *     Pillow reads them, for an RGBA APNG Pillow wrote with dispose background/previous
 *     and blend over (frames Pillow decoded, tests/fixtures/image_nodes/apng_ops.rgba),
 *     the RGB one above, and the node's own file;
 *   - the node: the file in the output folder with the next counter, "animated" in the
 *     UI, the prompt as a comf chunk, RGBA kept, bad channel counts and an empty batch
 *     refused.
 * Set LATENTD_APNG_OUT=path to keep the encoded test animation (for checking with PIL).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "alloc.h"
#include "buf.h"
#include "harness.h"
#include "node_apng.h"
#include "node_imageio.h"
#include "node_registry.h"
#include "node_run.h"
#include "nodes_image.h"

static const char *fixture_dir = "tests/fixtures/image_nodes";

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

/* ---- the reader ---- */

struct apng {
    char types[64][5]; /* chunk sequence */
    int n_chunks;
    int w, h, c, n_frames, animated, bad_crc, bad_seq;
    uint8_t *frames[8]; /* composited, w*h*c each */
    int fx[8], fy[8], fw[8], fh[8], num[8], den[8];
    char comf[4][128];  /* "key=value" of comf chunks */
    int n_comf, comf_after_data;
};

static void append_chunk(struct buf *b, const char *type, const uint8_t *data, size_t n)
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

/* Decode a frame's zlib data as a PNG of fw x fh with the file's IHDR otherwise. */
static uint8_t *decode_frame(const uint8_t *ihdr, int fw, int fh, const struct buf *data)
{
    struct buf png;
    buf_init(&png);
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    buf_add(&png, sig, 8);
    uint8_t hd[13];
    memcpy(hd, ihdr, 13);
    put_be32(hd, (uint32_t)fw);
    put_be32(hd + 4, (uint32_t)fh);
    append_chunk(&png, "IHDR", hd, 13);
    append_chunk(&png, "IDAT", (const uint8_t *)data->ptr, data->len);
    append_chunk(&png, "IEND", NULL, 0);
    struct node_pixels px = {0};
    int alpha;
    struct err e = {0};
    int rc = node_image_decode_rgba(png.ptr, png.len, &px, &alpha, &e);
    if (rc < 0)
        printf("# frame %dx%d: %s\n", fw, fh, e.msg);
    buf_release(&png);
    return rc < 0 ? NULL : px.px;
}

static void apng_read(const uint8_t *p, size_t n, struct apng *a)
{
    memset(a, 0, sizeof *a);
    const uint8_t *end = p + n, *ihdr = NULL;
    p += 8;
    uint32_t next_seq = 0;
    int cur = -1, seen_data = 0;
    struct buf data;
    buf_init(&data);
    uint8_t *canvas = NULL;
    for (;;) {
        int last = p + 12 > end;
        const char *type = last ? "" : (const char *)p + 4;
        uint32_t len = last ? 0 : be32(p);
        const uint8_t *d = p + 8;
        int ends_frame = last || !memcmp(type, "fcTL", 4) || !memcmp(type, "IEND", 4);
        if (ends_frame && cur >= 0 && data.len) {
            /* Finish frame `cur`: decode, composite over the previous canvas. */
            uint8_t *rgba = decode_frame(ihdr, a->fw[cur], a->fh[cur], &data);
            if (!canvas)
                canvas = xcalloc((size_t)a->w * a->h, 4);
            for (int y = 0; rgba && y < a->fh[cur]; y++)
                memcpy(canvas + ((size_t)(y + a->fy[cur]) * a->w + a->fx[cur]) * 4,
                       rgba + (size_t)y * a->fw[cur] * 4, (size_t)a->fw[cur] * 4);
            xfree(rgba);
            a->frames[cur] = xmalloc((size_t)a->w * a->h * a->c);
            for (size_t i = 0; i < (size_t)a->w * a->h; i++)
                memcpy(a->frames[cur] + i * a->c, canvas + i * 4, (size_t)a->c);
            buf_reset(&data);
        }
        if (last)
            break;
        uLong crc = crc32(crc32(0L, (const Bytef *)type, 4), d, len);
        a->bad_crc += crc != be32(d + len);
        if (a->n_chunks < 64)
            memcpy(a->types[a->n_chunks++], type, 5), a->types[a->n_chunks - 1][4] = 0;
        if (!memcmp(type, "IHDR", 4)) {
            ihdr = d;
            a->w = (int)be32(d);
            a->h = (int)be32(d + 4);
            a->c = d[9] == 6 ? 4 : 3;
            cur = 0;
            a->fw[0] = a->w, a->fh[0] = a->h;
        } else if (!memcmp(type, "acTL", 4)) {
            a->animated = 1;
            a->n_frames = (int)be32(d);
            cur = -1;
        } else if (!memcmp(type, "fcTL", 4)) {
            a->bad_seq += be32(d) != next_seq++;
            cur = cur < 0 ? 0 : cur + (a->frames[cur] != NULL);
            if (cur < 8) {
                a->fw[cur] = (int)be32(d + 4), a->fh[cur] = (int)be32(d + 8);
                a->fx[cur] = (int)be32(d + 12), a->fy[cur] = (int)be32(d + 16);
                a->num[cur] = d[20] << 8 | d[21], a->den[cur] = d[22] << 8 | d[23];
            }
        } else if (!memcmp(type, "IDAT", 4)) {
            buf_add(&data, d, len);
            seen_data = 1;
            if (cur < 0)
                cur = 0;
        } else if (!memcmp(type, "fdAT", 4)) {
            a->bad_seq += be32(d) != next_seq++;
            buf_add(&data, d + 4, len - 4);
        } else if (!memcmp(type, "comf", 4) && a->n_comf < 4) {
            a->comf_after_data = seen_data;
            snprintf(a->comf[a->n_comf++], 128, "%s=%.*s", (const char *)d,
                     (int)(len - strlen((const char *)d) - 1), (const char *)d + strlen((const char *)d) + 1);
        }
        p += 12 + len;
    }
    if (!a->animated)
        a->n_frames = a->frames[0] ? 1 : 0;
    buf_release(&data);
    xfree(canvas);
}

static void apng_free(struct apng *a)
{
    for (int i = 0; i < 8; i++)
        xfree(a->frames[i]);
}

/* ---- frames ---- */

static void make_frame(uint8_t *px, int w, int h, int c, int f)
{
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int k = 0; k < c; k++)
                px[((size_t)y * w + x) * c + k] = (uint8_t)((37 * x + 11 * y + 50 * f + 80 * k) & 255);
}

static uint8_t *read_fixture(const char *name, size_t *n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", fixture_dir, name);
    struct buf b;
    buf_init(&b);
    if (buf_read_file(&b, path) < 0) {
        buf_release(&b);
        return NULL;
    }
    return (uint8_t *)buf_detach(&b, n);
}

static void test_pil_and_ours(void)
{
    uint8_t f0[6 * 5 * 3], f1[6 * 5 * 3], f2[6 * 5 * 3];
    make_frame(f0, 6, 5, 3, 0);
    make_frame(f1, 6, 5, 3, 1);
    memcpy(f2, f1, sizeof f2);
    for (int y = 2; y < 4; y++)
        for (int x = 3; x < 5; x++)
            memset(f2 + ((size_t)y * 6 + x) * 3, 7, 3);
    const uint8_t *want[3] = {f0, f1, f2};

    size_t n;
    uint8_t *pil = read_fixture("apng_pil.png", &n);
    ok(pil != NULL, "Pillow's APNG fixture readable");
    struct apng a;
    apng_read(pil, n, &a);
    int same = a.animated && a.n_frames == 3 && !a.bad_crc && !a.bad_seq;
    for (int i = 0; i < 3 && same; i++)
        same = a.frames[i] && !memcmp(a.frames[i], want[i], sizeof f0);
    ok(same, "the test's reader decodes Pillow's APNG to its three frames");
    struct apng p = a;

    struct buf out;
    buf_init(&out);
    struct err e = {0};
    EXPECT_OK(node_apng_encode(want, 3, 6, 5, 3, 4, 166, NULL, 0, &out, &e));
    struct apng b;
    apng_read((const uint8_t *)out.ptr, out.len, &b);
    same = b.animated && b.n_frames == 3 && !b.bad_crc && !b.bad_seq;
    for (int i = 0; i < 3 && same; i++)
        same = b.frames[i] && !memcmp(b.frames[i], want[i], sizeof f0);
    ok(same, "ours decodes to the same three frames (CRCs and sequence numbers valid)");
    int layout = b.n_chunks == p.n_chunks;
    for (int i = 0; i < b.n_chunks && layout; i++)
        layout = !strcmp(b.types[i], p.types[i]);
    for (int i = 0; i < 3 && layout; i++)
        layout = b.fx[i] == p.fx[i] && b.fy[i] == p.fy[i] && b.fw[i] == p.fw[i] && b.fh[i] == p.fh[i] &&
                 (long)b.num[i] * p.den[i] == (long)p.num[i] * b.den[i];
    ok(layout && b.fw[2] == 2 && b.fh[2] == 2 && b.fx[2] == 3 && b.fy[2] == 2,
       "Pillow's layout: IHDR acTL fcTL IDAT fcTL fdAT fcTL fdAT IEND, frame 2 cropped to 2x2 at (3, 2)");
    ok(b.num[0] == 83 && b.den[0] == 500, "166 ms is the delay 83/500 (Pillow >= 10 reduces it)");
    apng_free(&a);
    apng_free(&b);
    xfree(pil);

    /* A repeated frame: dropped, its time added to the one before. */
    const uint8_t *rep[4] = {f0, f1, f1, f2};
    const char *const chunk_data = "prompt\0{\"1\": {}}";
    struct node_png_chunk comf = {"comf", chunk_data, 17};
    buf_reset(&out);
    EXPECT_OK(node_apng_encode(rep, 4, 6, 5, 3, 9, 166, &comf, 1, &out, &e));
    apng_read((const uint8_t *)out.ptr, out.len, &b);
    ok(b.n_frames == 3 && b.num[1] == 83 && b.den[1] == 250 && b.frames[2] &&
           !memcmp(b.frames[2], f2, sizeof f2),
       "a repeated frame merges into the one before: 3 frames, 332 ms = 83/250");
    ok(b.n_comf == 1 && b.comf_after_data && !strcmp(b.comf[0], "prompt={\"1\": {}}") &&
           !strcmp(b.types[b.n_chunks - 2], "comf") && !strcmp(b.types[b.n_chunks - 1], "IEND"),
       "the comf chunk follows the image data, before IEND");
    const char *keep = getenv("LATENTD_APNG_OUT");
    if (keep) {
        FILE *f = fopen(keep, "wb");
        if (f) {
            fwrite(out.ptr, 1, out.len, f);
            fclose(f);
        }
    }
    apng_free(&b);

    /* One frame left (all equal): a plain PNG. */
    const uint8_t *same3[3] = {f1, f1, f1};
    buf_reset(&out);
    EXPECT_OK(node_apng_encode(same3, 3, 6, 5, 3, 4, 100, NULL, 0, &out, &e));
    apng_read((const uint8_t *)out.ptr, out.len, &b);
    ok(!b.animated && b.n_frames == 1 && b.frames[0] && !memcmp(b.frames[0], f1, sizeof f1) &&
           b.n_chunks == 3,
       "identical frames leave one: an ordinary PNG (IHDR IDAT IEND)");
    apng_free(&b);

    buf_reset(&out);
    const uint8_t *two[2] = {f0, f1};
    ok(node_apng_encode(two, 2, 6, 5, 3, 4, 66667, NULL, 0, &out, &e) == ERR_INVALID &&
           strstr(e.msg, "cannot write duration"),
       "a delay numerator above 65535 is Pillow's error: %s", e.msg);
    e.msg[0] = 0;
    buf_reset(&out);
    ok(node_apng_encode(two, 2, 6, 5, 3, 4, 100000, NULL, 0, &out, &e) == 0,
       "100 s (fps 0.01) is 100/1");
    buf_release(&out);
}

/* ---- reading: node_image_load gives every frame, as Pillow's ImageSequence does ---- */

static void test_load(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/apng_ops.png", fixture_dir);
    struct node_image_file f;
    struct err e = {0};
    int rc = node_image_load(path, &f, &e);
    size_t n;
    uint8_t *want = read_fixture("apng_ops.rgba", &n);
    int same = rc == 0 && want && f.n_frames == 4 && n == 4 * 7 * 6 * 4;
    for (int i = 0; i < 4 && same; i++)
        same = f.frames[i].w == 7 && f.frames[i].h == 6 && f.frames[i].c == 4 &&
               !memcmp(f.frames[i].px, want + (size_t)i * 7 * 6 * 4, 7 * 6 * 4);
    ok(same, "Pillow's RGBA APNG with dispose background/previous and blend over loads as "
             "Pillow reads it: 4 frames (%s)", rc < 0 ? e.msg : "");
    if (rc == 0)
        node_image_file_release(&f);
    xfree(want);

    snprintf(path, sizeof path, "%s/apng_pil.png", fixture_dir);
    rc = node_image_load(path, &f, &e);
    uint8_t f0[6 * 5 * 3], f1[6 * 5 * 3];
    make_frame(f0, 6, 5, 3, 0);
    make_frame(f1, 6, 5, 3, 1);
    same = rc == 0 && f.n_frames == 3 && f.frames[2].c == 3 && !memcmp(f.frames[0].px, f0, sizeof f0) &&
           !memcmp(f.frames[1].px, f1, sizeof f1) && f.frames[2].px[(2 * 6 + 3) * 3] == 7 &&
           !memcmp(f.frames[2].px, f1, 2 * 6 * 3);
    ok(same, "an RGB APNG with a cropped frame loads as 3 RGB frames");
    if (rc == 0)
        node_image_file_release(&f);
}

/* ---- the node ---- */

static char dir_out[256], last_msg[256];
static struct node_env env;

static const struct node_text_chunk workflow[] = {{"workflow", "{\"nodes\": []}"}};
static int with_workflow;

static int run_save(struct value *img, double fps, const char *prefix, struct node_ctx *c, int keep)
{
    const struct node_class *cls = &nodes_save_animated_png;
    static struct value *in[8];
    memset(in, 0, sizeof in);
    in[node_class_input_index(cls, "images")] = img;
    in[node_class_input_index(cls, "filename_prefix")] = value_new_string(prefix);
    in[node_class_input_index(cls, "fps")] = value_new_float(fps);
    in[node_class_input_index(cls, "compress_level")] = value_new_int(4);
    node_ctx_init(c, cls, "1", &env, in, NULL);
    c->prompt_json = "{\"1\": {\"inputs\": {}}}";
    if (with_workflow) {
        c->pnginfo = workflow;
        c->n_pnginfo = 1;
    }
    int rc = cls->run(c);
    snprintf(last_msg, sizeof last_msg, "%s: %s", c->exc_type, c->exc_message.ptr ? c->exc_message.ptr : "");
    for (int i = 0; i < 8; i++)
        value_unref(in[i]);
    if (!keep)
        node_ctx_release(c);
    return rc;
}

static void test_node(void)
{
    snprintf(dir_out, sizeof dir_out, "/tmp/latentd_apng_%d", (int)getpid());
    mkdir(dir_out, 0755);
    env.output_dir = dir_out;
    int64_t shape[4] = {3, 5, 6, 4};
    struct value *img = value_new_tensor("IMAGE", 4, shape);
    uint8_t want[3][6 * 5 * 4];
    for (int f = 0; f < 3; f++) {
        make_frame(want[f], 6, 5, 4, f);
        for (int i = 0; i < 6 * 5 * 4; i++)
            img->data[f * 6 * 5 * 4 + i] = ((float)want[f][i] + 0.25f) / 255.0f;
    }
    struct node_ctx c;
    int rc = run_save(value_ref(img), 8.0, "anim/test", &c, 1);
    ok(rc == 0 && c.n_ui_images == 1 && !strcmp(c.ui_images[0].filename, "test_00001_.png") &&
           !strcmp(c.ui_images[0].subfolder, "anim") && !strcmp(c.ui_images[0].type, "output") &&
           c.ui_animated,
       "SaveAnimatedPNG: anim/test_00001_.png in the UI, animated (%s)", last_msg);
    node_ctx_release(&c);
    char path[512];
    snprintf(path, sizeof path, "%s/anim/test_00001_.png", dir_out);
    struct buf file;
    buf_init(&file);
    ok(buf_read_file(&file, path) == 0, "the file is in the output folder");
    struct apng a;
    apng_read((const uint8_t *)file.ptr, file.len, &a);
    int same = a.animated && a.n_frames == 3 && a.c == 4 && a.num[0] == 1 && a.den[0] == 8;
    for (int f = 0; f < 3 && same; f++)
        same = a.frames[f] && !memcmp(a.frames[f], want[f], sizeof want[f]);
    ok(same, "three RGBA frames, 125 ms = 1/8 s each (int(1000 / 8))");
    ok(a.n_comf == 1 && !strcmp(a.comf[0], "prompt={\"1\": {\"inputs\": {}}}"),
       "the prompt is a comf chunk: %s", a.n_comf ? a.comf[0] : "(none)");
    struct node_image_file back;
    struct err le = {0};
    int lrc = node_image_load(path, &back, &le);
    same = lrc == 0 && back.n_frames == 3;
    for (int f = 0; f < 3 && same; f++)
        same = back.frames[f].c == 4 && !memcmp(back.frames[f].px, want[f], sizeof want[f]);
    ok(same, "node_image_load (LoadImage, LoadImageOutput) reads the three frames back (%s)",
       lrc < 0 ? le.msg : "");
    if (lrc == 0)
        node_image_file_release(&back);
    apng_free(&a);
    snprintf(path, sizeof path, "%s/anim/test_00002_.png", dir_out);
    with_workflow = 1;
    ok(run_save(value_ref(img), 8.0, "anim/test", &c, 0) == 0 && access(path, F_OK) == 0,
       "a second save takes the next counter");
    with_workflow = 0;
    buf_reset(&file);
    buf_read_file(&file, path);
    apng_read((const uint8_t *)file.ptr, file.len, &a);
    ok(a.n_comf == 2 && !strncmp(a.comf[0], "prompt=", 7) &&
           !strcmp(a.comf[1], "workflow={\"nodes\": []}") && a.comf_after_data,
       "extra_pnginfo entries follow the prompt as comf chunks (%d)", a.n_comf);
    apng_free(&a);
    env.disable_metadata = 1;
    snprintf(path, sizeof path, "%s/anim/test_00003_.png", dir_out);
    ok(run_save(value_ref(img), 8.0, "anim/test", &c, 0) == 0, "saved without metadata");
    buf_reset(&file);
    buf_read_file(&file, path);
    apng_read((const uint8_t *)file.ptr, file.len, &a);
    ok(a.n_comf == 0 && a.n_frames == 3, "--disable-metadata: no comf chunk");
    apng_free(&a);
    env.disable_metadata = 0;
    buf_release(&file);
    ok(run_save(value_ref(img), 8.0, "../escape", &c, 0) < 0 &&
           strstr(last_msg, "outside the output folder"),
       "a prefix outside the output folder is refused: %s", last_msg);
    value_unref(img);

    int64_t one[4] = {2, 4, 4, 1};
    ok(run_save(value_new_tensor("IMAGE", 4, one), 8.0, "x", &c, 0) < 0 &&
           strstr(last_msg, "TypeError: Cannot handle this data type: (1, 1, 1), |u1"),
       "a 1-channel batch is PIL's TypeError: %s", last_msg);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir_out);
    if (system(cmd) != 0)
        printf("# could not remove %s\n", dir_out);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        fixture_dir = argv[1];
    test_pil_and_ours();
    test_load();
    test_node();
    return harness_done();
}

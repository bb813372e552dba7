/*
 * nodes/ unit tests: values and refcounts, Python float printing, the registry,
 * PNG/JPEG I/O with EXIF orientation, resize kernels against torch/PIL values,
 * and the image nodes end to end through the graph (LoadImage -> ImageInvert ->
 * ImageScale -> SaveImage: pixels, file names, PNG text chunks, caching on file
 * content, PreviewImage naming, metadata switch, path escapes).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <jpeglib.h>

#include "alloc.h"
#include "buf.h"
#include "graph_test_util.h"
#include "harness.h"
#include "node_imageio.h"
#include "node_imgops.h"
#include "node_registry.h"
#include "node_value.h"
#include "pynum.h"
#include "sha256.h"

static void test_values(void)
{
    struct value *v = value_new_image(2, 3, 4, 3);
    EXPECT_EQ(v->numel, 72);
    EXPECT_EQ(value_refcount(v), 1);
    value_ref(v);
    EXPECT_EQ(value_refcount(v), 2);
    value_unref(v);
    EXPECT_EQ(value_refcount(v), 1);
    value_unref(v);
    struct value *u = value_new_u64(18446744073709551615ull);
    ok(u->big && value_u64(u) == 18446744073709551615ull, "u64 max kept exactly");
    struct buf b;
    buf_init(&b);
    value_describe(u, &b);
    EXPECT_STR(b.ptr, "18446744073709551615");
    value_unref(u);
    static int freed;
    struct value *o = value_new_object("MODEL", &freed, NULL);
    buf_reset(&b);
    value_describe(o, &b);
    EXPECT_STR(b.ptr, "<MODEL object>");
    value_unref(o);
    const struct {
        double d;
        const char *s;
    } f[] = {{8.0, "8.0"},     {0.1, "0.1"},       {1e-05, "1e-05"},     {0.0001, "0.0001"},
             {1e16, "1e+16"},  {123456789.0, "123456789.0"}, {-1.5, "-1.5"}, {0.01, "0.01"},
             {1e15, "1000000000000000.0"}, {2.5e-7, "2.5e-07"}, {-0.0, "-0.0"},
             {9223372036854775807.0, "9.223372036854776e+18"}, {INFINITY, "inf"}, {NAN, "nan"}};
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
        buf_reset(&b);
        pynum_format_float(f[i].d, &b);
        ok(!strcmp(b.ptr, f[i].s), "pyfloat %s (got %s)", f[i].s, b.ptr);
    }
    buf_release(&b);
    uint8_t dg[32];
    struct sha256 s;
    sha256_init(&s);
    sha256_update(&s, "abc", 3);
    sha256_final(&s, dg);
    char hex[65];
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", dg[i]);
    EXPECT_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

static int dummy_run(struct node_ctx *c)
{
    (void)c;
    return 0;
}

static void test_registry(void)
{
    static const struct node_input_def in[] = {{.name = "a", .type = "INT"}, {.name = "b", .type = "IMAGE"},
                                               NODE_INPUTS_END};
    static const struct node_class k1 = {.name = "K1", .inputs = in, .run = dummy_run};
    static const struct node_class k2 = {.name = "K2", .run = dummy_run};
    struct node_registry *r = node_registry_new();
    char names[100][16];
    static struct node_class many[100];
    for (int i = 0; i < 100; i++) {
        snprintf(names[i], sizeof(names[i]), "N%d", i);
        many[i] = (struct node_class){.name = names[i], .run = dummy_run};
        node_registry_add(r, &many[i]);
    }
    const struct node_class *const two[] = {&k1, &k2};
    node_registry_add_all(r, two, 2);
    EXPECT_EQ(node_registry_count(r), 102);
    ok(node_registry_find(r, "K1") == &k1 && node_registry_find(r, "N57") == &many[57], "lookup by name");
    ok(node_registry_find(r, "nope") == NULL && node_registry_find(r, NULL) == NULL, "unknown is NULL");
    ok(node_registry_at(r, 100) == &k1, "registration order kept");
    EXPECT_EQ(node_class_n_inputs(&k1), 2);
    EXPECT_EQ(node_class_n_outputs(&k1), 0);
    EXPECT_EQ(node_class_input_index(&k1, "b"), 1);
    node_registry_free(r);

    /* A stated index count must equal the declaration's (node_registry_add panics
     * otherwise, so a family whose enum and inputs drift apart fails every test
     * that registers it). */
    static const struct node_class stated = {.name = "S", .inputs = in, .n_inputs = 2,
                                             .run = dummy_run};
    static const struct node_class short_enum = {.name = "E", .inputs = in, .n_inputs = 1,
                                                 .run = dummy_run};
    static const struct node_class long_enum = {.name = "L", .n_inputs = 1, .run = dummy_run};
    struct err e = {0};
    EXPECT_OK(node_class_check(&stated, &e));
    EXPECT_OK(node_class_check(&k1, &e));
    EXPECT_EQ(node_class_check(&short_enum, &e), ERR_INVALID);
    ok(strstr(e.msg, "'E'") && strstr(e.msg, "counts 1 inputs, the declaration 2"), "mismatch named: %s",
       e.msg);
    err_clear(&e);
    EXPECT_EQ(node_class_check(&long_enum, &e), ERR_INVALID);
}

/* ---- image I/O ----------------------------------------------------------------------- */

/* Chunk types of a PNG file, space-separated. */
static void png_chunks(const char *path, char *out, size_t cap, char *prompt_val, size_t pcap)
{
    FILE *f = fopen(path, "rb");
    out[0] = '\0';
    if (prompt_val)
        prompt_val[0] = '\0';
    if (!f)
        return;
    unsigned char hdr[8];
    if (fread(hdr, 1, 8, f) != 8) {
        fclose(f);
        return;
    }
    unsigned char lt[8];
    while (fread(lt, 1, 8, f) == 8) {
        uint32_t len = (uint32_t)lt[0] << 24 | lt[1] << 16 | lt[2] << 8 | lt[3];
        char type[5] = {(char)lt[4], (char)lt[5], (char)lt[6], (char)lt[7], 0};
        char *data = malloc(len + 1);
        if (fread(data, 1, len, f) != len) {
            free(data);
            break;
        }
        data[len] = '\0';
        char item[80];
        if (!strcmp(type, "tEXt")) {
            snprintf(item, sizeof(item), "%stEXt:%s", out[0] ? " " : "", data);
            if (prompt_val && !strcmp(data, "prompt"))
                snprintf(prompt_val, pcap, "%s", data + strlen(data) + 1);
        } else {
            snprintf(item, sizeof(item), "%s%s", out[0] ? " " : "", type);
        }
        if (strlen(out) + strlen(item) + 1 < cap)
            strcat(out, item);
        free(data);
        fseek(f, 4, SEEK_CUR);
    }
    fclose(f);
}

static void write_jpeg_exif(const char *path, int w, int h, const uint8_t *rgb, int orientation)
{
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr je;
    ci.err = jpeg_std_error(&je);
    jpeg_create_compress(&ci);
    FILE *f = fopen(path, "wb");
    jpeg_stdio_dest(&ci, f);
    ci.image_width = (JDIMENSION)w;
    ci.image_height = (JDIMENSION)h;
    ci.input_components = 3;
    ci.in_color_space = JCS_RGB;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, 100, TRUE);
    jpeg_start_compress(&ci, TRUE);
    /* Exif\0\0 + big-endian TIFF with one IFD entry: Orientation (SHORT). */
    uint8_t exif[] = {'E', 'x', 'i', 'f', 0, 0, 'M', 'M', 0, 42, 0, 0, 0, 8, 0, 1,
                      0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, (uint8_t)orientation, 0, 0, 0, 0, 0, 0};
    jpeg_write_marker(&ci, JPEG_APP0 + 1, exif, sizeof(exif));
    for (int y = 0; y < h; y++) {
        JSAMPROW row = (JSAMPROW)(rgb + (size_t)y * w * 3);
        jpeg_write_scanlines(&ci, &row, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    fclose(f);
}

static void test_imageio(const struct tdirs *d)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/t.png", d->temp);
    uint8_t px[2 * 3 * 4];
    for (int i = 0; i < 24; i++)
        px[i] = (uint8_t)(i * 10);
    struct node_text_chunk tx[2] = {{"prompt", "{\"a\": 1}"}, {"workflow", "{}"}};
    struct err e = {0};
    EXPECT_OK(node_png_write(path, px, 3, 2, 4, 4, tx, 2, &e));
    char chunks[256], pv[256];
    png_chunks(path, chunks, sizeof(chunks), pv, sizeof(pv));
    EXPECT_STR(chunks, "IHDR tEXt:prompt tEXt:workflow IDAT IEND");
    EXPECT_STR(pv, "{\"a\": 1}");
    struct node_image_file f;
    EXPECT_OK(node_image_load(path, &f, &e));
    ok(f.n_frames == 1 && f.frames[0].w == 3 && f.frames[0].h == 2 && f.frames[0].c == 4 &&
           !memcmp(f.frames[0].px, px, sizeof(px)),
       "PNG round trip");
    node_image_file_release(&f);

    /* EXIF orientation 6 (rotate 90 CW): a 3x2 image becomes 2x3. */
    uint8_t rgb[3 * 2 * 3];
    for (int y = 0; y < 2; y++)
        for (int x = 0; x < 3; x++) {
            uint8_t v = (uint8_t)(y == 0 && x == 0 ? 255 : 0);
            rgb[(y * 3 + x) * 3] = rgb[(y * 3 + x) * 3 + 1] = rgb[(y * 3 + x) * 3 + 2] = v;
        }
    snprintf(path, sizeof(path), "%s/t.jpg", d->temp);
    write_jpeg_exif(path, 3, 2, rgb, 6);
    EXPECT_OK(node_image_load(path, &f, &e));
    ok(f.frames[0].w == 2 && f.frames[0].h == 3, "EXIF 6 swaps width and height (%dx%d)", f.frames[0].w,
       f.frames[0].h);
    /* The top-left source pixel ends up top-right after a clockwise turn. */
    ok(f.frames[0].px[(0 * 2 + 1) * 3] > 200 && f.frames[0].px[0] < 60, "EXIF 6 rotates clockwise");
    node_image_file_release(&f);
    snprintf(path, sizeof(path), "%s/garbage.png", d->temp);
    FILE *g = fopen(path, "wb");
    fputs("\x89PNG\r\n\x1a\nnot really", g);
    fclose(g);
    e.msg[0] = 0;
    ok(node_image_load(path, &f, &e) < 0 && e.msg[0], "corrupt PNG is an error: %s", e.msg);
    /* A 30000 x 30000 header: refused before any allocation, as PIL refuses it. */
    static const unsigned char bomb[] = {
        0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44,
        0x52, 0x00, 0x00, 0x75, 0x30, 0x00, 0x00, 0x75, 0x30, 0x08, 0x02, 0x00, 0x00, 0x00, 0xe9,
        0x45, 0x6f, 0xed, 0x00, 0x00, 0x00, 0x00, 0x49, 0x44, 0x41, 0x54, 0x35, 0xaf, 0x06, 0x1e,
        0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82};
    g = fopen(path, "wb");
    fwrite(bomb, 1, sizeof(bomb), g);
    fclose(g);
    e.msg[0] = 0;
    ok(node_image_load(path, &f, &e) == ERR_TOO_LARGE && strstr(e.msg, "decompression bomb"),
       "decompression bomb refused: %s", e.msg);
}

/* A GIF with literal-only LZW codes (a clear code every two pixels keeps the code
 * size at 3 bits), enough to test the decoder's framing, compositing and
 * transparency without an encoder. */
static void gif_frame_data(struct buf *g, const uint8_t *idx, int n)
{
    uint32_t acc = 0;
    int bits = 0;
    uint8_t bytes[64];
    int nb = 0;
    for (int i = 0; i <= n; i++) {
        int codes[2], nc = 0;
        if (i % 2 == 0)
            codes[nc++] = 4; /* clear */
        codes[nc++] = i < n ? idx[i] : 5; /* pixel or end */
        for (int k = 0; k < nc; k++) {
            acc |= (uint32_t)codes[k] << bits;
            bits += 3;
            while (bits >= 8) {
                bytes[nb++] = (uint8_t)acc;
                acc >>= 8;
                bits -= 8;
            }
        }
    }
    if (bits)
        bytes[nb++] = (uint8_t)acc;
    buf_addc(g, 2); /* min code size */
    buf_addc(g, (char)nb);
    buf_add(g, bytes, (size_t)nb);
    buf_addc(g, 0);
}

static void write_gif(const char *path)
{
    struct buf g;
    buf_init(&g);
    const uint8_t head[] = {'G', 'I', 'F', '8', '9', 'a', 2, 0, 2, 0, 0x81, 0, 0,
                            0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255};
    buf_add(&g, head, sizeof(head));
    /* frame 1: 2x2, index 3 transparent, disposal 1 */
    const uint8_t gce1[] = {0x21, 0xf9, 4, (1 << 2) | 1, 0, 0, 3, 0};
    buf_add(&g, gce1, sizeof(gce1));
    const uint8_t im1[] = {0x2c, 0, 0, 0, 0, 2, 0, 2, 0, 0};
    buf_add(&g, im1, sizeof(im1));
    const uint8_t px1[] = {1, 2, 3, 1};
    gif_frame_data(&g, px1, 4);
    /* frame 2: 1x1 at (1,1), green */
    const uint8_t im2[] = {0x2c, 1, 0, 1, 0, 1, 0, 1, 0, 0};
    buf_add(&g, im2, sizeof(im2));
    const uint8_t px2[] = {2};
    gif_frame_data(&g, px2, 1);
    buf_addc(&g, 0x3b);
    FILE *f = fopen(path, "wb");
    fwrite(g.ptr, 1, g.len, f);
    fclose(f);
    buf_release(&g);
}

static void test_gif(const struct tdirs *d)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/anim.gif", d->input);
    write_gif(path);
    struct node_image_file f;
    struct err e = {0};
    int rc = node_image_load(path, &f, &e);
    ok(rc == 0 && f.n_frames == 2, "GIF: two frames (%s)", e.msg);
    if (rc == 0 && f.n_frames == 2) {
        const uint8_t *a = f.frames[0].px, *b = f.frames[1].px;
        ok(a[0] == 255 && a[1] == 0 && a[3] == 255 && a[4 + 1] == 255 && a[8 + 3] == 0 && a[12] == 255, "GIF frame 1 pixels and transparency");
        ok(b[12] == 0 && b[12 + 1] == 255 && b[0] == 255 && b[8 + 3] == 0, "GIF frame 2 composited over frame 1");
    }
    node_image_file_release(&f);
    /* truncated after the header: an error, not a crash */
    FILE *t = fopen(path, "r+b");
    if (ftruncate(fileno(t), 20) != 0)
        ok(0, "truncate");
    fclose(t);
    ok(node_image_load(path, &f, &e) < 0, "truncated GIF is an error");
    write_gif(path);
}

static void test_resize(void)
{
    float row[2] = {0, 1}, out[4];
    node_img_resize(row, 1, 1, 2, 1, out, 1, 4, "bilinear", 0, NULL);
    ok(fabsf(out[0]) < 1e-6 && fabsf(out[1] - 0.25f) < 1e-6 && fabsf(out[2] - 0.75f) < 1e-6 && fabsf(out[3] - 1) < 1e-6,
       "bilinear matches torch (%g %g %g %g)", out[0], out[1], out[2], out[3]);
    node_img_resize(row, 1, 1, 2, 1, out, 1, 4, "nearest-exact", 0, NULL);
    ok(out[0] == 0 && out[1] == 0 && out[2] == 1 && out[3] == 1, "nearest-exact");
    node_img_resize(row, 1, 1, 2, 1, out, 1, 4, "bicubic", 0, NULL);
    EXPECT_NEAR(out[0], -0.10546875, 1e-6); /* torch's A=-0.75 overshoot */
    EXPECT_NEAR(out[3], 1.10546875, 1e-6);
    float four[4] = {0, 1, 2, 3}, two[2];
    node_img_resize(four, 1, 1, 4, 1, two, 1, 2, "area", 0, NULL);
    ok(two[0] == 0.5f && two[1] == 2.5f, "area averages");
    float half[16];
    for (int i = 0; i < 16; i++)
        half[i] = 0.5f;
    node_img_resize(half, 1, 4, 4, 1, two, 1, 2, "lanczos", 0, NULL);
    EXPECT_NEAR(two[0], 127.0 / 255.0, 1e-6); /* 8-bit like PIL, truncated on the way in */
    ok(node_img_resize(half, 1, 4, 4, 1, two, 1, 2, "bislerp", 0, NULL) < 0, "unknown method refused");
    /* center crop: 4 wide -> 2x2 keeps the middle columns */
    float grid[8] = {0, 1, 2, 3, 0, 1, 2, 3}, c2[4];
    node_img_resize(grid, 1, 2, 4, 1, c2, 2, 2, "nearest-exact", 1, NULL);
    ok(c2[0] == 1 && c2[1] == 2, "center crop (%g %g)", c2[0], c2[1]);
    EXPECT_NEAR(pynum_round_half_even(2.5), 2, 0);
    EXPECT_NEAR(pynum_round_half_even(3.5), 4, 0);
}

/* ---- image nodes through the graph -------------------------------------------------- */

static struct graph_ctx *graph_with(const struct tdirs *d, int disable_metadata, int preview)
{
    struct graph_config cfg = {0};
    cfg.models_dir = d->models;
    cfg.input_dir = d->input;
    cfg.output_dir = d->output;
    cfg.temp_dir = d->temp;
    cfg.disable_metadata = disable_metadata;
    cfg.preview_method = preview ? GRAPH_PREVIEW_AUTO : GRAPH_PREVIEW_NONE;
    struct err e = {0};
    return graph_new(&cfg, &e);
}

static void write_input_png(const struct tdirs *d, const char *name, uint8_t base)
{
    /* 4x2 RGBA: pixel i = (base+i, 2i, 255-i), alpha 255 except the last (0). */
    uint8_t px[4 * 2 * 4];
    for (int i = 0; i < 8; i++) {
        px[4 * i] = (uint8_t)(base + i);
        px[4 * i + 1] = (uint8_t)(2 * i);
        px[4 * i + 2] = (uint8_t)(255 - i);
        px[4 * i + 3] = i == 7 ? 0 : 255;
    }
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", d->input, name);
    struct err e = {0};
    node_png_write(path, px, 4, 2, 4, 1, NULL, 0, &e);
}

static const char *PIPE =
    "{\"1\": {\"class_type\": \"LoadImage\", \"inputs\": {\"image\": \"in.png\"}},"
    " \"2\": {\"class_type\": \"ImageInvert\", \"inputs\": {\"image\": [\"1\", 0]}},"
    " \"3\": {\"class_type\": \"ImageScale\", \"inputs\": {\"image\": [\"2\", 0], \"upscale_method\": \"nearest-exact\","
    " \"width\": 8, \"height\": 0, \"crop\": \"disabled\"}},"
    " \"4\": {\"class_type\": \"SaveImage\", \"inputs\": {\"images\": [\"3\", 0], \"filename_prefix\": \"sub/%width%x%height%/img\"}},"
    " \"5\": {\"class_type\": \"PreviewImage\", \"inputs\": {\"images\": [\"1\", 0]}}}";

static void test_pipeline(const struct tdirs *d)
{
    write_input_png(d, "in.png", 100);
    struct graph_ctx *g = graph_with(d, 0, 0);
    struct sink s = {0};
    cJSON *outs = NULL;
    const char *extra = "{\"extra_pnginfo\": {\"workflow\": {\"nodes\": [], \"note\": \"caf\\u00e9\"}}}";
    ok(trun(g, &s, "img1", PIPE, extra, &outs) == GRAPH_STATUS_SUCCESS, "image pipeline runs");
    char *j = cJSON_PrintUnformatted(cJSON_GetObjectItem(outs, "4"));
    EXPECT_STR(j, "{\"images\":[{\"filename\":\"img_00001_.png\",\"subfolder\":\"sub/8x4\",\"type\":\"output\"}]}");
    free(j);
    const cJSON *pv = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(outs, "5"), "images"), 0);
    const char *pname = cJSON_GetObjectItem(pv, "filename")->valuestring;
    ok(strlen(pname) == strlen("ComfyUI_temp_abcde_00001_.png") && !strncmp(pname, "ComfyUI_temp_", 13) &&
           !strcmp(pname + 18, "_00001_.png") && !strcmp(cJSON_GetObjectItem(pv, "type")->valuestring, "temp"),
       "PreviewImage name %s in temp", pname);
    char first_preview[64];
    snprintf(first_preview, sizeof(first_preview), "%s", pname);
    cJSON_Delete(outs);

    char path[600], chunks[256], prompt_txt[4096];
    snprintf(path, sizeof(path), "%s/sub/8x4/img_00001_.png", d->output);
    png_chunks(path, chunks, sizeof(chunks), prompt_txt, sizeof(prompt_txt));
    EXPECT_STR(chunks, "IHDR tEXt:prompt tEXt:workflow IDAT IEND");
    cJSON *pj = cJSON_Parse(prompt_txt);
    ok(pj && cJSON_GetObjectItem(pj, "4"), "prompt chunk holds the prompt JSON");
    cJSON_Delete(pj);
    struct node_image_file f;
    struct err e = {0};
    EXPECT_OK(node_image_load(path, &f, &e));
    ok(f.frames[0].w == 8 && f.frames[0].h == 4 && f.frames[0].c == 3, "saved 8x4 RGB (got %dx%dx%d)", f.frames[0].w,
       f.frames[0].h, f.frames[0].c);
    /* nearest-exact 2x: out(x, y) = in(x/2, y/2), inverted: 255 - v (float truncation may give -1). */
    int good = 1;
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < 8; x++) {
            int i = (y / 2) * 4 + x / 2;
            const uint8_t *p = f.frames[0].px + (y * 8 + x) * 3;
            int want[3] = {255 - (100 + i), 255 - 2 * i, i};
            for (int k = 0; k < 3; k++)
                good &= p[k] <= want[k] && p[k] >= want[k] - 1;
        }
    ok(good, "pixels are the inverted, upscaled input");
    node_image_file_release(&f);
    /* Identical resubmission: nothing runs, no new file, executed still sent. */
    sink_clear(&s);
    ok(trun(g, &s, "img2", PIPE, extra, NULL) == GRAPH_STATUS_SUCCESS, "resubmission succeeds");
    EXPECT_EQ(sink_count(&s, "executing"), 0);
    EXPECT_EQ(sink_count(&s, "executed"), 2);
    snprintf(path, sizeof(path), "%s/sub/8x4/img_00002_.png", d->output);
    ok(access(path, F_OK) != 0, "no second file written");

    /* Same name, new bytes: LoadImage re-runs (IS_CHANGED = SHA-256) and so does
     * everything after it. */
    write_input_png(d, "in.png", 50);
    sink_clear(&s);
    trun(g, &s, "img3", PIPE, NULL, &outs);
    EXPECT_EQ(sink_count(&s, "executing"), 5);
    ok(access(path, F_OK) == 0, "changed input writes img_00002_.png");
    pv = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(outs, "5"), "images"), 0);
    pname = cJSON_GetObjectItem(pv, "filename")->valuestring;
    ok(!strncmp(pname, first_preview, 18) && !strcmp(pname + 18, "_00002_.png"),
       "PreviewImage keeps its suffix across prompts (%s, %s)", first_preview, pname);
    cJSON_Delete(outs);
    png_chunks(path, chunks, sizeof(chunks), NULL, 0);
    EXPECT_STR(chunks, "IHDR tEXt:prompt IDAT IEND"); /* no extra_pnginfo this time */
    sink_clear(&s);
    graph_free(g);

    /* --disable-metadata: no text chunks. */
    g = graph_with(d, 1, 0);
    const char *plain = "{\"1\": {\"class_type\": \"EmptyImage\", \"inputs\": {\"width\": 2, \"height\": 2, \"batch_size\": 2, \"color\": 16711680}},"
                        " \"2\": {\"class_type\": \"SaveImage\", \"inputs\": {\"images\": [\"1\", 0], \"filename_prefix\": \"b_%batch_num%\"}}}";
    trun(g, &s, "plain", plain, extra, &outs);
    j = cJSON_PrintUnformatted(outs);
    EXPECT_STR(j, "{\"2\":{\"images\":[{\"filename\":\"b_0_00001_.png\",\"subfolder\":\"\",\"type\":\"output\"},"
                  "{\"filename\":\"b_1_00002_.png\",\"subfolder\":\"\",\"type\":\"output\"}]}}");
    free(j);
    cJSON_Delete(outs);
    snprintf(path, sizeof(path), "%s/b_1_00002_.png", d->output);
    png_chunks(path, chunks, sizeof(chunks), NULL, 0);
    EXPECT_STR(chunks, "IHDR IDAT IEND");
    EXPECT_OK(node_image_load(path, &f, &e));
    ok(f.frames[0].px[0] == 255 && f.frames[0].px[1] == 0 && f.frames[0].px[2] == 0, "EmptyImage color 0xFF0000 is red");
    node_image_file_release(&f);

    /* A prefix that escapes the output folder fails the node. */
    sink_clear(&s);
    const char *esc = "{\"1\": {\"class_type\": \"EmptyImage\", \"inputs\": {\"width\": 2, \"height\": 2, \"batch_size\": 1, \"color\": 0}},"
                      " \"2\": {\"class_type\": \"SaveImage\", \"inputs\": {\"images\": [\"1\", 0], \"filename_prefix\": \"../evil\"}}}";
    ok(trun(g, &s, "esc", esc, NULL, NULL) == GRAPH_STATUS_ERROR, "escaping prefix fails");
    const cJSON *ee = sink_find(&s, "execution_error");
    ok(ee && !strcmp(cJSON_GetObjectItem(ee, "exception_message")->valuestring,
                     "Saving image outside the output folder is not allowed.\n"),
       "escape error message");
    sink_clear(&s);
    graph_free(g);
}

/* LoadImageMask, ImageCrop, ImagePadForOutpaint, ImageBatch, ImageScaleBy. */
static int probe_runs;
static struct value *probe_last;
static int probe_run(struct node_ctx *c)
{
    probe_runs++;
    value_unref(probe_last);
    probe_last = value_ref(node_in_at(c, 0));
    uint8_t rgb[2 * 2 * 3] = {0};
    node_progress(c, 1, 1, rgb, 2, 2);
    return 0;
}
static const struct node_input_def probe_in[] = {{.name = "x", .type = "*"}, NODE_INPUTS_END};
static const struct node_output_def probe_out[] = {NODE_OUTPUTS_END};
static const struct node_class probe_class = {.name = "TProbe", .flags = NODE_CLASS_OUTPUT, .inputs = probe_in,
                                        .outputs = probe_out, .run = probe_run};

static struct value *probe_slot(struct graph_ctx *g, const char *nodes_json, int slot, struct sink *s)
{
    char buf[2048];
    snprintf(buf, sizeof(buf), "{%s, \"99\": {\"class_type\": \"TProbe\", \"inputs\": {\"x\": [\"9\", %d]}}}",
             nodes_json, slot);
    value_unref(probe_last);
    probe_last = NULL;
    trun(g, s, "probe", buf, NULL, NULL);
    graph_free_memory(g, 0, 1);
    struct value *v = probe_last;
    probe_last = NULL;
    return v;
}

static struct value *probe(struct graph_ctx *g, const char *nodes_json, struct sink *s)
{
    return probe_slot(g, nodes_json, 0, s);
}

static void test_small_nodes(const struct tdirs *d)
{
    struct graph_ctx *g = graph_with(d, 0, 1);
    node_registry_add(graph_registry(g), &probe_class);
    struct sink s = {0};
    write_input_png(d, "m.png", 0);
    struct value *v = probe(g, "\"9\": {\"class_type\": \"LoadImageMask\", \"inputs\": {\"image\": \"m.png\", \"channel\": \"alpha\"}}", &s);
    ok(v && v->ndim == 3 && v->shape[1] == 2 && v->shape[2] == 4 && v->data[0] == 0 && v->data[7] == 1,
       "LoadImageMask alpha -> 1 - a");
    ok(s.previews == 1, "preview frame sent with preview method auto (%d)", s.previews);
    value_unref(v);
    sink_clear(&s);
    v = probe(g, "\"9\": {\"class_type\": \"LoadImageMask\", \"inputs\": {\"image\": \"m.png\", \"channel\": \"green\"}}", &s);
    EXPECT_NEAR(v->data[3], 6 / 255.0, 1e-6);
    value_unref(v);
    sink_clear(&s);
    v = probe(g, "\"1\": {\"class_type\": \"LoadImage\", \"inputs\": {\"image\": \"m.png\"}},"
                 " \"9\": {\"class_type\": \"LoadImage\", \"inputs\": {\"image\": \"m.png\"}}", &s);
    ok(v && v->shape[0] == 1 && v->shape[3] == 3, "LoadImage IMAGE is [1,H,W,3]");
    value_unref(v);
    sink_clear(&s);
    v = probe_slot(g, "\"9\": {\"class_type\": \"LoadImage\", \"inputs\": {\"image\": \"anim.gif\"}}", 1, &s);
    ok(v && v->shape[0] == 2 && v->shape[1] == 2 && v->data[2] == 1.0f && v->data[0] == 0.0f,
       "animated GIF -> batch of 2, mask from transparency");
    value_unref(v);
    sink_clear(&s);
    v = probe(g, "\"1\": {\"class_type\": \"EmptyImage\", \"inputs\": {\"width\": 10, \"height\": 6, \"batch_size\": 1, \"color\": 0}},"
                 " \"9\": {\"class_type\": \"ImageCrop\", \"inputs\": {\"image\": [\"1\", 0], \"width\": 8, \"height\": 8, \"x\": 4, \"y\": 2}}", &s);
    ok(v && v->shape[1] == 4 && v->shape[2] == 6, "ImageCrop clamps to the image (%lldx%lld)", (long long)v->shape[2],
       (long long)v->shape[1]);
    value_unref(v);
    sink_clear(&s);
    v = probe(g, "\"1\": {\"class_type\": \"EmptyImage\", \"inputs\": {\"width\": 8, \"height\": 8, \"batch_size\": 1, \"color\": 0}},"
                 " \"9\": {\"class_type\": \"ImagePadForOutpaint\", \"inputs\": {\"image\": [\"1\", 0], \"left\": 8, \"top\": 0, \"right\": 0, \"bottom\": 0, \"feathering\": 2}}", &s);
    ok(v && v->shape[2] == 16 && v->shape[1] == 8 && v->data[0] == 0.5f && v->data[8 * 3] == 0.0f,
       "ImagePadForOutpaint pads with 0.5");
    value_unref(v);
    sink_clear(&s);
#define PAD "\"1\": {\"class_type\": \"EmptyImage\", \"inputs\": {\"width\": 8, \"height\": 8, \"batch_size\": 1, \"color\": 0}}," \
            " \"9\": {\"class_type\": \"ImagePadForOutpaint\", \"inputs\": {\"image\": [\"1\", 0], \"left\": 8, \"top\": 0," \
            " \"right\": 0, \"bottom\": 0, \"feathering\": 2}}"
    v = probe_slot(g, PAD, 1, &s);
    /* mask row 0: 1 over the padding, then (f - d)/f squared for d = j < 2 */
    ok(v && v->shape[2] == 16 && v->data[0] == 1.0f && v->data[8] == 1.0f && v->data[9] == 0.25f && v->data[10] == 0.0f,
       "outpaint mask feathers the inner edge (%g %g %g)", v ? v->data[8] : -1, v ? v->data[9] : -1, v ? v->data[10] : -1);
    value_unref(v);
    sink_clear(&s);
    v = probe(g, "\"1\": {\"class_type\": \"EmptyImage\", \"inputs\": {\"width\": 8, \"height\": 8, \"batch_size\": 1, \"color\": 255}},"
                 " \"2\": {\"class_type\": \"EmptyImage\", \"inputs\": {\"width\": 4, \"height\": 2, \"batch_size\": 2, \"color\": 0}},"
                 " \"9\": {\"class_type\": \"ImageBatch\", \"inputs\": {\"image1\": [\"1\", 0], \"image2\": [\"2\", 0]}}", &s);
    ok(v && v->shape[0] == 3 && v->shape[1] == 8 && v->shape[2] == 8 && v->data[2] == 1.0f && v->data[8 * 8 * 3 + 2] == 0.0f,
       "ImageBatch resizes the second batch to the first");
    value_unref(v);
    sink_clear(&s);
    v = probe(g, "\"1\": {\"class_type\": \"EmptyImage\", \"inputs\": {\"width\": 5, \"height\": 3, \"batch_size\": 1, \"color\": 0}},"
                 " \"9\": {\"class_type\": \"ImageScaleBy\", \"inputs\": {\"image\": [\"1\", 0], \"upscale_method\": \"bicubic\", \"scale_by\": 0.5}}", &s);
    ok(v && v->shape[2] == 2 && v->shape[1] == 2, "ImageScaleBy rounds half to even (5*0.5 -> 2, 3*0.5 -> 2)");
    value_unref(v);
    sink_clear(&s);
    v = probe(g, "\"1\": {\"class_type\": \"EmptyImage\", \"inputs\": {\"width\": 6, \"height\": 3, \"batch_size\": 1, \"color\": 0}},"
                 " \"9\": {\"class_type\": \"ImageScale\", \"inputs\": {\"image\": [\"1\", 0], \"upscale_method\": \"lanczos\", \"width\": 0, \"height\": 5, \"crop\": \"center\"}}", &s);
    ok(v && v->shape[2] == 10 && v->shape[1] == 5, "ImageScale keeps the aspect when width is 0");
    value_unref(v);
    sink_clear(&s);
    v = probe(g, "\"1\": {\"class_type\": \"PrimitiveInt\", \"inputs\": {\"value\": 18446744073709551615}},"
                 " \"9\": {\"class_type\": \"PrimitiveInt\", \"inputs\": {\"value\": -5}}", &s);
    ok(v && v->kind == VALUE_INT && value_i64(v) == -5, "PrimitiveInt passes its value");
    value_unref(v);
    sink_clear(&s);
    graph_free(g);
}

int main(void)
{
    struct tdirs d;
    tdirs_make(&d);
    long live0 = alloc_live_count();
    test_values();
    test_registry();
    test_imageio(&d);
    test_resize();
    test_gif(&d);
    test_pipeline(&d);
    test_small_nodes(&d);
    EXPECT_EQ(alloc_live_count(), live0);
    tdirs_remove(&d);
    return harness_done();
}

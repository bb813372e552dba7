#include "buf.h"
#include "srv_image.h"

#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#include "alloc.h"

/* PIL's decompression-bomb limit (2 x MAX_IMAGE_PIXELS), which ComfyUI's upload routes
 * inherit: a 600-byte JPEG declaring 19000 x 19000 pixels cost 2.9 GB and 6 s before
 * (found with tests/fuzz/fuzz_upload_image). */
#define SRV_IMAGE_MAX_PIXELS 178956970ull

/*
 * 1 when every chunk of the PNG in p[0..n) fits in the buffer (up to IEND or the end;
 * with `header_only`, up to the first IDAT: all that png_read_info reads).
 * libpng allocates and zeroes a chunk's declared length before reading it, so a
 * 200-byte upload declaring a 1.9 GB zTXt chunk cost 1.9 GB and 2 s per request (found
 * with tests/fuzz/fuzz_upload_image). Bytes in memory cannot hold a longer chunk, so
 * such a file is truncated or corrupt either way.
 */
static int png_chunks_fit(const unsigned char *b, size_t n, int header_only)
{
    size_t off = 8; /* after the signature */
    while (n - off >= 12) {
        uint32_t len = (uint32_t)b[off] << 24 | (uint32_t)b[off + 1] << 16 |
                       (uint32_t)b[off + 2] << 8 | b[off + 3];
        if (header_only && memcmp(b + off + 4, "IDAT", 4) == 0)
            break;
        if (len > n - off - 12)
            return 0;
        if (memcmp(b + off + 4, "IEND", 4) == 0)
            break;
        off += 12 + (size_t)len;
    }
    return 1;
}

static int decode_png(const void *p, size_t n, struct srv_image *out, struct err *e)
{
    if (!png_chunks_fit(p, n, 0))
        return err_set(e, ERR_INVALID, "cannot decode PNG: a chunk runs past the end of the file");
    png_image im;
    memset(&im, 0, sizeof(im));
    im.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&im, p, n))
        return err_set(e, ERR_INVALID, "cannot decode PNG: %s", im.message);
    out->had_alpha = (im.format & PNG_FORMAT_FLAG_ALPHA) != 0;
    im.format = PNG_FORMAT_RGBA;
    if (im.width > 32768 || im.height > 32768 ||
        (uint64_t)im.width * im.height > SRV_IMAGE_MAX_PIXELS) {
        png_image_free(&im);
        return err_set(e, ERR_TOO_LARGE, "image is too large (%ux%u)", im.width, im.height);
    }
    out->w = (int)im.width;
    out->h = (int)im.height;
    out->channels = 4;
    out->px = xmalloc(PNG_IMAGE_SIZE(im));
    if (!png_image_finish_read(&im, NULL, out->px, 0, NULL)) {
        xfree(out->px);
        out->px = NULL;
        return err_set(e, ERR_INVALID, "cannot decode PNG: %s", im.message);
    }
    return 0;
}

struct jerr {
    struct jpeg_error_mgr mgr;
    jmp_buf jb;
    int failed;
};

/* libjpeg's default error_exit calls exit(); unwind to the caller's setjmp instead. */
static void jpeg_fail(j_common_ptr c)
{
    struct jerr *je = (struct jerr *)c->err;
    je->failed = 1;
    longjmp(je->jb, 1);
}

/* Warnings are silent, except a premature end of data: libjpeg would go on and fill every
 * remaining row, so a few bytes declaring a huge image cost its full size in memory and
 * time. PIL refuses truncated images too ("image file is truncated"). */
static void jpeg_silent(j_common_ptr c, int level)
{
    if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF)
        jpeg_fail(c);
}

static int decode_jpeg(const void *p, size_t n, struct srv_image *out, struct err *e)
{
    struct jpeg_decompress_struct d;
    struct jerr je;
    memset(&je, 0, sizeof(je));
    d.err = jpeg_std_error(&je.mgr);
    je.mgr.error_exit = jpeg_fail;
    je.mgr.emit_message = jpeg_silent;
    uint8_t *volatile rgb = NULL;
    jpeg_create_decompress(&d);
    if (setjmp(je.jb)) {
        jpeg_destroy_decompress(&d);
        xfree(rgb);
        return err_set(e, ERR_INVALID, "cannot decode JPEG");
    }
    jpeg_mem_src(&d, (const unsigned char *)p, (unsigned long)n);
    if (jpeg_read_header(&d, TRUE) != JPEG_HEADER_OK || je.failed) {
        jpeg_destroy_decompress(&d);
        return err_set(e, ERR_INVALID, "cannot decode JPEG");
    }
    /* Before jpeg_start_decompress: for a progressive file it allocates the whole
     * image's coefficients. */
    if ((uint64_t)d.image_width * d.image_height > SRV_IMAGE_MAX_PIXELS) {
        jpeg_destroy_decompress(&d);
        return err_set(e, ERR_TOO_LARGE, "image is too large (%ux%u)", d.image_width,
                       d.image_height);
    }
    d.out_color_space = JCS_RGB;
    jpeg_start_decompress(&d);
    if (je.failed || d.output_width > 32768 || d.output_height > 32768 ||
        (uint64_t)d.output_width * d.output_height > SRV_IMAGE_MAX_PIXELS) {
        jpeg_destroy_decompress(&d);
        return err_set(e, ERR_INVALID, "cannot decode JPEG");
    }
    int w = (int)d.output_width, h = (int)d.output_height;
    rgb = xmalloc((size_t)w * h * 3);
    while (d.output_scanline < d.output_height && !je.failed) {
        JSAMPROW row = rgb + (size_t)d.output_scanline * w * 3;
        if (jpeg_read_scanlines(&d, &row, 1) != 1)
            break;
    }
    int ok = !je.failed && d.output_scanline == d.output_height;
    if (ok)
        jpeg_finish_decompress(&d);
    jpeg_destroy_decompress(&d);
    if (!ok) {
        xfree(rgb);
        return err_set(e, ERR_INVALID, "cannot decode JPEG");
    }
    out->w = w;
    out->h = h;
    out->channels = 4;
    out->had_alpha = 0;
    out->px = xmalloc((size_t)w * h * 4);
    for (size_t i = 0; i < (size_t)w * h; i++) {
        memcpy(out->px + i * 4, rgb + i * 3, 3);
        out->px[i * 4 + 3] = 255;
    }
    xfree(rgb);
    return 0;
}

int srv_image_decode(const void *p, size_t n, struct srv_image *out, struct err *e)
{
    memset(out, 0, sizeof(*out));
    const unsigned char *b = p;
    if (n >= 8 && memcmp(b, "\x89PNG\r\n\x1a\n", 8) == 0)
        return decode_png(p, n, out, e);
    if (n >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff)
        return decode_jpeg(p, n, out, e);
    return err_set(e, ERR_UNSUPPORTED, "not a PNG or JPEG image");
}

int srv_image_load(const char *path, struct srv_image *out, struct err *e)
{
    memset(out, 0, sizeof(*out));
    FILE *f = fopen(path, "rb");
    if (!f)
        return err_set(e, ERR_NOT_FOUND, "cannot open '%s'", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (n <= 0 || n > (1L << 30)) {
        fclose(f);
        return err_set(e, ERR_INVALID, "cannot read '%s'", path);
    }
    void *p = xmalloc((size_t)n);
    size_t got = fread(p, 1, (size_t)n, f);
    fclose(f);
    int rc = got == (size_t)n ? srv_image_decode(p, (size_t)n, out, e)
                              : err_set(e, ERR_IO, "cannot read '%s'", path);
    xfree(p);
    return rc;
}

void srv_image_release(struct srv_image *img)
{
    xfree(img->px);
    memset(img, 0, sizeof(*img));
}

void srv_image_alpha_only(struct srv_image *img)
{
    for (size_t i = 0; i < (size_t)img->w * img->h; i++) {
        uint8_t *q = img->px + i * 4;
        q[0] = q[1] = q[2] = 0;
        if (!img->had_alpha)
            q[3] = 255;
    }
}

int srv_image_drop_alpha(struct srv_image *img)
{
    if (img->channels == 4)
        for (size_t i = 0; i < (size_t)img->w * img->h; i++)
            memmove(img->px + i * 3, img->px + i * 4, 3);
    img->channels = 3;
    return 3;
}

void srv_image_set_alpha_from(struct srv_image *img, const struct srv_image *mask)
{
    for (size_t i = 0; i < (size_t)img->w * img->h; i++)
        img->px[i * 4 + 3] = mask->px[i * 4 + 3];
}

void srv_image_png(const struct srv_image *img, int want_channels, void **out, size_t *n)
{
    (void)want_channels;
    *out = NULL;
    *n = 0;
    png_image im;
    memset(&im, 0, sizeof(im));
    im.version = PNG_IMAGE_VERSION;
    im.width = (png_uint_32)img->w;
    im.height = (png_uint_32)img->h;
    im.format = img->channels == 4 ? PNG_FORMAT_RGBA : PNG_FORMAT_RGB;
    png_alloc_size_t size = 0;
    if (!png_image_write_to_memory(&im, NULL, &size, 0, img->px, 0, NULL))
        return;
    void *buf = xmalloc(size);
    if (!png_image_write_to_memory(&im, buf, &size, 0, img->px, 0, NULL)) {
        xfree(buf);
        return;
    }
    *out = buf;
    *n = size;
}

void srv_image_jpeg(const struct srv_image *img, int quality, void **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    struct jpeg_compress_struct c;
    struct jerr je;
    memset(&je, 0, sizeof(je));
    c.err = jpeg_std_error(&je.mgr);
    je.mgr.error_exit = jpeg_fail;
    je.mgr.emit_message = jpeg_silent;
    unsigned char *mem = NULL;
    unsigned long mem_n = 0;
    uint8_t *volatile row = NULL;
    jpeg_create_compress(&c);
    if (setjmp(je.jb)) {
        jpeg_destroy_compress(&c);
        xfree(row);
        free(mem);
        return;
    }
    jpeg_mem_dest(&c, &mem, &mem_n);
    c.image_width = (JDIMENSION)img->w;
    c.image_height = (JDIMENSION)img->h;
    c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, quality, TRUE);
    jpeg_start_compress(&c, TRUE);
    row = xmalloc((size_t)img->w * 3);
    for (int y = 0; y < img->h && !je.failed; y++) {
        const uint8_t *src = img->px + (size_t)y * img->w * img->channels;
        for (int x = 0; x < img->w; x++)
            memcpy(row + x * 3, src + x * img->channels, 3);
        JSAMPROW rp = row;
        jpeg_write_scanlines(&c, &rp, 1);
    }
    xfree(row);
    if (!je.failed)
        jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    if (!je.failed && mem) {
        *out = xmalloc(mem_n);
        memcpy(*out, mem, mem_n);
        *n = mem_n;
    }
    free(mem); /* allocated by libjpeg with malloc */
}

/* ---- full libpng API: text chunks ------------------------------------------------------ */

struct png_mem {
    const unsigned char *p;
    size_t n, off;
};

static void png_mem_read(png_structp png, png_bytep dst, png_size_t len)
{
    struct png_mem *m = png_get_io_ptr(png);
    if (m->off + len > m->n)
        png_error(png, "truncated PNG");
    memcpy(dst, m->p + m->off, len);
    m->off += len;
}

int srv_png_text_read(const void *p, size_t n, struct srv_png_text **out)
{
    *out = NULL;
    if (n < 8 || memcmp(p, "\x89PNG\r\n\x1a\n", 8) != 0 || !png_chunks_fit(p, n, 1))
        return 0;
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return 0;
    }
    struct png_mem m = {p, n, 0};
    struct srv_png_text *volatile res = NULL;
    volatile int count = 0;
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, NULL);
        *out = res;
        return count;
    }
    png_set_read_fn(png, &m, png_mem_read);
    png_read_info(png, info);
    png_textp text = NULL;
    int nt = 0;
    png_get_text(png, info, &text, &nt);
    if (nt > 0) {
        res = xcalloc((size_t)nt, sizeof(*res));
        for (int i = 0; i < nt; i++) {
            res[i].key = xstrdup(text[i].key);
            res[i].text = xstrndup(text[i].text ? text[i].text : "", text[i].text_length);
            count = i + 1;
        }
    }
    png_destroy_read_struct(&png, &info, NULL);
    *out = res;
    return count;
}

void srv_png_text_free(struct srv_png_text *t, int count)
{
    for (int i = 0; i < count; i++) {
        xfree(t[i].key);
        xfree(t[i].text);
    }
    xfree(t);
}

static void png_mem_write(png_structp png, png_bytep data, png_size_t len)
{
    struct buf *b = png_get_io_ptr(png);
    buf_add(b, data, len);
}

static void png_mem_flush(png_structp png)
{
    (void)png;
}

void srv_image_png_ex(const struct srv_image *img, int level, const struct srv_png_text *t,
                      int count, void **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_write_struct(&png, NULL);
        return;
    }
    struct buf b;
    buf_init(&b);
    png_textp volatile texts = count > 0 ? xcalloc((size_t)count, sizeof(png_text)) : NULL;
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        xfree(texts);
        buf_release(&b);
        return;
    }
    png_set_write_fn(png, &b, png_mem_write, png_mem_flush);
    png_set_compression_level(png, level);
    png_set_IHDR(png, info, (png_uint_32)img->w, (png_uint_32)img->h, 8,
                 img->channels == 4 ? PNG_COLOR_TYPE_RGBA : PNG_COLOR_TYPE_RGB,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    for (int i = 0; i < count; i++) {
        texts[i].compression = PNG_TEXT_COMPRESSION_NONE;
        texts[i].key = t[i].key;
        texts[i].text = t[i].text;
        texts[i].text_length = strlen(t[i].text);
    }
    if (count > 0)
        png_set_text(png, info, texts, count);
    png_write_info(png, info);
    for (int y = 0; y < img->h; y++)
        png_write_row(png, img->px + (size_t)y * img->w * img->channels);
    png_write_end(png, info);
    png_destroy_write_struct(&png, &info);
    xfree(texts);
    *n = b.len;
    *out = buf_detach(&b, NULL);
}

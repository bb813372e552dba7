#include "node_imageio.h"

#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jpeglib.h>
#include <jerror.h>

#include "afile.h"
#include "alloc.h"
#include "node_gif.h"

void node_image_file_release(struct node_image_file *f)
{
    for (int i = 0; i < f->n_frames; i++)
        xfree(f->frames[i].px);
    xfree(f->frames);
    f->frames = NULL;
    f->n_frames = 0;
}

/* PIL's decompression-bomb limit (2 x MAX_IMAGE_PIXELS), which ComfyUI inherits. */
static int bomb_error(struct err *e, const char *path, uint64_t px)
{
    return err_set(e, ERR_TOO_LARGE,
                   "cannot decode '%s': Image size (%llu pixels) exceeds limit of %llu pixels, could be "
                   "decompression bomb DOS attack.",
                   path, (unsigned long long)px, (unsigned long long)NODE_IMAGE_MAX_PIXELS);
}

/* ---- EXIF ------------------------------------------------------------------------ */

static unsigned rd16(const uint8_t *p, int le)
{
    return le ? (unsigned)(p[0] | p[1] << 8) : (unsigned)(p[0] << 8 | p[1]);
}

static uint32_t rd32(const uint8_t *p, int le)
{
    return le ? (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24
              : (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* Orientation tag (0x0112) of a TIFF-structured EXIF block; 1 when absent. */
static int exif_orientation(const uint8_t *t, size_t n)
{
    if (n < 8)
        return 1;
    int le;
    if (t[0] == 'I' && t[1] == 'I')
        le = 1;
    else if (t[0] == 'M' && t[1] == 'M')
        le = 0;
    else
        return 1;
    uint32_t ifd = rd32(t + 4, le);
    if (ifd > n - 2)
        return 1;
    unsigned cnt = rd16(t + ifd, le);
    for (unsigned i = 0; i < cnt; i++) {
        size_t off = ifd + 2 + 12 * (size_t)i;
        if (off + 12 > n)
            break;
        if (rd16(t + off, le) == 0x0112) {
            unsigned v = rd16(t + off + 8, le);
            return v >= 1 && v <= 8 ? (int)v : 1;
        }
    }
    return 1;
}

void node_pixels_orient(struct node_pixels *p, int o)
{
    if (o <= 1 || o > 8)
        return;
    int W = p->w, H = p->h, C = p->c;
    int swap = o >= 5;
    int ow = swap ? H : W, oh = swap ? W : H;
    uint8_t *dst = xmalloc((size_t)ow * oh * C);
    for (int y = 0; y < oh; y++) {
        for (int x = 0; x < ow; x++) {
            int sx, sy;
            switch (o) {
            case 2: sx = W - 1 - x; sy = y; break;
            case 3: sx = W - 1 - x; sy = H - 1 - y; break;
            case 4: sx = x; sy = H - 1 - y; break;
            case 5: sx = y; sy = x; break;
            case 6: sx = y; sy = H - 1 - x; break;
            case 7: sx = W - 1 - y; sy = H - 1 - x; break;
            default: sx = W - 1 - y; sy = x; break; /* 8 */
            }
            memcpy(dst + ((size_t)y * ow + x) * C, p->px + ((size_t)sy * W + sx) * C, (size_t)C);
        }
    }
    xfree(p->px);
    p->px = dst;
    p->w = ow;
    p->h = oh;
}

/* ---- PNG ------------------------------------------------------------------------- */

struct png_err {
    char msg[200];
};

static void png_on_error(png_structp png, png_const_charp msg)
{
    struct png_err *pe = png_get_error_ptr(png);
    snprintf(pe->msg, sizeof(pe->msg), "%s", msg);
    png_longjmp(png, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;
}

/*
 * 1 when every chunk of the PNG file `f` fits inside the file (up to IEND or the end).
 * libpng allocates and zeroes a chunk's declared length before reading it, so a 200-byte
 * file declaring a 1.9 GB zTXt chunk cost 1.9 GB (found with tests/fuzz/fuzz_image_load).
 * Leaves `f` rewound.
 */
static int png_chunks_fit(FILE *f)
{
    struct stat st;
    int ok = 1;
    if (fstat(fileno(f), &st) < 0)
        return 1; /* libpng's own checks still apply */
    uint64_t size = (uint64_t)st.st_size, off = 8;
    uint8_t h[8];
    while (size >= off + 12 && fseeko(f, (off_t)off, SEEK_SET) == 0 && fread(h, 1, 8, f) == 8) {
        uint64_t len = (uint64_t)h[0] << 24 | (uint64_t)h[1] << 16 | (uint64_t)h[2] << 8 | h[3];
        if (len > size - off - 12) {
            ok = 0;
            break;
        }
        if (memcmp(h + 4, "IEND", 4) == 0)
            break;
        off += 12 + len;
    }
    rewind(f);
    return ok;
}

static int load_png(FILE *f, const char *path, struct node_image_file *out, struct err *e)
{
    if (!png_chunks_fit(f))
        return err_set(e, ERR_INVALID, "cannot decode '%s': a chunk runs past the end of the file",
                       path);
    struct png_err pe = {{0}};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &pe, png_on_error, png_on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    uint8_t *volatile px = NULL;
    png_bytep *volatile rows = NULL;
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return err_set(e, ERR_INTERNAL, "cannot initialise libpng");
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, NULL);
        xfree(px);
        xfree(rows);
        return err_set(e, ERR_INVALID, "cannot decode '%s': %s", path, pe.msg);
    }
    png_set_user_limits(png, 1 << 15, 1 << 15);
    png_init_io(png, f);
    png_read_info(png, info);
    png_set_expand(png);   /* palette -> RGB, low-bit gray -> 8, tRNS -> alpha */
    png_set_strip_16(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    int w = (int)png_get_image_width(png, info), h = (int)png_get_image_height(png, info);
    if ((uint64_t)w * (uint64_t)h > NODE_IMAGE_MAX_PIXELS) {
        png_destroy_read_struct(&png, &info, NULL);
        return bomb_error(e, path, (uint64_t)w * (uint64_t)h);
    }
    int c = png_get_channels(png, info);
    size_t stride = png_get_rowbytes(png, info);
    if (stride != (size_t)w * c)
        png_error(png, "unexpected row size");
    px = xmalloc(stride * h);
    rows = xmalloc(sizeof(png_bytep) * h);
    for (int y = 0; y < h; y++)
        rows[y] = px + stride * y;
    png_read_image(png, rows);
    png_read_end(png, info);
    int orient = 1;
#ifdef PNG_eXIf_SUPPORTED
    png_bytep exif = NULL;
    png_uint_32 nexif = 0;
    if (png_get_eXIf_1(png, info, &nexif, &exif) && exif)
        orient = exif_orientation(exif, nexif);
#endif
    png_destroy_read_struct(&png, &info, NULL);
    xfree(rows);
    out->frames = xcalloc(1, sizeof(*out->frames));
    out->n_frames = 1;
    out->frames[0] = (struct node_pixels){w, h, c, px};
    node_pixels_orient(&out->frames[0], orient);
    return 0;
}

/* ---- JPEG ------------------------------------------------------------------------ */

struct jerr {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
};

static void jpeg_on_error(j_common_ptr cinfo)
{
    struct jerr *je = (struct jerr *)cinfo->err;
    cinfo->err->format_message(cinfo, je->msg);
    longjmp(je->jb, 1);
}

static int load_jpeg(FILE *f, const char *path, struct node_image_file *out, struct err *e)
{
    struct jpeg_decompress_struct ci;
    struct jerr je;
    uint8_t *volatile px = NULL;
    ci.err = jpeg_std_error(&je.pub);
    je.pub.error_exit = jpeg_on_error;
    if (setjmp(je.jb)) {
        jpeg_destroy_decompress(&ci);
        xfree(px);
        return err_set(e, ERR_INVALID, "cannot decode '%s': %s", path, je.msg);
    }
    jpeg_create_decompress(&ci);
    jpeg_stdio_src(&ci, f);
    jpeg_save_markers(&ci, JPEG_APP0 + 1, 0xffff);
    jpeg_read_header(&ci, TRUE);
    int orient = 1;
    for (jpeg_saved_marker_ptr m = ci.marker_list; m; m = m->next)
        if (m->marker == JPEG_APP0 + 1 && m->data_length > 6 && !memcmp(m->data, "Exif\0\0", 6))
            orient = exif_orientation(m->data + 6, m->data_length - 6);
    if (ci.jpeg_color_space == JCS_CMYK || ci.jpeg_color_space == JCS_YCCK) {
        jpeg_destroy_decompress(&ci);
        return err_set(e, ERR_UNSUPPORTED, "cannot decode '%s': CMYK JPEG is not supported", path);
    }
    /* The limit is checked on the header, as PIL does at open: jpeg_start_decompress
     * already allocates a progressive file's whole coefficient buffer (a 300-byte file
     * declaring 16000x16000 cost 750 MB; seen while fuzzing, now in tests/fuzz/corpus). */
    if ((uint64_t)ci.image_width * ci.image_height > NODE_IMAGE_MAX_PIXELS) {
        uint64_t npx = (uint64_t)ci.image_width * ci.image_height;
        jpeg_destroy_decompress(&ci);
        return bomb_error(e, path, npx);
    }
    ci.out_color_space = ci.num_components == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_start_decompress(&ci);
    int w = (int)ci.output_width, h = (int)ci.output_height, c = ci.output_components;
    if ((uint64_t)w * (uint64_t)h > NODE_IMAGE_MAX_PIXELS) {
        jpeg_destroy_decompress(&ci);
        return bomb_error(e, path, (uint64_t)w * (uint64_t)h);
    }
    px = xmalloc((size_t)w * h * c);
    while (ci.output_scanline < ci.output_height) {
        JSAMPROW row = px + (size_t)ci.output_scanline * w * c;
        jpeg_read_scanlines(&ci, &row, 1);
    }
    jpeg_finish_decompress(&ci);
    jpeg_destroy_decompress(&ci);
    out->frames = xcalloc(1, sizeof(*out->frames));
    out->n_frames = 1;
    out->frames[0] = (struct node_pixels){w, h, c, px};
    node_pixels_orient(&out->frames[0], orient);
    return 0;
}

static int load_gif(FILE *f, const char *path, struct node_image_file *out, struct err *e)
{
    if (fseek(f, 0, SEEK_END) < 0)
        return err_set(e, ERR_IO, "cannot read '%s'", path);
    long n = ftell(f);
    rewind(f);
    if (n <= 0 || n > (1L << 30))
        return err_set(e, ERR_INVALID, "cannot decode '%s': bad GIF size", path);
    uint8_t *data = xmalloc((size_t)n);
    int rc;
    if (fread(data, 1, (size_t)n, f) != (size_t)n)
        rc = err_set(e, ERR_IO, "cannot read '%s'", path);
    else
        rc = node__gif_load(data, (size_t)n, path, out, e);
    xfree(data);
    return rc;
}

int node_image_load(const char *path, struct node_image_file *out, struct err *e)
{
    memset(out, 0, sizeof(*out));
    FILE *f = fopen(path, "rb");
    if (!f)
        return err_set(e, ERR_IO, "cannot open '%s'", path);
    uint8_t sig[8] = {0};
    size_t n = fread(sig, 1, sizeof(sig), f);
    rewind(f);
    int rc;
    if (n == 8 && !png_sig_cmp(sig, 0, 8))
        rc = load_png(f, path, out, e);
    else if (n >= 3 && sig[0] == 0xff && sig[1] == 0xd8 && sig[2] == 0xff)
        rc = load_jpeg(f, path, out, e);
    else if (n >= 6 && !memcmp(sig, "GIF8", 4))
        rc = load_gif(f, path, out, e);
    else
        rc = err_set(e, ERR_UNSUPPORTED, "cannot identify image file '%s'", path);
    fclose(f);
    return rc;
}

/*
 * The one PNG encoder: IHDR, the tEXt chunks (after IHDR, before IDAT, in order, as
 * ComfyUI writes them), the rows. `png` has its output set; errors longjmp to the
 * caller's setjmp, which frees *tx.
 */
static void png_write_pixels(png_structp png, png_infop info, const uint8_t *px, int w, int h,
                             int c, int level, const struct node_text_chunk *text, int n_text,
                             png_textp volatile *tx)
{
    png_set_compression_level(png, level);
    int ct = c == 4 ? PNG_COLOR_TYPE_RGBA : c == 3 ? PNG_COLOR_TYPE_RGB
             : c == 2 ? PNG_COLOR_TYPE_GRAY_ALPHA : PNG_COLOR_TYPE_GRAY;
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, 8, ct, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    if (n_text > 0) {
        *tx = xcalloc((size_t)n_text, sizeof(png_text));
        for (int i = 0; i < n_text; i++) {
            (*tx)[i].compression = PNG_TEXT_COMPRESSION_NONE;
            (*tx)[i].key = (png_charp)text[i].key;
            (*tx)[i].text = (png_charp)text[i].value;
            (*tx)[i].text_length = strlen(text[i].value);
        }
        png_set_text(png, info, *tx, n_text);
    }
    png_write_info(png, info);
    for (int y = 0; y < h; y++)
        png_write_row(png, (png_const_bytep)(px + (size_t)y * w * c));
    png_write_end(png, NULL);
}

int node_png_write(const char *path, const uint8_t *px, int w, int h, int c, int level,
                   const struct node_text_chunk *text, int n_text, struct err *e)
{
    /* A temporary renamed into place: a full disk leaves no 0-byte or half PNG behind. */
    struct afile af;
    int rc = afile_open(&af, path, e);
    if (rc < 0)
        return rc;
    struct png_err pe = {{0}};
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &pe, png_on_error, png_on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    png_textp volatile tx = NULL;
    if (!info) {
        png_destroy_write_struct(&png, NULL);
        afile_abort(&af);
        return err_set(e, ERR_INTERNAL, "cannot initialise libpng");
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        afile_abort(&af);
        xfree(tx);
        return err_set(e, ERR_IO, "cannot write '%s': %s", path, pe.msg);
    }
    png_init_io(png, af.fp);
    png_write_pixels(png, info, px, w, h, c, level, text, n_text, &tx);
    png_destroy_write_struct(&png, &info);
    xfree(tx);
    return afile_commit(&af, e);
}

static void png_to_buf(png_structp png, png_bytep data, png_size_t n)
{
    buf_add(png_get_io_ptr(png), data, n);
}

static void png_flush_none(png_structp png)
{
    (void)png;
}

int node_png_encode_text(const uint8_t *px, int w, int h, int c, int level,
                         const struct node_text_chunk *text, int n_text, struct buf *out)
{
    struct png_err pe = {{0}};
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &pe, png_on_error, png_on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    png_textp volatile tx = NULL;
    if (!info) {
        png_destroy_write_struct(&png, NULL);
        return ERR_INTERNAL;
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        xfree(tx);
        return ERR_INTERNAL;
    }
    png_set_write_fn(png, out, png_to_buf, png_flush_none);
    png_write_pixels(png, info, px, w, h, c, level, text, n_text, &tx);
    png_destroy_write_struct(&png, &info);
    xfree(tx);
    return 0;
}

int node_png_encode(const uint8_t *px, int w, int h, int c, int level, struct buf *out)
{
    return node_png_encode_text(px, w, h, c, level, NULL, 0, out);
}

/* The one JPEG encoder (4:2:0, libjpeg's defaults at `quality`); c = 3, or 4 with the
 * alpha dropped, as PIL drops it when ComfyUI saves an RGBA preview as JPEG. */
int node_jpeg_encode(const uint8_t *px, int w, int h, int c, int quality, uint8_t **out,
                     size_t *n)
{
    *out = NULL;
    *n = 0;
    if (w <= 0 || h <= 0 || (c != 3 && c != 4))
        return ERR_INVALID;
    struct jpeg_compress_struct ci;
    struct jerr je;
    unsigned char *mem = NULL;
    unsigned long memn = 0;
    uint8_t *volatile row = NULL;
    ci.err = jpeg_std_error(&je.pub);
    je.pub.error_exit = jpeg_on_error;
    if (setjmp(je.jb)) {
        jpeg_destroy_compress(&ci);
        free(mem); /* allocated by libjpeg with malloc */
        xfree(row);
        return ERR_INTERNAL;
    }
    jpeg_create_compress(&ci);
    jpeg_mem_dest(&ci, &mem, &memn);
    ci.image_width = (JDIMENSION)w;
    ci.image_height = (JDIMENSION)h;
    ci.input_components = 3;
    ci.in_color_space = JCS_RGB;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, quality, TRUE);
    jpeg_start_compress(&ci, TRUE);
    row = xmalloc((size_t)w * 3);
    while (ci.next_scanline < ci.image_height) {
        const uint8_t *src = px + (size_t)ci.next_scanline * w * c;
        for (int x = 0; x < w; x++)
            memcpy(row + (size_t)x * 3, src + (size_t)x * c, 3);
        JSAMPROW rp = row;
        jpeg_write_scanlines(&ci, &rp, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    xfree(row);
    *out = xmalloc(memn);
    memcpy(*out, mem, memn);
    *n = memn;
    free(mem);
    return 0;
}

int node_imageio_preview_jpeg(const uint8_t *rgb, int w, int h, int size, uint8_t **out, size_t *n)
{
    if (w <= 0 || h <= 0)
        return ERR_INVALID;
    if (size <= 0)
        size = 512;
    /* Fit inside size x size, up or down (nearest neighbour: it is a preview). */
    double s = (double)size / (w > h ? w : h);
    int ow = (int)(w * s + 0.5), oh = (int)(h * s + 0.5);
    if (ow < 1)
        ow = 1;
    if (oh < 1)
        oh = 1;
    uint8_t *px = xmalloc((size_t)ow * oh * 3);
    for (int y = 0; y < oh; y++) {
        int sy = (int)((y + 0.5) * h / oh);
        for (int x = 0; x < ow; x++) {
            int sx = (int)((x + 0.5) * w / ow);
            memcpy(px + ((size_t)y * ow + x) * 3, rgb + ((size_t)sy * w + sx) * 3, 3);
        }
    }
    int rc = node_jpeg_encode(px, ow, oh, 3, 95, out, n);
    xfree(px);
    return rc;
}

/* ---- in memory: the server's uploads and /view -------------------------------------- */

/*
 * 1 when every chunk of the PNG in b[0..n) fits in the buffer (up to IEND or the end;
 * with `header_only`, up to the first IDAT: all that png_read_info reads). The memory
 * twin of png_chunks_fit above, for the same reason: a 200-byte upload declaring a
 * 1.9 GB zTXt chunk cost 1.9 GB and 2 s per request (tests/fuzz/fuzz_upload_image).
 */
static int png_chunks_fit_mem(const unsigned char *b, size_t n, int header_only)
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

static int decode_png_rgba(const void *p, size_t n, struct node_pixels *out, int *had_alpha,
                           struct err *e)
{
    if (!png_chunks_fit_mem(p, n, 0))
        return err_set(e, ERR_INVALID, "cannot decode PNG: a chunk runs past the end of the file");
    png_image im;
    memset(&im, 0, sizeof(im));
    im.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&im, p, n))
        return err_set(e, ERR_INVALID, "cannot decode PNG: %s", im.message);
    *had_alpha = (im.format & PNG_FORMAT_FLAG_ALPHA) != 0;
    im.format = PNG_FORMAT_RGBA;
    if (im.width > 32768 || im.height > 32768 ||
        (uint64_t)im.width * im.height > NODE_IMAGE_MAX_PIXELS) {
        png_image_free(&im);
        return err_set(e, ERR_TOO_LARGE, "image is too large (%ux%u)", im.width, im.height);
    }
    uint8_t *px = xmalloc(PNG_IMAGE_SIZE(im));
    if (!png_image_finish_read(&im, NULL, px, 0, NULL)) {
        xfree(px);
        return err_set(e, ERR_INVALID, "cannot decode PNG: %s", im.message);
    }
    *out = (struct node_pixels){(int)im.width, (int)im.height, 4, px};
    return 0;
}

/* Warnings are silent, except a premature end of data: libjpeg would go on and fill every
 * remaining row, so a few bytes declaring a huge image cost its full size in memory and
 * time. PIL refuses truncated uploads too ("image file is truncated"). */
static void jpeg_eof_fails(j_common_ptr c, int level)
{
    if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF)
        c->err->error_exit(c);
}

static int decode_jpeg_rgba(const void *p, size_t n, struct node_pixels *out, int *had_alpha,
                            struct err *e)
{
    struct jpeg_decompress_struct d;
    struct jerr je;
    d.err = jpeg_std_error(&je.pub);
    je.pub.error_exit = jpeg_on_error;
    je.pub.emit_message = jpeg_eof_fails;
    uint8_t *volatile px = NULL;
    jpeg_create_decompress(&d);
    if (setjmp(je.jb)) {
        jpeg_destroy_decompress(&d);
        xfree(px);
        return err_set(e, ERR_INVALID, "cannot decode JPEG");
    }
    jpeg_mem_src(&d, (const unsigned char *)p, (unsigned long)n);
    if (jpeg_read_header(&d, TRUE) != JPEG_HEADER_OK) {
        jpeg_destroy_decompress(&d);
        return err_set(e, ERR_INVALID, "cannot decode JPEG");
    }
    /* Before jpeg_start_decompress: for a progressive file it allocates the whole
     * image's coefficients. */
    if ((uint64_t)d.image_width * d.image_height > NODE_IMAGE_MAX_PIXELS) {
        jpeg_destroy_decompress(&d);
        return err_set(e, ERR_TOO_LARGE, "image is too large (%ux%u)", d.image_width,
                       d.image_height);
    }
    d.out_color_space = JCS_RGB;
    jpeg_start_decompress(&d);
    if (d.output_width > 32768 || d.output_height > 32768 ||
        (uint64_t)d.output_width * d.output_height > NODE_IMAGE_MAX_PIXELS) {
        jpeg_destroy_decompress(&d);
        return err_set(e, ERR_INVALID, "cannot decode JPEG");
    }
    int w = (int)d.output_width, h = (int)d.output_height;
    px = xmalloc((size_t)w * h * 4);
    /* Each RGB row is read into the end of its RGBA row and widened forwards in place:
     * pixel x's source (3x) is never behind its destination (4x). */
    while (d.output_scanline < d.output_height) {
        uint8_t *dst = px + (size_t)d.output_scanline * w * 4;
        JSAMPROW row = dst + (size_t)w;
        if (jpeg_read_scanlines(&d, &row, 1) != 1)
            break;
        for (int x = 0; x < w; x++) {
            uint8_t r = row[x * 3], g = row[x * 3 + 1], b = row[x * 3 + 2];
            dst[x * 4] = r;
            dst[x * 4 + 1] = g;
            dst[x * 4 + 2] = b;
            dst[x * 4 + 3] = 255;
        }
    }
    int ok = d.output_scanline == d.output_height;
    if (ok)
        jpeg_finish_decompress(&d);
    jpeg_destroy_decompress(&d);
    if (!ok) {
        xfree(px);
        return err_set(e, ERR_INVALID, "cannot decode JPEG");
    }
    *had_alpha = 0;
    *out = (struct node_pixels){w, h, 4, px};
    return 0;
}

int node_image_decode_rgba(const void *p, size_t n, struct node_pixels *out, int *had_alpha,
                           struct err *e)
{
    memset(out, 0, sizeof(*out));
    *had_alpha = 0;
    const unsigned char *b = p;
    if (n >= 8 && memcmp(b, "\x89PNG\r\n\x1a\n", 8) == 0)
        return decode_png_rgba(p, n, out, had_alpha, e);
    if (n >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff)
        return decode_jpeg_rgba(p, n, out, had_alpha, e);
    return err_set(e, ERR_UNSUPPORTED, "not a PNG or JPEG image");
}

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

int node_png_text_read(const void *p, size_t n, struct node_png_text **out)
{
    *out = NULL;
    if (n < 8 || memcmp(p, "\x89PNG\r\n\x1a\n", 8) != 0 || !png_chunks_fit_mem(p, n, 1))
        return 0;
    struct png_err pe = {{0}};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &pe, png_on_error, png_on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return 0;
    }
    struct png_mem m = {p, n, 0};
    struct node_png_text *volatile res = NULL;
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

void node_png_text_free(struct node_png_text *t, int count)
{
    for (int i = 0; i < count; i++) {
        xfree(t[i].key);
        xfree(t[i].text);
    }
    xfree(t);
}

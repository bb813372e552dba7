#include "node_imageio.h"

#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#include "afile.h"
#include "alloc.h"
#include "node_apng_read.h"
#include "node_gif.h"

void node_image_file_release(struct node_image_file *f)
{
    for (int i = 0; i < f->n_frames; i++)
        xfree(f->frames[i].px);
    xfree(f->frames);
    f->frames = NULL;
    f->n_frames = 0;
}

/* PIL's decompression-bomb limit (2 x MAX_IMAGE_PIXELS), which ComfyUI inherits.
 * `subject` names the input as decode_req does. */
static int bomb_error(struct err *e, const char *subject, uint64_t px)
{
    return err_set(e, ERR_TOO_LARGE,
                   "cannot decode %s: Image size (%llu pixels) exceeds limit of %llu pixels, could be "
                   "decompression bomb DOS attack.",
                   subject, (unsigned long long)px, (unsigned long long)NODE_IMAGE_MAX_PIXELS);
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

/* ---- decoding: bytes in memory -> 8-bit pixels --------------------------------------- */

/*
 * One decoder per format, over bytes in memory: LoadImage's files (node_image_load reads
 * the file first) and the server's uploads (node_image_decode_rgba) take the same path,
 * so a fix to one (a bomb check, a chunk check) is a fix to both. They differ only in
 * what struct decode_req says.
 */
struct decode_req {
    const char *subject; /* what messages name: "'in/x.png'" (a file), "PNG", "JPEG" (bytes) */
    int strict;          /* 1: truncated JPEG data fails, as PIL refuses truncated uploads;
                            0: libjpeg fills the missing rows (LoadImage) */
    int room;            /* channels to allocate per pixel at least (4: the caller widens
                            to RGBA in place), or 0 */
};

/*
 * 1 when every chunk of the PNG in b[0..n) fits in the buffer (up to IEND or the end;
 * with `header_only`, up to the first IDAT: all that png_read_info reads). libpng
 * allocates and zeroes a chunk's declared length before reading it, so a 200-byte file
 * declaring a 1.9 GB zTXt chunk cost 1.9 GB (found with tests/fuzz/fuzz_image_load), and
 * 2 s per request as an upload (tests/fuzz/fuzz_upload_image).
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

struct png_mem {
    const unsigned char *p;
    size_t n, off;
};

static void png_mem_read(png_structp png, png_bytep dst, png_size_t len)
{
    struct png_mem *m = png_get_io_ptr(png);
    if (len > m->n - m->off)
        png_error(png, "truncated PNG");
    memcpy(dst, m->p + m->off, len);
    m->off += len;
}

/* Bytes per pixel to allocate for `c` decoded channels. */
static size_t room_for(int c, const struct decode_req *rq)
{
    return (size_t)(c > rq->room ? c : rq->room);
}

/* PNG bytes -> pixels (palettes and tRNS expanded, 16 bits cut to 8 and no gamma
 * applied, as PIL does) and the EXIF orientation in *orient. */
static int decode_png(const unsigned char *p, size_t n, const struct decode_req *rq,
                      struct node_pixels *out, int *orient, struct err *e)
{
    if (!png_chunks_fit(p, n, 0))
        return err_set(e, ERR_INVALID, "cannot decode %s: a chunk runs past the end of the file",
                       rq->subject);
    struct png_err pe = {{0}};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &pe, png_on_error, png_on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    uint8_t *volatile px = NULL;
    png_bytep *volatile rows = NULL;
    struct png_mem m = {p, n, 0};
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return err_set(e, ERR_INTERNAL, "cannot initialise libpng");
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, NULL);
        xfree(px);
        xfree(rows);
        return err_set(e, ERR_INVALID, "cannot decode %s: %s", rq->subject, pe.msg);
    }
    png_set_user_limits(png, 1 << 15, 1 << 15);
    png_set_read_fn(png, &m, png_mem_read);
    png_read_info(png, info);
    png_set_expand(png);   /* palette -> RGB, low-bit gray -> 8, tRNS -> alpha */
    png_set_strip_16(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    int w = (int)png_get_image_width(png, info), h = (int)png_get_image_height(png, info);
    if ((uint64_t)w * (uint64_t)h > NODE_IMAGE_MAX_PIXELS) {
        png_destroy_read_struct(&png, &info, NULL);
        return bomb_error(e, rq->subject, (uint64_t)w * (uint64_t)h);
    }
    int c = png_get_channels(png, info);
    size_t stride = png_get_rowbytes(png, info);
    if (stride != (size_t)w * c)
        png_error(png, "unexpected row size");
    px = xmalloc((size_t)w * h * room_for(c, rq));
    rows = xmalloc(sizeof(png_bytep) * h);
    for (int y = 0; y < h; y++)
        rows[y] = px + stride * y;
    png_read_image(png, rows);
    png_read_end(png, info);
    *orient = 1;
#ifdef PNG_eXIf_SUPPORTED
    png_bytep exif = NULL;
    png_uint_32 nexif = 0;
    if (png_get_eXIf_1(png, info, &nexif, &exif) && exif)
        *orient = exif_orientation(exif, nexif);
#endif
    png_destroy_read_struct(&png, &info, NULL);
    xfree(rows);
    *out = (struct node_pixels){w, h, c, px};
    return 0;
}

/* Warnings are silent, except a premature end of data when the request is strict:
 * libjpeg would go on and fill every remaining row, so a few bytes declaring a huge
 * image cost its full size in memory and time. */
static void jpeg_eof_fails(j_common_ptr c, int level)
{
    if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF)
        c->err->error_exit(c);
}

/* JPEG bytes -> gray or RGB pixels and the EXIF orientation in *orient. */
static int decode_jpeg(const unsigned char *p, size_t n, const struct decode_req *rq,
                       struct node_pixels *out, int *orient, struct err *e)
{
    struct jpeg_decompress_struct ci;
    struct jerr je;
    uint8_t *volatile px = NULL;
    ci.err = jpeg_std_error(&je.pub);
    je.pub.error_exit = jpeg_on_error;
    if (rq->strict)
        je.pub.emit_message = jpeg_eof_fails;
    if (setjmp(je.jb)) {
        jpeg_destroy_decompress(&ci);
        xfree(px);
        return err_set(e, ERR_INVALID, "cannot decode %s: %s", rq->subject, je.msg);
    }
    jpeg_create_decompress(&ci);
    jpeg_mem_src(&ci, p, (unsigned long)n);
    jpeg_save_markers(&ci, JPEG_APP0 + 1, 0xffff);
    jpeg_read_header(&ci, TRUE);
    *orient = 1;
    for (jpeg_saved_marker_ptr m = ci.marker_list; m; m = m->next)
        if (m->marker == JPEG_APP0 + 1 && m->data_length > 6 && !memcmp(m->data, "Exif\0\0", 6))
            *orient = exif_orientation(m->data + 6, m->data_length - 6);
    if (ci.jpeg_color_space == JCS_CMYK || ci.jpeg_color_space == JCS_YCCK) {
        jpeg_destroy_decompress(&ci);
        return err_set(e, ERR_UNSUPPORTED, "cannot decode %s: CMYK JPEG is not supported",
                       rq->subject);
    }
    /* The limit is checked on the header, as PIL does at open: jpeg_start_decompress
     * already allocates a progressive file's whole coefficient buffer (a 300-byte file
     * declaring 16000x16000 cost 750 MB; seen while fuzzing, now in tests/fuzz/corpus). */
    if ((uint64_t)ci.image_width * ci.image_height > NODE_IMAGE_MAX_PIXELS) {
        uint64_t npx = (uint64_t)ci.image_width * ci.image_height;
        jpeg_destroy_decompress(&ci);
        return bomb_error(e, rq->subject, npx);
    }
    ci.out_color_space = ci.num_components == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_start_decompress(&ci);
    int w = (int)ci.output_width, h = (int)ci.output_height, c = ci.output_components;
    if ((uint64_t)w * (uint64_t)h > NODE_IMAGE_MAX_PIXELS) {
        jpeg_destroy_decompress(&ci);
        return bomb_error(e, rq->subject, (uint64_t)w * (uint64_t)h);
    }
    px = xmalloc((size_t)w * h * room_for(c, rq));
    while (ci.output_scanline < ci.output_height) {
        JSAMPROW row = px + (size_t)ci.output_scanline * w * c;
        if (jpeg_read_scanlines(&ci, &row, 1) != 1)
            break;
    }
    int whole = ci.output_scanline == ci.output_height;
    if (whole)
        jpeg_finish_decompress(&ci);
    jpeg_destroy_decompress(&ci);
    if (!whole) {
        xfree(px);
        return err_set(e, ERR_INVALID, "cannot decode %s: image file is truncated", rq->subject);
    }
    *out = (struct node_pixels){w, h, c, px};
    return 0;
}

/* What the bytes are, by content (a file's name is never trusted). */
enum sniff { SNIFF_OTHER, SNIFF_PNG, SNIFF_JPEG, SNIFF_GIF };

static enum sniff sniff(const unsigned char *b, size_t n)
{
    if (n >= 8 && !png_sig_cmp(b, 0, 8))
        return SNIFF_PNG;
    if (n >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff)
        return SNIFF_JPEG;
    if (n >= 6 && !memcmp(b, "GIF8", 4))
        return SNIFF_GIF;
    return SNIFF_OTHER;
}

/* The whole file at `path` (1 GiB at most) into *data (xmalloc'd; caller frees). */
static int read_file(const char *path, unsigned char **data, size_t *n, struct err *e)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return err_set(e, ERR_IO, "cannot open '%s'", path);
    long len = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    int rc = 0;
    if (len < 0) {
        rc = err_set(e, ERR_IO, "cannot read '%s'", path);
    } else if (len > (1L << 30)) {
        rc = err_set(e, ERR_INVALID, "cannot decode '%s': larger than 1 GiB", path);
    } else {
        rewind(f);
        *n = (size_t)len;
        *data = xmalloc(*n ? *n : 1);
        if (fread(*data, 1, *n, f) != *n) {
            xfree(*data);
            *data = NULL;
            rc = err_set(e, ERR_IO, "cannot read '%s'", path);
        }
    }
    fclose(f);
    return rc;
}

int node_image_load(const char *path, struct node_image_file *out, struct err *e)
{
    memset(out, 0, sizeof(*out));
    unsigned char *data = NULL;
    size_t n = 0;
    int rc = read_file(path, &data, &n, e);
    if (rc < 0)
        return rc;
    struct buf subject;
    buf_init(&subject);
    buf_printf(&subject, "'%s'", path);
    const struct decode_req rq = {.subject = subject.ptr};
    struct node_pixels px;
    int orient = 1;
    switch (sniff(data, n)) {
    case SNIFF_PNG:
        if (node__apng_is_animated(data, n)) {
            /* every frame, as Pillow's ImageSequence gives them to LoadImage */
            rc = node__apng_load(data, n, subject.ptr, out, e);
            goto done;
        }
        rc = decode_png(data, n, &rq, &px, &orient, e);
        break;
    case SNIFF_JPEG:
        rc = decode_jpeg(data, n, &rq, &px, &orient, e);
        break;
    case SNIFF_GIF:
        rc = node__gif_load(data, n, path, out, e);
        goto done;
    default:
        rc = err_set(e, ERR_UNSUPPORTED, "cannot identify image file '%s'", path);
        goto done;
    }
    if (rc == 0) {
        out->frames = xcalloc(1, sizeof(*out->frames));
        out->n_frames = 1;
        out->frames[0] = px;
        node_pixels_orient(&out->frames[0], orient);
    }
done:
    buf_release(&subject);
    xfree(data);
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

int node_image_decode_rgba(const void *p, size_t n, struct node_pixels *out, int *had_alpha,
                           struct err *e)
{
    memset(out, 0, sizeof(*out));
    *had_alpha = 0;
    enum sniff kind = sniff(p, n);
    if (kind != SNIFF_PNG && kind != SNIFF_JPEG)
        return err_set(e, ERR_UNSUPPORTED, "not a PNG or JPEG image");
    const struct decode_req rq = {.subject = kind == SNIFF_PNG ? "PNG" : "JPEG", .strict = 1,
                                  .room = 4};
    int orient; /* not applied: the upload routes keep the bytes as sent */
    int rc = kind == SNIFF_PNG ? decode_png(p, n, &rq, out, &orient, e)
                               : decode_jpeg(p, n, &rq, out, &orient, e);
    if (rc < 0)
        return rc;
    /* Widen to RGBA in place (decode_req.room), from the last pixel back: pixel i's
     * source (c * i) is never behind its destination (4 * i). Gray fills R, G and B;
     * a missing alpha is 255. */
    int c = out->c;
    *had_alpha = c == 2 || c == 4;
    for (size_t i = (size_t)out->w * out->h; c != 4 && i-- > 0;) {
        const uint8_t *s = out->px + i * c;
        uint8_t r = s[0], g = c >= 3 ? s[1] : s[0], b = c >= 3 ? s[2] : s[0];
        uint8_t a = c == 2 ? s[1] : 255;
        uint8_t *d = out->px + i * 4;
        d[0] = r;
        d[1] = g;
        d[2] = b;
        d[3] = a;
    }
    out->c = 4;
    return 0;
}

int node_png_text_read(const void *p, size_t n, struct node_png_text **out)
{
    *out = NULL;
    if (n < 8 || memcmp(p, "\x89PNG\r\n\x1a\n", 8) != 0 || !png_chunks_fit(p, n, 1))
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

#include "srv_image.h"

#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "buf.h"

int srv_image_decode(const void *p, size_t n, struct srv_image *out, struct err *e)
{
    memset(out, 0, sizeof(*out));
    struct node_pixels px;
    int rc = node_image_decode_rgba(p, n, &px, &out->had_alpha, e);
    if (rc < 0)
        return rc;
    out->w = px.w;
    out->h = px.h;
    out->channels = px.c;
    out->px = px.px;
    return 0;
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

void srv_image_png_ex(const struct srv_image *img, int level, const struct srv_png_text *t,
                      int count, void **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    /* The codec takes borrowed key/value pairs. */
    struct node_text_chunk *tc = count > 0 ? xcalloc((size_t)count, sizeof(*tc)) : NULL;
    for (int i = 0; i < count; i++)
        tc[i] = (struct node_text_chunk){t[i].key, t[i].text};
    struct buf b;
    buf_init(&b);
    int rc = node_png_encode_text(img->px, img->w, img->h, img->channels, level, tc, count, &b);
    xfree(tc);
    if (rc < 0) {
        buf_release(&b);
        return;
    }
    *n = b.len;
    *out = buf_detach(&b, NULL);
}

void srv_image_png(const struct srv_image *img, int want_channels, void **out, size_t *n)
{
    (void)want_channels;
    srv_image_png_ex(img, 6, NULL, 0, out, n);
}

void srv_image_jpeg(const struct srv_image *img, int quality, void **out, size_t *n)
{
    uint8_t *jpg = NULL;
    node_jpeg_encode(img->px, img->w, img->h, img->channels, quality, &jpg, n);
    *out = jpg;
}

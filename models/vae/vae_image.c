/*
 * Pixel conventions around the VAE (see vae_image.h).
 */
#include "vae_image.h"

#include <math.h>

#include "alloc.h"

int vae_image_from_decoder(const struct tensor *img, float *out, struct err *e)
{
    if (img->ndim != 4 || img->shape[1] != 3)
        return err_set(e, ERR_INVALID, "image: decoder output must be [B,3,H,W]");
    int64_t B = img->shape[0], H = img->shape[2], W = img->shape[3], plane = H * W;
    int64_t n = B * 3 * plane;
    float *tmp = xmalloc((size_t)n * sizeof(float));
    int rc = tensor_read_f32(img, tmp, n, e);
    if (rc == 0) {
        for (int64_t b = 0; b < B; b++)
            for (int64_t p = 0; p < plane; p++)
                for (int c = 0; c < 3; c++) {
                    float v = (tmp[(b * 3 + c) * plane + p] + 1.0f) / 2.0f;
                    out[(b * plane + p) * 3 + c] = v < 0 ? 0 : (v > 1 ? 1 : v);
                }
    }
    xfree(tmp);
    return rc;
}

int vae_image_to_encoder(struct dev *d, const float *pix, int b, int h, int w,
                          struct tensor **out, struct err *e)
{
    *out = NULL;
    if (b < 1 || h < 8 || w < 8)
        return err_set(e, ERR_INVALID, "image: %dx%d is too small to encode (at least 8x8)", w, h);
    int h8 = h / 8 * 8, w8 = w / 8 * 8, oy = (h % 8) / 2, ox = (w % 8) / 2;
    int64_t shape[4] = {b, 3, h8, w8};
    int rc = tensor_new(d, TENSOR_F32, 4, shape, out, e);
    if (rc < 0)
        return rc;
    size_t plane = (size_t)h8 * w8;
    float *tmp = xmalloc((size_t)b * 3 * plane * sizeof(float));
    for (int n = 0; n < b; n++)
        for (int y = 0; y < h8; y++)
            for (int x = 0; x < w8; x++)
                for (int c = 0; c < 3; c++)
                    tmp[((size_t)n * 3 + c) * plane + (size_t)y * w8 + x] =
                        2.0f * pix[(((size_t)n * h + y + oy) * w + x + ox) * 3 + c] - 1.0f;
    rc = tensor_write_f32(*out, tmp, (int64_t)((size_t)b * 3 * plane), e);
    xfree(tmp);
    if (rc < 0) {
        tensor_free(*out);
        *out = NULL;
    }
    return rc;
}

void vae_image_to_u8(const float *v, size_t n, uint8_t *out)
{
    for (size_t i = 0; i < n; i++) {
        float x = 255.0f * v[i];
        if (!(x > 0)) /* also NaN */
            x = 0;
        if (x > 255)
            x = 255;
        out[i] = (uint8_t)x;
    }
}

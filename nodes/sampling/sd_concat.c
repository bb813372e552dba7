/*
 * c_concat of a conditioning entry (see sd_concat.h): ComfyUI's concat_cond for the
 * inpainting and instruct-pix2pix UNets.
 */
#include "sd_concat.h"

#include <math.h>
#include <string.h>

#include "alloc.h"
#include "resample.h"

/* The latent of an all-black image per channel (model_base's blank_inpaint_image_like). */
static const float blank_latent[4] = {0.8223f, -0.6876f, 0.6364f, 0.1380f};

void sd_concat_resize_batch(const float *src, int in_b, size_t per, float *out, int out_b)
{
    for (int i = 0; i < out_b; i++) {
        int k;
        if (in_b == out_b)
            k = i;
        else if (out_b <= 1)
            k = 0; /* tensor[:batch_size] */
        else if (out_b < in_b)
            k = (int)nearbyint(i * ((double)(in_b - 1) / (out_b - 1))); /* Python round() */
        else
            k = (int)floor((i + 0.5) * ((double)in_b / out_b));
        k = k < in_b - 1 ? k : in_b - 1;
        memcpy(out + (size_t)i * per, src + (size_t)k * per, per * sizeof *out);
    }
}

/*
 * src [b, c, sh, sw] at the latent's h x w (utils.common_upscale "bilinear", "center"
 * when the size differs), then resized to `batch` into out [batch, c, h, w].
 */
static int fit(const float *src, int b, int c, int sh, int sw, int batch, int h, int w,
               float *out, struct err *e)
{
    size_t per = (size_t)c * h * w;
    float *tmp = NULL;
    int rc;
    if (sh == h && sw == w) {
        sd_concat_resize_batch(src, b, per, out, batch);
        return 0;
    }
    if ((rc = xtry_malloc((size_t)b * per * sizeof *tmp, (void **)&tmp, e)) < 0)
        return rc;
    rc = resample(src, b, c, sh, sw, RESAMPLE_BCHW, "bilinear", 1, tmp, h, w, e);
    if (rc == 0)
        sd_concat_resize_batch(tmp, b, per, out, batch);
    xfree(tmp);
    return rc;
}

/* The inpaint concat's mask [batch, 1, h, w] into out: the entry's concat_mask, else the
 * noise mask's first channel, rounded; 0 when there is none (*have 0). */
static int inpaint_mask(const struct sd_cond_entry *en, const float *noise_mask, int batch,
                        int h, int w, float *out, int *have, struct err *e)
{
    size_t plane = (size_t)h * w;
    int rc;
    *have = 1;
    if (en->concat_mask) {
        if ((rc = fit(en->concat_mask, en->concat_mask_b, 1, en->concat_mask_h,
                      en->concat_mask_w, batch, h, w, out, e)) < 0)
            return rc;
    } else if (noise_mask) {
        for (int b = 0; b < batch; b++) /* denoise_mask[:, :1], already the latent's size */
            memcpy(out + b * plane, noise_mask + (size_t)b * 4 * plane, plane * sizeof *out);
    } else {
        *have = 0;
        return 0;
    }
    /* ComfyUI rounds before resizing the batch; picking samples commutes with it. */
    for (size_t i = 0; i < (size_t)batch * plane; i++)
        out[i] = nearbyintf(out[i]); /* torch.round: half to even */
    return 0;
}

int sd_concat_build(enum model_concat kind, const struct sd_cond_entry *en, const float *latent,
                    const float *noise_mask, float scale, int batch, int h, int w, float *out,
                    struct err *e)
{
    size_t plane = (size_t)h * w, lat = 4 * plane;
    int cc = model_concat_channels(kind), have_mask = 0, rc;
    float *img = NULL, *mask = NULL;
    if (kind == MODEL_CONCAT_NONE)
        return 0;
    if ((rc = xtry_malloc((size_t)batch * lat * sizeof *img, (void **)&img, e)) < 0)
        return rc;
    /* The image: the entry's latent (scaled for inpainting), else the sampled latent
     * (inpainting) or zeros (ip2p). */
    if (en->concat_latent) {
        if ((rc = fit(en->concat_latent, en->concat_b, 4, en->concat_h, en->concat_w, batch, h,
                      w, img, e)) < 0)
            goto out;
        if (kind == MODEL_CONCAT_INPAINT)
            for (size_t i = 0; i < (size_t)batch * lat; i++)
                img[i] *= scale; /* process_latent_in */
    } else if (kind == MODEL_CONCAT_INPAINT) {
        memcpy(img, latent, (size_t)batch * lat * sizeof *img);
    } else {
        memset(img, 0, (size_t)batch * lat * sizeof *img);
    }
    if (kind == MODEL_CONCAT_IP2P) {
        memcpy(out, img, (size_t)batch * lat * sizeof *out);
        goto out;
    }
    if ((rc = xtry_malloc((size_t)batch * plane * sizeof *mask, (void **)&mask, e)) < 0 ||
        (rc = inpaint_mask(en, noise_mask, batch, h, w, mask, &have_mask, e)) < 0)
        goto out;
    for (int b = 0; b < batch; b++) {
        float *o = out + (size_t)b * cc * plane;
        for (size_t p = 0; p < plane; p++)
            o[p] = have_mask ? mask[b * plane + p] : 1.0f;
        for (int c = 0; c < 4; c++)
            for (size_t p = 0; p < plane; p++)
                o[(1 + c) * plane + p] =
                    have_mask ? img[(size_t)b * lat + c * plane + p] : blank_latent[c];
    }
out:
    xfree(img);
    xfree(mask);
    return rc;
}

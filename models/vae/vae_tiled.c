/*
 * Tiled VAE decode and encode, as ComfyUI's tiled_scale (sd15.md §4.5): three passes
 * (nn_tiled.h) with tile shapes (T/2 wide, 2T high), (2T wide, T/2 high) and (T x T),
 * the three results averaged.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "log.h"
#include "vae.h"
#include "nn.h"
#include "nn_tiled.h"

/* The three passes for every batch element; result written into `out`. */
static int tiled_run(const struct nn_tiler *t, const struct tensor *x, struct tensor *out, int64_t tile,
                     int64_t overlap, struct err *e)
{
    int64_t B = x->shape[0], OH = out->shape[2], OW = out->shape[3];
    size_t per = (size_t)t->out_ch * OH * OW;
    float *all = xcalloc(per * (size_t)B, sizeof(float));
    struct tensor *xb = NULL;
    int rc = 0;
    const int64_t shapes[3][2] = {{2 * tile, tile / 2}, {tile / 2, 2 * tile}, {tile, tile}};
    for (int64_t b = 0; b < B; b++) {
        NN_TRY(tensor_slice(x, 0, b, 1, &xb, e));
        float *acc = all + per * (size_t)b;
        for (int k = 0; k < 3; k++)
            NN_TRY(nn__tiled_pass(t, xb, shapes[k][0], shapes[k][1], overlap, acc, e));
        for (size_t i = 0; i < per; i++)
            acc[i] /= 3.0f;
        tensor_free(xb);
        xb = NULL;
    }
    NN_TRY(tensor_write_f32(out, all, (int64_t)(per * (size_t)B), e));
fail:
    tensor_free(xb);
    xfree(all);
    return rc;
}

struct vae_fn_ctx {
    struct patcher *vae;
    const struct vae_arch *cfg;
};

static int dec_fn(void *ctx, const struct tensor *in, struct tensor *out, struct err *e)
{
    struct vae_fn_ctx *c = ctx;
    return vae_decode(c->vae, c->cfg, in, out, NULL, e);
}

static int enc_fn(void *ctx, const struct tensor *in, struct tensor *out, struct err *e)
{
    struct vae_fn_ctx *c = ctx;
    return vae_encode(c->vae, c->cfg, in, out, NULL, e);
}

int vae_decode_tiled(struct patcher *vae, const struct vae_arch *cfg, const struct tensor *z,
                     struct tensor *img, int tile, int overlap, struct err *e)
{
    struct dev *d = patcher_device(vae);
    if (!d)
        return err_set(e, ERR_INVALID, "vae: model is not loaded (call mm_load_models first)");
    if (tile < 4 || overlap < 0 || overlap >= tile / 2)
        return err_set(e, ERR_INVALID, "vae tiled decode: tile %d / overlap %d out of range", tile,
                       overlap);
    if (z->ndim != 4 || img->ndim != 4 || img->shape[0] != z->shape[0] || img->shape[1] != 3 ||
        img->shape[2] != 8 * z->shape[2] || img->shape[3] != 8 * z->shape[3])
        return err_set(e, ERR_INVALID, "vae tiled decode: bad shapes (z [B,4,h,w] -> img [B,3,8h,8w])");
    struct vae_fn_ctx c = {.vae = vae, .cfg = cfg};
    struct nn_tiler t = {.d = d, .fn = dec_fn, .ctx = &c, .out_ch = 3, .num = 8, .den = 1};
    return tiled_run(&t, z, img, tile, overlap, e);
}

int vae_encode_tiled(struct patcher *vae, const struct vae_arch *cfg, const struct tensor *img,
                     struct tensor *mean, int tile, int overlap, struct err *e)
{
    struct dev *d = patcher_device(vae);
    if (!d)
        return err_set(e, ERR_INVALID, "vae: model is not loaded (call mm_load_models first)");
    if (tile < 32 || tile % 16 || overlap < 0 || overlap % 8 || overlap >= tile / 2)
        return err_set(e, ERR_INVALID,
                       "vae tiled encode: tile %d (a multiple of 16) / overlap %d (a multiple of 8) "
                       "out of range",
                       tile, overlap);
    if (img->ndim != 4 || img->shape[1] != 3 || img->shape[2] % 8 || img->shape[3] % 8 ||
        mean->ndim != 4 || mean->shape[0] != img->shape[0] || mean->shape[2] * 8 != img->shape[2] ||
        mean->shape[3] * 8 != img->shape[3])
        return err_set(e, ERR_INVALID,
                       "vae tiled encode: bad shapes (img [B,3,H,W], H and W multiples of 8)");
    struct vae_fn_ctx c = {.vae = vae, .cfg = cfg};
    struct nn_tiler t = {.d = d, .fn = enc_fn, .ctx = &c, .out_ch = cfg->embed, .num = 1, .den = 8};
    return tiled_run(&t, img, mean, tile, overlap, e);
}

int vae_decode_auto(struct patcher *vae, const struct vae_arch *cfg, const struct tensor *z,
                    struct tensor *img, int tile, int overlap, struct err *e)
{
    int rc = vae_decode(vae, cfg, z, img, NULL, e);
    if (rc != ERR_DEVICE_OOM)
        return rc;
    log_warn("ran out of memory when regular VAE decoding, retrying with tiled VAE decoding");
    err_clear(e);
    return vae_decode_tiled(vae, cfg, z, img, tile, overlap, e);
}

int vae_encode_auto(struct patcher *vae, const struct vae_arch *cfg, const struct tensor *img,
                    struct tensor *mean, int tile, int overlap, struct err *e)
{
    int rc = vae_encode(vae, cfg, img, mean, NULL, e);
    if (rc != ERR_DEVICE_OOM)
        return rc;
    log_warn("ran out of memory when regular VAE encoding, retrying with tiled VAE encoding");
    err_clear(e);
    return vae_encode_tiled(vae, cfg, img, mean, tile, overlap, e);
}

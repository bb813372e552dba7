/*
 * Tiled VAE decode and encode, as ComfyUI's tiled_scale (sd15.md §4.5): three passes
 * with tile shapes (T/2 wide, 2T high), (2T wide, T/2 high) and (T x T), each tile's
 * output feathered at its edges and accumulated with its mask, the three results
 * averaged. Accumulation happens in host memory; only one tile is on the device at a
 * time, which is the point: the activation peak is that of one tile.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "log.h"
#include "vae.h"
#include "nn.h"

typedef int (*tile_fn)(void *ctx, const struct tensor *in, struct tensor *out, struct err *e);

struct tiler {
    struct dev *d;
    tile_fn fn;
    void *ctx;
    int out_ch;
    int num, den; /* output size = input size * num / den (8/1 decode, 1/8 encode) */
};

static int64_t scaled(const struct tiler *t, int64_t v)
{
    return (int64_t)llround((double)v * t->num / t->den);
}

/*
 * One tiled_scale pass over sample s [1, C, H, W] with tile (ty, tx) and overlap o (input
 * units); adds the pass result (sum / weight) into acc [out_ch, OH, OW].
 */
static int tiled_pass(const struct tiler *t, const struct tensor *s, int64_t ty, int64_t tx,
                      int64_t o, float *acc, struct err *e)
{
    int64_t H = s->shape[2], W = s->shape[3], OH = scaled(t, H), OW = scaled(t, W);
    size_t plane = (size_t)OH * OW, n = plane * (size_t)t->out_ch;
    float *sum = xcalloc(n, sizeof(float)), *wsum = xcalloc(plane, sizeof(float));
    struct tensor *r1 = NULL, *r2 = NULL, *in = NULL, *out = NULL;
    float *tile = NULL, *mask = NULL;
    int rc = 0;
    int64_t tile_sz[2] = {ty, tx}, len[2] = {H, W};
    (void)0;
    /* Starts per axis: 0, T-O, 2(T-O), ... while < L - O; one tile at 0 if L <= T. */
    int64_t starts[2][4096];
    int ns[2];
    for (int a = 0; a < 2; a++) {
        ns[a] = 0;
        if (len[a] <= tile_sz[a] || tile_sz[a] <= o) {
            starts[a][ns[a]++] = 0;
            continue;
        }
        for (int64_t p = 0; p < len[a] - o && ns[a] < 4096; p += tile_sz[a] - o)
            starts[a][ns[a]++] = p;
    }
    if (H <= ty && W <= tx) {
        /* ComfyUI runs the function once, without a mask, when the sample fits a tile. */
        NN_TRY(nn__new(t->d, &in, e, 4, (int64_t)1, s->shape[1], H, W));
        NN_TRY(tensor_copy(in, s, e));
        NN_TRY(nn__new(t->d, &out, e, 4, (int64_t)1, (int64_t)t->out_ch, OH, OW));
        NN_TRY(t->fn(t->ctx, in, out, e));
        tile = xmalloc(n * sizeof(float));
        NN_TRY(tensor_read_f32(out, tile, (int64_t)n, e));
        for (size_t i = 0; i < n; i++)
            acc[i] += tile[i];
        goto fail; /* done: release and return rc (0) */
    }
    int64_t feather = scaled(t, o);
    for (int iy = 0; iy < ns[0]; iy++) {
        for (int ix = 0; ix < ns[1]; ix++) {
            int64_t pos[2], l[2];
            for (int a = 0; a < 2; a++) {
                int64_t st = a == 0 ? starts[0][iy] : starts[1][ix];
                pos[a] = st < len[a] - o ? st : len[a] - o;
                if (pos[a] < 0)
                    pos[a] = 0;
                l[a] = tile_sz[a] < len[a] - pos[a] ? tile_sz[a] : len[a] - pos[a];
            }
            NN_TRY(tensor_slice(s, 2, pos[0], l[0], &r1, e));
            NN_TRY(tensor_slice(r1, 3, pos[1], l[1], &r2, e));
            NN_TRY(nn__new(t->d, &in, e, 4, (int64_t)1, s->shape[1], l[0], l[1]));
            NN_TRY(tensor_copy(in, r2, e));
            int64_t oh = scaled(t, l[0]), ow = scaled(t, l[1]);
            NN_TRY(nn__new(t->d, &out, e, 4, (int64_t)1, (int64_t)t->out_ch, oh, ow));
            NN_TRY(t->fn(t->ctx, in, out, e));
            size_t tp = (size_t)oh * ow;
            tile = xrealloc(tile, tp * (size_t)t->out_ch * sizeof(float));
            mask = xrealloc(mask, tp * sizeof(float));
            NN_TRY(tensor_read_f32(out, tile, (int64_t)(tp * (size_t)t->out_ch), e));
            /* Feather: the first and last F outputs of each axis scaled by (k+1)/F
             * (multiplicatively at corners); an axis shorter than F is left alone. */
            for (size_t i = 0; i < tp; i++)
                mask[i] = 1.0f;
            for (int64_t k = 0; k < feather; k++) {
                float f = (float)((double)(k + 1) / (double)feather);
                if (feather < oh)
                    for (int64_t x = 0; x < ow; x++) {
                        mask[k * ow + x] *= f;
                        mask[(oh - 1 - k) * ow + x] *= f;
                    }
                if (feather < ow)
                    for (int64_t y = 0; y < oh; y++) {
                        mask[y * ow + k] *= f;
                        mask[y * ow + ow - 1 - k] *= f;
                    }
            }
            int64_t oy = scaled(t, pos[0]), ox = scaled(t, pos[1]);
            for (int64_t y = 0; y < oh && oy + y < OH; y++)
                for (int64_t x = 0; x < ow && ox + x < OW; x++) {
                    float m = mask[y * ow + x];
                    wsum[(oy + y) * OW + ox + x] += m;
                    for (int c = 0; c < t->out_ch; c++)
                        sum[(size_t)c * plane + (size_t)(oy + y) * OW + ox + x] +=
                            tile[(size_t)c * tp + (size_t)y * ow + x] * m;
                }
            tensor_free(r1);
            tensor_free(r2);
            tensor_free(in);
            tensor_free(out);
            r1 = r2 = in = out = NULL;
        }
    }
    for (int c = 0; c < t->out_ch; c++)
        for (size_t i = 0; i < plane; i++)
            acc[(size_t)c * plane + i] += sum[(size_t)c * plane + i] / wsum[i];
fail:
    tensor_free(r1);
    tensor_free(r2);
    tensor_free(in);
    tensor_free(out);
    xfree(tile);
    xfree(mask);
    xfree(sum);
    xfree(wsum);
    return rc;
}

/* The three passes for every batch element; result written into `out`. */
static int tiled_run(const struct tiler *t, const struct tensor *x, struct tensor *out, int64_t tile,
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
            NN_TRY(tiled_pass(t, xb, shapes[k][0], shapes[k][1], overlap, acc, e));
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
    struct tiler t = {.d = d, .fn = dec_fn, .ctx = &c, .out_ch = 3, .num = 8, .den = 1};
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
    struct tiler t = {.d = d, .fn = enc_fn, .ctx = &c, .out_ch = cfg->embed, .num = 1, .den = 8};
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

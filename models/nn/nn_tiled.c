/*
 * ComfyUI's tiled_scale over one sample (see nn_tiled.h).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "nn.h"
#include "nn_tiled.h"

int64_t nn__tiled_steps(int64_t h, int64_t w, int64_t ty, int64_t tx, int64_t overlap)
{
    int64_t rows = h <= ty ? 1 : (h - overlap + (ty - overlap) - 1) / (ty - overlap);
    int64_t cols = w <= tx ? 1 : (w - overlap + (tx - overlap) - 1) / (tx - overlap);
    return rows * cols;
}

static int64_t scaled(const struct nn_tiler *t, int64_t v)
{
    return (int64_t)llround((double)v * t->num / t->den);
}

int nn__tiled_pass(const struct nn_tiler *t, const struct tensor *s, int64_t ty, int64_t tx,
                    int64_t o, float *acc, struct err *e)
{
    int64_t H = s->shape[2], W = s->shape[3], OH = scaled(t, H), OW = scaled(t, W);
    size_t plane = (size_t)OH * OW, n = plane * (size_t)t->out_ch;
    float *sum = NULL, *wsum = NULL;
    struct tensor *r1 = NULL, *r2 = NULL, *in = NULL, *out = NULL;
    float *tile = NULL, *mask = NULL;
    int rc = 0;
    int64_t tile_sz[2] = {ty, tx}, len[2] = {H, W};
    /* Output-sized: a large image must fail the node, not end the process. */
    NN_TRY(xtry_calloc(n, sizeof(float), (void **)&sum, e));
    NN_TRY(xtry_calloc(plane, sizeof(float), (void **)&wsum, e));
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
        NN_TRY(xtry_malloc(n * sizeof(float), (void **)&tile, e));
        NN_TRY(tensor_read_f32(out, tile, (int64_t)n, e));
        for (size_t i = 0; i < n; i++)
            acc[i] += tile[i];
        if (t->tile_done)
            NN_TRY(t->tile_done(t->user));
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
            if (t->tile_done)
                NN_TRY(t->tile_done(t->user));
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


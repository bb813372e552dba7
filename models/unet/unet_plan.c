/*
 * The UNet's planning figures (see unet.h): the activation peak and the FLOP count
 * of one eval, both by walking the block list (unet_arch.h) at the given shapes.
 * All quantities are integer-valued doubles far below 2^53, so sums are exact.
 */
#include <math.h>

#include "unet.h"

/* Pixels per level: the input size halved (rounded up) per downsampler (§3.5). */
static void level_px(const struct unet_arch *a, int h, int w, double px[UNET_MAX_LEVELS])
{
    double hh = h, ww = w;
    for (int l = 0; l < a->levels; l++) {
        px[l] = hh * ww;
        hh = ceil(hh / 2);
        ww = ceil(ww / 2);
    }
}

/*
 * The activation peak of unet_eval: `base` is what is alive between blocks (the skip
 * stack and the current h), each block adds its own temporaries (ResBlock:
 * max(GN(in) + out, 3 out); SpatialTransformer: 7 C per token for the FF (h, n, 4C,
 * and the 8C / 8 temporary of tensor_linear_geglu's chunks on backends without the
 * fused kernel) plus k, v over the context; up/downsample: their outputs). Floats;
 * x, ctx, y and eps are the caller's.
 */
size_t unet_plan_bytes(const struct unet_arch *a, int b, int h, int w, int t)
{
    struct unet_blocks bl;
    double px[UNET_MAX_LEVELS], peak = 0, base = 0, skip[UNET_MAX_BLOCKS], hsize = 0;
    int ns = 0, on_stack = 0;
    unet_blocks_build(a, &bl);
    level_px(a, h, w, px);
#define PEAK(extra) peak = fmax(peak, base + (extra))
    for (int i = 0; i < bl.n; i++) {
        const struct unet_block *k = &bl.v[i];
        double p = px[k->level], ci = k->ci, co = k->co, out = 0;
        switch (k->op) {
        case UNET_OP_TIME_EMBED:
        case UNET_OP_LABEL_EMB:
            continue;
        case UNET_OP_CONV_IN:
            out = co * p;
            break;
        case UNET_OP_RES:
            if (k->flags & UNET_BLOCK_POP) { /* h and the popped skip become cat */
                base += ci * p - skip[--ns] - hsize;
                hsize = ci * p;
                on_stack = 0;
            }
            PEAK(fmax(ci + co, 3 * co) * p);
            out = co * p;
            break;
        case UNET_OP_ST:
            PEAK(7 * co * p + 2 * co * t);
            continue;
        case UNET_OP_DOWN:
            out = co * p;
            break;
        case UNET_OP_UP:
            out = co * px[k->level - 1];
            PEAK(2 * out);
            break;
        case UNET_OP_OUT:
            PEAK(ci * p);
            continue;
        }
        base += out - (on_stack ? 0 : hsize); /* the new h; the old one unless stacked */
        hsize = out;
        on_stack = (k->flags & UNET_BLOCK_PUSH) != 0;
        if (on_stack)
            skip[ns++] = out;
        PEAK(0);
    }
#undef PEAK
    return (size_t)(peak * b * 4.0) + ((size_t)1 << 20);
}

#define CONV(ci, co, k, px) (2.0 * (ci) * (co) * (k) * (k) * (px))

/* One ResBlock: its two 3x3 convs, the 1x1 skip conv, the emb projection. */
static double res_flops(double ci, double co, double px, double te)
{
    return CONV(ci, co, 3, px) + CONV(co, co, 3, px) + (ci != co ? CONV(ci, co, 1, px) : 0) +
           2.0 * te * co;
}

/* One transformer block (counted with the ST's proj_in/out, as before the block list). */
static double st_flops(double cc, double px, double t, double ctx)
{
    return 2.0 * px * cc * cc * 2 /* proj */ + 2.0 * px * cc * cc * 4 /* attn1 qkvo */ +
           4.0 * px * px * cc /* attn1 */ + 2.0 * px * cc * cc * 2 + 2.0 * t * ctx * cc * 2 +
           4.0 * px * t * cc + 2.0 * px * cc * 12 * cc /* FF */;
}

double unet_flops(const struct unet_arch *a, int b, int h, int w, int t)
{
    struct unet_blocks bl;
    double px[UNET_MAX_LEVELS], fl = 0, te = 4.0 * a->model_ch;
    unet_blocks_build(a, &bl);
    level_px(a, h, w, px);
    for (int i = 0; i < bl.n; i++) {
        const struct unet_block *k = &bl.v[i];
        double p = px[k->level];
        switch (k->op) {
        case UNET_OP_CONV_IN:
        case UNET_OP_DOWN:
        case UNET_OP_OUT:
            fl += CONV(k->ci, k->co, 3, p);
            break;
        case UNET_OP_UP:
            fl += CONV(k->ci, k->co, 3, px[k->level - 1]);
            break;
        case UNET_OP_RES:
            fl += res_flops(k->ci, k->co, p, te);
            break;
        case UNET_OP_ST:
            fl += st_flops(k->co, p, t, a->ctx_dim) * k->depth;
            break;
        default:
            break;
        }
    }
    return fl * b;
}

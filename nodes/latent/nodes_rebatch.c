/*
 * comfy_extras/nodes_rebatch.py (V3): RebatchLatents ("Rebatch Latents") and
 * RebatchImages ("Rebatch Images"), the two list nodes of ComfyUI's core: they take
 * their inputs as lists (NODE_CLASS_INPUT_IS_LIST) and return lists
 * (OUTPUT_IS_LIST), which the executor maps the downstream nodes over
 * (graph_node.c).
 *
 * RebatchLatents follows LatentRebatch.execute step by step over three parallel
 * sequences (sample rows, mask rows, batch indices) that are concatenated and
 * sliced exactly as its torch.cat / get_slices do, so odd inputs (a mask with
 * more rows than samples, the batch_index it always writes) come out as in
 * ComfyUI. Its one no-op is kept as one: the interpolate whose result ComfyUI
 * drops, so a mask is never resized. Where torch.cat would raise (latents or masks
 * of other channel counts or sizes joined into one batch) the node fails with
 * torch's RuntimeError text.
 */
#include <string.h>

#include "alloc.h"
#include "node_builtin.h"
#include "node_registry.h"
#include "node_run.h"
#include "nodes_rebatch.h"
#include "sd_types.h"

#define MODULE "comfy_extras.nodes_rebatch"

/* ---- RebatchLatents -------------------------------------------------------------------- */

enum { REBATCH_LATENTS, REBATCH_LATENTS_BATCH, REBATCH_LATENTS_N };

/* A mask row: row j of latent `lat`'s noise_mask, or (lat < 0) a row of ones. */
struct mrow {
    int lat;
    int64_t j;
};

/* One of ComfyUI's (samples, masks, indices) batches, as row references. */
struct rbatch {
    int valid;            /* samples is not None */
    int64_t *srow_lat, *srow_j, ns, cap_s;
    struct mrow *mrow;
    int64_t nm, cap_m;
    int64_t mh, mw;       /* the mask rows' size (torch.cat needs one) */
    int64_t *ind, ni, cap_i;
    int64_t c, h, w;      /* the samples' shape past the batch */
};

static void *grow(void *p, int64_t *cap, int64_t need, size_t elem)
{
    if (need <= *cap)
        return p;
    int64_t nc = *cap ? *cap : 8;
    while (nc < need)
        nc *= 2;
    *cap = nc;
    return xrealloc(p, (size_t)nc * elem);
}

static void rb_release(struct rbatch *b)
{
    xfree(b->srow_lat);
    xfree(b->srow_j);
    xfree(b->mrow);
    xfree(b->ind);
    memset(b, 0, sizeof(*b));
}

static void rb_add_sample(struct rbatch *b, int lat, int64_t j)
{
    int64_t cap = b->cap_s; /* both arrays grow to the same capacity */
    b->srow_lat = grow(b->srow_lat, &cap, b->ns + 1, sizeof(*b->srow_lat));
    b->srow_j = grow(b->srow_j, &b->cap_s, b->ns + 1, sizeof(*b->srow_j));
    b->srow_lat[b->ns] = lat;
    b->srow_j[b->ns++] = j;
}

static void rb_add_mask(struct rbatch *b, struct mrow m)
{
    b->mrow = grow(b->mrow, &b->cap_m, b->nm + 1, sizeof(*b->mrow));
    b->mrow[b->nm++] = m;
}

static void rb_add_ind(struct rbatch *b, int64_t v)
{
    b->ind = grow(b->ind, &b->cap_i, b->ni + 1, sizeof(*b->ind));
    b->ind[b->ni++] = v;
}

/* get_batch: latent i's rows, its mask (ones when none, repeated up to the batch), its
 * indices (batch_index, or offset + 0..b-1). */
static void get_batch(const struct sd_latent *l, int i, int64_t offset, struct rbatch *out)
{
    memset(out, 0, sizeof(*out));
    out->valid = 1;
    out->c = l->c;
    out->h = l->h;
    out->w = l->w;
    for (int64_t j = 0; j < l->b; j++)
        rb_add_sample(out, i, j);
    int64_t mb = l->noise_mask ? l->mb : l->b;
    out->mh = l->noise_mask ? l->mh : l->h * 8;
    out->mw = l->noise_mask ? l->mw : l->w * 8;
    /* mask.repeat((b - 1) // mb + 1, 1, 1, 1)[:b] when mb < b, else the mask as it is. */
    int64_t rows = mb < l->b ? l->b : mb;
    for (int64_t j = 0; j < rows; j++)
        rb_add_mask(out, (struct mrow){.lat = l->noise_mask ? i : -1, .j = j % mb});
    if (l->batch_index)
        for (int k = 0; k < l->n_batch_index; k++)
            rb_add_ind(out, l->batch_index[k]);
    else
        for (int64_t j = 0; j < l->b; j++)
            rb_add_ind(out, offset + j);
}

/* cat_batch(cur, next) into cur; <0 after node_fail where torch.cat would raise. */
static int cat_batch(struct node_ctx *c, struct rbatch *cur, const struct rbatch *next)
{
    if (next->c != cur->c)
        return node_fail(c, "RuntimeError",
                         "Sizes of tensors must match except in dimension 0. Expected size %lld "
                         "but got size %lld for tensor number 1 in the list.",
                         (long long)cur->c, (long long)next->c);
    if (next->mh != cur->mh || next->mw != cur->mw)
        return node_fail(c, "RuntimeError",
                         "Sizes of tensors must match except in dimension 0. Expected size %lld "
                         "but got size %lld for tensor number 1 in the list.",
                         (long long)(next->mh != cur->mh ? cur->mh : cur->mw),
                         (long long)(next->mh != cur->mh ? next->mh : next->mw));
    for (int64_t k = 0; k < next->ns; k++)
        rb_add_sample(cur, (int)next->srow_lat[k], next->srow_j[k]);
    for (int64_t k = 0; k < next->nm; k++)
        rb_add_mask(cur, next->mrow[k]);
    for (int64_t k = 0; k < next->ni; k++)
        rb_add_ind(cur, next->ind[k]);
    return 0;
}

/* One output LATENT from rows [a, a + bs) of each sequence (Python slices: clamped). */
static int emit(struct node_ctx *c, const struct value *lats, const struct rbatch *b, int64_t a,
                int64_t bs, struct value ***outs, int *n_out, int *cap_out)
{
    int64_t s1 = a + bs < b->ns ? a + bs : b->ns, m1 = a + bs < b->nm ? a + bs : b->nm,
            i1 = a + bs < b->ni ? a + bs : b->ni;
    int64_t ns = s1 > a ? s1 - a : 0, nm = m1 > a ? m1 - a : 0, ni = i1 > a ? i1 - a : 0;
    struct sd_latent *l;
    struct err e = {0};
    if (ns == 0)
        return node_fail(c, "RuntimeError", "RebatchLatents made an empty batch");
    if (sd_latent_try_new(ns, b->c, b->h, b->w, &l, &e) < 0)
        return node_fail_err(c, ERR_DEVICE_OOM, &e);
    size_t per = (size_t)(b->c * b->h * b->w);
    for (int64_t k = 0; k < ns; k++) {
        const struct sd_latent *src = sd_latent_of(value_list_at(lats, (int)b->srow_lat[a + k]));
        memcpy(l->samples + (size_t)k * per, src->samples + (size_t)b->srow_j[a + k] * per,
               per * sizeof(float));
    }
    /* noise_mask, dropped when its mean is 1 (all ones). */
    size_t mper = (size_t)(b->mh * b->mw);
    int all_ones = 1;
    for (int64_t k = 0; k < nm && all_ones; k++) {
        const struct mrow *m = &b->mrow[a + k];
        if (m->lat < 0)
            continue;
        const struct sd_latent *src = sd_latent_of(value_list_at(lats, m->lat));
        const float *row = src->noise_mask + (size_t)m->j * mper;
        for (size_t t = 0; t < mper && all_ones; t++)
            all_ones = row[t] == 1.0f;
    }
    if (!all_ones) {
        if (alloc_host_check_n((size_t)nm * mper, sizeof(float), &e) < 0) {
            sd_latent_free(l);
            return node_fail_err(c, ERR_DEVICE_OOM, &e);
        }
        l->noise_mask = xmalloc((size_t)nm * mper * sizeof(float));
        for (int64_t k = 0; k < nm; k++) {
            const struct mrow *m = &b->mrow[a + k];
            float *dst = l->noise_mask + (size_t)k * mper;
            if (m->lat < 0) {
                for (size_t t = 0; t < mper; t++)
                    dst[t] = 1.0f;
            } else {
                const struct sd_latent *src = sd_latent_of(value_list_at(lats, m->lat));
                memcpy(dst, src->noise_mask + (size_t)m->j * mper, mper * sizeof(float));
            }
        }
        l->mb = nm;
        l->mh = b->mh;
        l->mw = b->mw;
    }
    /* batch_index: always written, as ComfyUI does. */
    l->batch_index = xmalloc((size_t)(ni ? ni : 1) * sizeof(*l->batch_index));
    memcpy(l->batch_index, b->ind + a, (size_t)ni * sizeof(*l->batch_index));
    l->n_batch_index = (int)ni;
    if (*n_out == *cap_out) {
        *cap_out = *cap_out ? 2 * *cap_out : 4;
        *outs = xrealloc(*outs, (size_t)*cap_out * sizeof(**outs));
    }
    (*outs)[(*n_out)++] = sd_latent_value(l);
    return 0;
}

/* Keep the rows of each sequence from `from` on (get_slices' remainder, per sequence). */
static void keep_tail(struct rbatch *b, int64_t from)
{
    int64_t ns = b->ns > from ? b->ns - from : 0, nm = b->nm > from ? b->nm - from : 0,
            ni = b->ni > from ? b->ni - from : 0;
    memmove(b->srow_lat, b->srow_lat + (b->ns - ns), (size_t)ns * sizeof(*b->srow_lat));
    memmove(b->srow_j, b->srow_j + (b->ns - ns), (size_t)ns * sizeof(*b->srow_j));
    memmove(b->mrow, b->mrow + (b->nm - nm), (size_t)nm * sizeof(*b->mrow));
    memmove(b->ind, b->ind + (b->ni - ni), (size_t)ni * sizeof(*b->ind));
    b->ns = ns;
    b->nm = nm;
    b->ni = ni;
    b->valid = ns > 0; /* samples' remainder None: the next latent starts afresh */
}

static int rebatch_latents_run(struct node_ctx *c)
{
    struct value *lats = node_in_at(c, REBATCH_LATENTS);
    int64_t bs = value_list_at(node_in_at(c, REBATCH_LATENTS_BATCH), 0)->i;
    int n = value_list_len(lats), n_out = 0, cap_out = 0, rc = 0;
    struct value **outs = NULL;
    for (int i = 0; i < n; i++)
        if (!sd_latent_of(value_list_at(lats, i)))
            return node_fail(c, "RuntimeError", "latents item %d is not a LATENT", i);
    struct rbatch cur = {0}, next;
    int64_t processed = 0;
    for (int i = 0; i < n && rc >= 0; i++) {
        get_batch(sd_latent_of(value_list_at(lats, i)), i, processed, &next);
        processed += next.ni;
        if (!cur.valid) {
            rb_release(&cur);
            cur = next;
            memset(&next, 0, sizeof(next));
        } else if (next.w != cur.w || next.h != cur.h) {
            rc = emit(c, lats, &cur, 0, bs, &outs, &n_out, &cap_out);
            rb_release(&cur);
            cur = next;
            memset(&next, 0, sizeof(next));
        } else {
            rc = cat_batch(c, &cur, &next);
        }
        rb_release(&next);
        if (rc >= 0 && cur.ns > bs) {
            int64_t num = cur.ns / bs;
            for (int64_t k = 0; k < num && rc >= 0; k++)
                rc = emit(c, lats, &cur, k * bs, bs, &outs, &n_out, &cap_out);
            keep_tail(&cur, num * bs);
        }
    }
    if (rc >= 0 && cur.valid)
        rc = emit(c, lats, &cur, 0, bs, &outs, &n_out, &cap_out);
    rb_release(&cur);
    if (rc < 0) {
        for (int k = 0; k < n_out; k++)
            value_unref(outs[k]);
        xfree(outs);
        return rc;
    }
    node_set_output(c, 0, value_new_list("LATENT", outs, n_out));
    xfree(outs);
    return 0;
}

/* ---- RebatchImages --------------------------------------------------------------------- */

enum { REBATCH_IMAGES, REBATCH_IMAGES_BATCH, REBATCH_IMAGES_N };

static int rebatch_images_run(struct node_ctx *c)
{
    struct value *imgs = node_in_at(c, REBATCH_IMAGES);
    int64_t bs = value_list_at(node_in_at(c, REBATCH_IMAGES_BATCH), 0)->i;
    int n = value_list_len(imgs);
    /* all_images: every frame of every image, in order. */
    int64_t frames = 0;
    for (int i = 0; i < n; i++) {
        const struct value *v = value_list_at(imgs, i);
        if (v->kind != VALUE_TENSOR || v->ndim != 4)
            return node_fail(c, "RuntimeError", "images item %d is not an IMAGE", i);
        frames += v->shape[0];
    }
    int64_t n_out = (frames + bs - 1) / bs;
    struct value **outs = xcalloc((size_t)(n_out ? n_out : 1), sizeof(*outs));
    int i = 0;
    int64_t j = 0; /* the next frame: image i, row j */
    for (int64_t o = 0; o < n_out; o++) {
        int64_t take = frames - o * bs < bs ? frames - o * bs : bs;
        const struct value *first = value_list_at(imgs, i);
        int64_t h = first->shape[1], w = first->shape[2], ch = first->shape[3];
        struct value *out = node_new_image(c, take, h, w, ch);
        int rc = out ? 0 : ERR_DEVICE_OOM;
        size_t per = (size_t)(h * w * ch);
        for (int64_t k = 0; k < take && rc == 0; k++) {
            while (j >= value_list_at(imgs, i)->shape[0]) {
                i++;
                j = 0;
            }
            const struct value *src = value_list_at(imgs, i);
            if (src->shape[1] != h || src->shape[2] != w || src->shape[3] != ch) {
                /* torch.cat of frames of other sizes. */
                int d = src->shape[1] != h ? 1 : src->shape[2] != w ? 2 : 3;
                rc = node_fail(c, "RuntimeError",
                               "Sizes of tensors must match except in dimension 0. Expected size "
                               "%lld but got size %lld for tensor number %lld in the list.",
                               (long long)first->shape[d], (long long)src->shape[d], (long long)k);
                break;
            }
            memcpy(out->data + (size_t)k * per, src->data + (size_t)j * per, per * sizeof(float));
            j++;
        }
        if (rc < 0) {
            value_unref(out);
            for (int64_t k = 0; k < o; k++)
                value_unref(outs[k]);
            xfree(outs);
            return rc;
        }
        outs[o] = out;
    }
    node_set_output(c, 0, value_new_list("IMAGE", outs, (int)n_out));
    xfree(outs);
    return 0;
}

/* ---- declarations ---------------------------------------------------------------------- */

static const struct node_input_def rebatch_latents_in[] = {
    {.name = "latents", .type = "LATENT", .empty_opts = 1},
    {.name = "batch_size", .type = "INT", .def = NODE_I(1), .min = NODE_I(1), .max = NODE_I(4096)},
    NODE_INPUTS_END};
static const struct node_input_def rebatch_images_in[] = {
    {.name = "images", .type = "IMAGE", .empty_opts = 1},
    {.name = "batch_size", .type = "INT", .def = NODE_I(1), .min = NODE_I(1), .max = NODE_I(4096)},
    NODE_INPUTS_END};
static const struct node_output_def rebatch_latents_out[] = {{.type = "LATENT", .is_list = 1},
                                                             NODE_OUTPUTS_END};
static const struct node_output_def rebatch_images_out[] = {{.type = "IMAGE", .is_list = 1},
                                                            NODE_OUTPUTS_END};

const struct node_class nodes_rebatch_latents = {
    .name = "RebatchLatents", .display_name = "Rebatch Latents", .category = "latent/batch",
    .python_module = MODULE, .flags = NODE_CLASS_V3 | NODE_CLASS_INPUT_IS_LIST,
    .inputs = rebatch_latents_in, .n_inputs = REBATCH_LATENTS_N, .outputs = rebatch_latents_out,
    .run = rebatch_latents_run};
const struct node_class nodes_rebatch_images = {
    .name = "RebatchImages", .display_name = "Rebatch Images", .category = "image/batch",
    .python_module = MODULE, .flags = NODE_CLASS_V3 | NODE_CLASS_INPUT_IS_LIST,
    .inputs = rebatch_images_in, .n_inputs = REBATCH_IMAGES_N, .outputs = rebatch_images_out,
    .run = rebatch_images_run};

static const struct node_class *const rebatch_classes[] = {&nodes_rebatch_latents,
                                                           &nodes_rebatch_images};

void nodes_rebatch_register(struct node_registry *r)
{
    node_registry_add_all(r, rebatch_classes, sizeof(rebatch_classes) / sizeof(rebatch_classes[0]));
}

/*
 * LoRA key mapping and patch loading for SD1.x and SDXL (see lora.h).
 */
#include "lora.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "buf.h"
#include "log.h"
#include "safetensors.h"
#include "tensor.h"
#include "family.h"
#include "text_arch.h" /* TEXT_NAMING_OPENCLIP */
#include "unet_impl.h"

/* ---- forward map: module prefix -> checkpoint key ------------------------------------------ */

struct fwd {
    char *prefix; /* owned */
    char *key;    /* owned: full checkpoint name */
    int comp;
    /* rows > 0: the module addresses rows [row0, row0 + rows) of `key` only (q, k or v
     * of OpenCLIP's fused in_proj; sdxl.md §9). */
    int64_t row0, rows;
};

struct fmap {
    struct fwd *v;
    size_t n, cap;
};

static void fmap_add_rows(struct fmap *m, const char *prefix, const char *key, int comp,
                          int64_t row0, int64_t rows)
{
    if (m->n == m->cap) {
        m->cap = m->cap ? 2 * m->cap : 4096;
        m->v = xrealloc(m->v, m->cap * sizeof(*m->v));
    }
    m->v[m->n].prefix = xstrdup(prefix);
    m->v[m->n].key = xstrdup(key);
    m->v[m->n].comp = comp;
    m->v[m->n].row0 = row0;
    m->v[m->n].rows = rows;
    m->n++;
}

static void fmap_add(struct fmap *m, const char *prefix, const char *key, int comp)
{
    fmap_add_rows(m, prefix, key, comp, 0, 0);
}

static int cmp_fwd(const void *a, const void *b)
{
    return strcmp(((const struct fwd *)a)->prefix, ((const struct fwd *)b)->prefix);
}

static void fmap_release(struct fmap *m)
{
    for (size_t i = 0; i < m->n; i++) {
        xfree(m->v[i].prefix);
        xfree(m->v[i].key);
    }
    xfree(m->v);
}

static const struct fwd *fmap_find(const struct fmap *m, const char *prefix)
{
    struct fwd k = {.prefix = (char *)prefix};
    return bsearch(&k, m->v, m->n, sizeof(*m->v), cmp_fwd);
}

static void mangle(const char *in, char *out, size_t size)
{
    snprintf(out, size, "%s", in);
    for (char *p = out; *p; p++)
        if (*p == '.')
            *p = '_';
}

static int starts_with(const char *s, const char *p)
{
    return strncmp(s, p, strlen(p)) == 0;
}

/* Resnet sub-module names, ldm -> diffusers (unet__res_diffusers). */
static const char *res_sub(const char *s, const char **rest)
{
    for (int i = 0; i < UNET_RES_MODULES; i++) {
        const char *ldm = unet__res_diffusers[i][0];
        size_t l = strlen(ldm);
        if (strncmp(s, ldm, l) == 0 && (s[l] == 0 || s[l] == '.')) {
            *rest = s + l;
            return unet__res_diffusers[i][1];
        }
    }
    return NULL;
}

/* The diffusers path of an ldm module path (without ".weight"); 0 on success. */
static int ldm_to_diffusers(const char *x, char *out, size_t size)
{
    int n, sub, len;
    const char *rest;
    if (!strcmp(x, "input_blocks.0.0"))
        return snprintf(out, size, "conv_in"), 0;
    if (!strcmp(x, "time_embed.0"))
        return snprintf(out, size, "time_embedding.linear_1"), 0;
    if (!strcmp(x, "time_embed.2"))
        return snprintf(out, size, "time_embedding.linear_2"), 0;
    if (!strcmp(x, "out.0"))
        return snprintf(out, size, "conv_norm_out"), 0;
    if (!strcmp(x, "out.2"))
        return snprintf(out, size, "conv_out"), 0;
    if (!strcmp(x, "label_emb.0.0")) /* SDXL's ADM MLP (sdxl.md §9) */
        return snprintf(out, size, "add_embedding.linear_1"), 0;
    if (!strcmp(x, "label_emb.0.2"))
        return snprintf(out, size, "add_embedding.linear_2"), 0;
    if (sscanf(x, "input_blocks.%d.%d.%n", &n, &sub, &len) == 2 && n >= 1) {
        int lvl = (n - 1) / 3, i = (n - 1) % 3;
        const char *s = x + len;
        if (i == 2) /* downsampler */
            return !strcmp(s, "op") ? (snprintf(out, size, "down_blocks.%d.downsamplers.0.conv", lvl), 0)
                                    : -1;
        if (sub == 0) {
            const char *d = res_sub(s, &rest);
            return d ? (snprintf(out, size, "down_blocks.%d.resnets.%d.%s%s", lvl, i, d, rest), 0) : -1;
        }
        return snprintf(out, size, "down_blocks.%d.attentions.%d.%s", lvl, i, s), 0;
    }
    if (sscanf(x, "middle_block.%d.%n", &sub, &len) == 1) {
        const char *s = x + len;
        if (sub == 1)
            return snprintf(out, size, "mid_block.attentions.0.%s", s), 0;
        const char *d = res_sub(s, &rest);
        return d ? (snprintf(out, size, "mid_block.resnets.%d.%s%s", sub / 2, d, rest), 0) : -1;
    }
    if (sscanf(x, "output_blocks.%d.%d.%n", &n, &sub, &len) == 2) {
        int lvl = n / 3, i = n % 3;
        const char *s = x + len;
        if (!strcmp(s, "conv") && sub >= 1)
            return snprintf(out, size, "up_blocks.%d.upsamplers.0.conv", lvl), 0;
        if (sub == 0) {
            const char *d = res_sub(s, &rest);
            return d ? (snprintf(out, size, "up_blocks.%d.resnets.%d.%s%s", lvl, i, d, rest), 0) : -1;
        }
        return snprintf(out, size, "up_blocks.%d.attentions.%d.%s", lvl, i, s), 0;
    }
    return -1;
}

/* diffusers attention-processor spelling: ".to_q" -> ".processor.to_q", ".to_out.0" ->
 * ".processor.to_out". Returns 0 if y names an attention projection. */
static int processor_style(const char *y, char *out, size_t size)
{
    const char *p = strstr(y, ".to_");
    if (!p)
        return -1;
    size_t pre = (size_t)(p - y);
    const char *tail = p + 1; /* "to_q" or "to_out.0" */
    if (!strcmp(tail, "to_out.0"))
        tail = "to_out";
    snprintf(out, size, "%.*s.processor.%s", (int)pre, y, tail);
    return 0;
}

struct build_ctx {
    struct fmap *m;
    const struct model_config *cfg;
};

/*
 * The module prefixes of a text-encoder weight (sdxl.md §9). `x` is its internal name
 * without ".weight" ("text_model.encoder.layers.3.mlp.fc1"). CLIP-L answers to
 * lora_te_/lora_te1_ and the diffusers/generic names; SDXL's bigG (the second encoder)
 * to lora_te2_; the refiner's bigG, its only encoder, to the first encoder's names.
 */
/* bigg: the refiner's lone bigG; h: SD2's OpenCLIP-H, named as a first encoder (ComfyUI's
 * clip_h keys: lora_te_, lora_te1_, text_encoder.) with its own generic prefix. */
static void text_prefixes(struct fmap *m, const char *x, const char *key, int comp, int bigg,
                          int h, int64_t row0, int64_t rows)
{
    static const char *const first[] = {"lora_te_", "lora_te1_", "text_encoder.", NULL};
    static const char *const second[] = {"lora_te2_", "text_encoder_2.", NULL};
    static const char *const refiner[] = {"lora_te_", "lora_prior_te_", "text_encoder.", NULL};
    const char *const *names = comp == MODEL_CLIP2 ? second : bigg && !h ? refiner : first;
    char mg[256], buf[320];
    mangle(x, mg, sizeof(mg));
    for (int i = 0; names[i]; i++) {
        int kohya = names[i][strlen(names[i]) - 1] == '_';
        snprintf(buf, sizeof(buf), "%s%s", names[i], kohya ? mg : x);
        fmap_add_rows(m, buf, key, comp, row0, rows);
    }
    snprintf(buf, sizeof(buf), "text_encoders.%s.transformer.%s",
             h ? "clip_h" : bigg ? "clip_g" : "clip_l", x);
    fmap_add_rows(m, buf, key, comp, row0, rows);
}

static void on_key(void *user, const struct model_key *k)
{
    struct build_ctx *bc = user;
    struct fmap *m = bc->m;
    char base[192], mg[256], y[192], yp[224], buf[320];
    size_t nl = strlen(k->name);
    if (k->ndim < 2)
        return; /* LoRA adapts linears and convs */
    if (k->comp == MODEL_UNET) {
        if (nl < 7 || strcmp(k->name + nl - 7, ".weight") != 0)
            return;
        const char *x = k->name + k->rel;
        snprintf(base, sizeof(base), "%.*s", (int)(strlen(x) - 7), x);
        mangle(base, mg, sizeof(mg));
        snprintf(buf, sizeof(buf), "lora_unet_%s", mg);
        fmap_add(m, buf, k->name, MODEL_UNET);
        snprintf(buf, sizeof(buf), "diffusion_model.%s", base);
        fmap_add(m, buf, k->name, MODEL_UNET);
        if (ldm_to_diffusers(base, y, sizeof(y)) == 0) {
            mangle(y, mg, sizeof(mg));
            snprintf(buf, sizeof(buf), "lora_unet_%s", mg);
            fmap_add(m, buf, k->name, MODEL_UNET);
            snprintf(buf, sizeof(buf), "lycoris_%s", mg);
            fmap_add(m, buf, k->name, MODEL_UNET);
            snprintf(buf, sizeof(buf), "unet.%s", y);
            fmap_add(m, buf, k->name, MODEL_UNET);
            if (processor_style(y, yp, sizeof(yp)) == 0) {
                fmap_add(m, yp, k->name, MODEL_UNET);
                snprintf(buf, sizeof(buf), "unet.%s", yp);
                fmap_add(m, buf, k->name, MODEL_UNET);
            }
        }
    } else if (k->comp == MODEL_CLIP || k->comp == MODEL_CLIP2) {
        const struct text_arch *ta = &bc->cfg->text[k->comp - MODEL_CLIP];
        const char *x = k->name + k->rel; /* internal (HF) names, also for OpenCLIP files */
        size_t xl = strlen(x);
        if (!starts_with(x, "encoder.layers.") || xl < 7 || strcmp(x + xl - 7, ".weight") != 0)
            return;
        int bigg = ta->naming == TEXT_NAMING_OPENCLIP, h = bc->cfg->family == MODEL_FAMILY_SD2;
        const char *fused = strstr(x, ".self_attn.in_proj.weight");
        if (fused) { /* OpenCLIP's [3d, d] q/k/v: one prefix per row block */
            static const char *const qkv[] = {"q_proj", "k_proj", "v_proj"};
            for (int i = 0; i < 3; i++) {
                snprintf(base, sizeof(base), "text_model.%.*s.self_attn.%s",
                         (int)(fused - x), x, qkv[i]);
                text_prefixes(m, base, k->name, k->comp, bigg, h, i * ta->width, ta->width);
            }
            return;
        }
        snprintf(base, sizeof(base), "text_model.%.*s", (int)(xl - 7), x);
        text_prefixes(m, base, k->name, k->comp, bigg, h, 0, 0);
    }
}

static void fmap_build(const struct model_config *cfg, struct fmap *m)
{
    memset(m, 0, sizeof(*m));
    struct build_ctx c = {.m = m, .cfg = cfg};
    model_layout_build(cfg, on_key, &c);
    qsort(m->v, m->n, sizeof(*m->v), cmp_fwd);
}

int lora_map_prefix(const struct model_config *cfg, const char *prefix, char *out, size_t size)
{
    struct fmap m;
    fmap_build(cfg, &m);
    const struct fwd *f = fmap_find(&m, prefix);
    int comp = -1;
    if (f) {
        snprintf(out, size, "%s", f->key);
        comp = f->comp;
    }
    fmap_release(&m);
    return comp;
}

/* ---- file side -------------------------------------------------------------------------------- */

enum part { PART_UP, PART_DOWN, PART_ALPHA, PART_OTHER };

static const struct {
    const char *suffix;
    enum part part;
} suffixes[] = {
    {".lora_up.weight", PART_UP},       {".lora_down.weight", PART_DOWN},
    {"_lora.up.weight", PART_UP},       {"_lora.down.weight", PART_DOWN},
    {".lora_B.weight", PART_UP},        {".lora_A.weight", PART_DOWN},
    {".lora.up.weight", PART_UP},       {".lora.down.weight", PART_DOWN},
    {".lora_linear_layer.up.weight", PART_UP}, {".lora_linear_layer.down.weight", PART_DOWN},
    {".alpha", PART_ALPHA},
};

struct module {
    char *prefix; /* owned */
    const struct st_tensor *up, *down, *alpha;
};

static int cmp_module(const void *a, const void *b)
{
    return strcmp(((const struct module *)a)->prefix, ((const struct module *)b)->prefix);
}

static int to_tdt(enum st_dtype d, enum tensor_dtype *out)
{
    switch (d) {
    case ST_DTYPE_F32: *out = TENSOR_F32; return 0;
    case ST_DTYPE_F16: *out = TENSOR_F16; return 0;
    case ST_DTYPE_BF16: *out = TENSOR_BF16; return 0;
    default: return -1;
    }
}

/* `model`: the family name the messages give (a LoRA of another type fails here). */
static int add_module(const struct st_file *f, const struct module *md, const struct fwd *fw,
                      struct patcher *p, float strength, const char *model, struct err *e)
{
    const struct st_tensor *up = md->up, *down = md->down;
    enum tensor_dtype dt_up, dt_down;
    if (to_tdt(up->dtype, &dt_up) < 0 || to_tdt(down->dtype, &dt_down) < 0)
        return err_set(e, ERR_INVALID, "lora '%s': tensor '%s' is not a float tensor", f->path,
                       up->name);
    /* Rank 0 is no pair either: the shape checks below divide by it (a rank-0 file
     * crashed the executor with SIGFPE; found with tests/fuzz/fuzz_lora). */
    if (up->ndim < 2 || down->ndim < 2 || up->shape[1] != down->shape[0] || down->shape[0] <= 0)
        return err_set(e, ERR_INVALID,
                       "lora '%s': tensors '%s' and '%s' do not form a low-rank pair", f->path,
                       up->name, down->name);
    int64_t rank = down->shape[0];
    /* The factors must rebuild W's shape: up [out, r(,1,1)], down [r, in(,kh,kw)]. */
    struct patcher_model *pm = patcher_model_of(p);
    int layer, idx, wnd;
    enum tensor_dtype wdt;
    int64_t wsh[4];
    if (patcher_model_find(pm, fw->key, &layer, &idx) < 0 ||
        !patcher_model_host_data(pm, layer, idx, &wdt, &wnd, wsh))
        return err_set(e, ERR_INVALID, "lora '%s': weight '%s' not in the model", f->path, fw->key);
    uint64_t wn = 1;
    for (int i = 0; i < wnd; i++)
        wn *= (uint64_t)wsh[i];
    if ((int64_t)(st_tensor_numel(up) / (uint64_t)rank) != wsh[0] ||
        st_tensor_numel(down) / (uint64_t)rank * (uint64_t)wsh[0] != wn)
        return err_set(e, ERR_INVALID,
                       "lora '%s': tensor '%s' (rank %lld) does not fit weight '%s' of this %s "
                       "model (a LoRA for another model type?)",
                       f->path, up->name, (long long)rank, fw->key, model);
    float alpha = 0;
    int has_alpha = 0;
    if (md->alpha && st_tensor_numel(md->alpha) == 1) {
        if (st_tensor_to_f32(f, md->alpha, &alpha, e) < 0)
            return err_prefix(e, "lora");
        has_alpha = 1;
    }
    const void *u = st_tensor_data(f, up), *d = st_tensor_data(f, down);
    float *uf = NULL, *df = NULL;
    enum tensor_dtype dt = dt_up;
    if (dt_up != dt_down) { /* one factor dtype per patch: widen both */
        uf = xmalloc(st_tensor_numel(up) * 4);
        df = xmalloc(st_tensor_numel(down) * 4);
        st_tensor_to_f32(f, up, uf, e);
        st_tensor_to_f32(f, down, df, e);
        u = uf;
        d = df;
        dt = TENSOR_F32;
    }
    int rc = patcher_add_lora(p, fw->key, u, d, dt, rank, alpha, has_alpha, strength, e);
    xfree(uf);
    xfree(df);
    if (rc < 0) {
        err_clear(e);
        return err_set(e, ERR_INVALID,
                       "lora '%s': tensor '%s' (rank %lld) does not fit weight '%s' of this %s "
                       "model (a LoRA for another model type?)",
                       f->path, up->name, (long long)rank, fw->key, model);
    }
    return 0;
}

/*
 * The q, k and v modules of one fused in_proj weight [3d, d], added as ONE patch:
 * up = blockdiag(s_q U_q, s_k U_k, s_v U_v) [3d, R], down = [D_q; D_k; D_v] [R, d] with
 * R the sum of their ranks and s = alpha / rank, so that up @ down adds each module's
 * delta to its own rows (ComfyUI splits in_proj at load instead; same sums). A module
 * the file lacks leaves its rows alone.
 */
struct fused {
    const char *key; /* borrowed from the map */
    const struct module *md[3];
    const struct fwd *fw[3];
    int n;
};

static int add_fused(const struct st_file *f, const struct fused *fu, struct patcher *p,
                     float strength, const char *model, struct err *e)
{
    struct patcher_model *pm = patcher_model_of(p);
    int layer, idx, wnd;
    enum tensor_dtype wdt;
    int64_t wsh[4], R = 0;
    if (patcher_model_find(pm, fu->key, &layer, &idx) < 0 ||
        !patcher_model_host_data(pm, layer, idx, &wdt, &wnd, wsh) || wnd != 2)
        return err_set(e, ERR_INVALID, "lora '%s': weight '%s' not in the model", f->path, fu->key);
    for (int i = 0; i < fu->n; i++) {
        const struct st_tensor *up = fu->md[i]->up, *down = fu->md[i]->down;
        enum tensor_dtype dt;
        if (to_tdt(up->dtype, &dt) < 0 || to_tdt(down->dtype, &dt) < 0 || up->ndim != 2 ||
            down->ndim != 2 || down->shape[0] <= 0 || up->shape[1] != down->shape[0] ||
            up->shape[0] != fu->fw[i]->rows || down->shape[1] != wsh[1])
            return err_set(e, ERR_INVALID,
                           "lora '%s': tensor '%s' does not fit rows %lld..%lld of weight '%s' "
                           "of this %s model (a LoRA for another model type?)",
                           f->path, up->name, (long long)fu->fw[i]->row0,
                           (long long)(fu->fw[i]->row0 + fu->fw[i]->rows), fu->key, model);
        R += down->shape[0];
    }
    float *U = xcalloc((size_t)(wsh[0] * R), sizeof(float));
    float *D = xmalloc((size_t)(R * wsh[1]) * sizeof(float));
    float *tmp = NULL;
    int rc = 0;
    int64_t c0 = 0;
    for (int i = 0; i < fu->n && rc == 0; i++) {
        const struct module *md = fu->md[i];
        int64_t r = md->down->shape[0], rows = fu->fw[i]->rows, row0 = fu->fw[i]->row0;
        float alpha = 0;
        if (md->alpha && st_tensor_numel(md->alpha) == 1 &&
            (rc = st_tensor_to_f32(f, md->alpha, &alpha, e)) < 0)
            break;
        float s = md->alpha && st_tensor_numel(md->alpha) == 1 ? alpha / (float)r : 1.0f;
        tmp = xrealloc(tmp, (size_t)(rows * r) * sizeof(float));
        if ((rc = st_tensor_to_f32(f, md->up, tmp, e)) < 0 ||
            (rc = st_tensor_to_f32(f, md->down, D + c0 * wsh[1], e)) < 0)
            break;
        for (int64_t o = 0; o < rows; o++)
            for (int64_t j = 0; j < r; j++)
                U[(row0 + o) * R + c0 + j] = s * tmp[o * r + j];
        c0 += r;
    }
    if (rc == 0)
        rc = patcher_add_lora(p, fu->key, U, D, TENSOR_F32, R, 0, 0, strength, e);
    xfree(U);
    xfree(D);
    xfree(tmp);
    return rc < 0 ? err_prefix(e, "lora '%s'", f->path) : 0;
}

int lora_apply(const char *path, const struct model_config *cfg, struct patcher *unet,
                    float strength_model, struct patcher *clip, float strength_clip,
                    struct patcher *clip2, struct lora_stats *stats, struct err *e)
{
    struct st_file *f = NULL;
    struct lora_stats st = {0};
    struct fmap m = {0};
    struct module *mods = NULL;
    struct fused *fused = NULL;
    size_t nm = 0, nfused = 0;
    struct buf unknown;
    buf_init(&unknown);
    const struct model_family *mf = model_family_get(cfg->family);
    const char *fam = mf ? mf->name : "loaded"; /* for the messages */
    int rc;
    if ((rc = st_open(path, &f, e)) < 0)
        goto out;
    fmap_build(cfg, &m);
    mods = xcalloc(f->n_tensors ? f->n_tensors : 1, sizeof(*mods));
    /* Group tensors by module prefix. */
    for (size_t i = 0; i < f->n_tensors; i++) {
        const struct st_tensor *t = &f->tensors[i];
        size_t tl = strlen(t->name);
        int found = -1;
        for (size_t s = 0; s < sizeof(suffixes) / sizeof(suffixes[0]); s++) {
            size_t sl = strlen(suffixes[s].suffix);
            if (tl > sl && !strcmp(t->name + tl - sl, suffixes[s].suffix)) {
                found = (int)s;
                break;
            }
        }
        if (found < 0) {
            st.unmatched++;
            if (unknown.len < 400)
                buf_printf(&unknown, "%s'%s'", unknown.len ? ", " : "", t->name);
            continue;
        }
        char *prefix = xstrndup(t->name, tl - strlen(suffixes[found].suffix));
        struct module *md = NULL;
        for (size_t k = 0; k < nm; k++)
            if (!strcmp(mods[k].prefix, prefix)) {
                md = &mods[k];
                break;
            }
        if (!md) {
            md = &mods[nm++];
            md->prefix = prefix;
        } else {
            xfree(prefix);
        }
        switch (suffixes[found].part) {
        case PART_UP: md->up = t; break;
        case PART_DOWN: md->down = t; break;
        case PART_ALPHA: md->alpha = t; break;
        default: break;
        }
    }
    qsort(mods, nm, sizeof(*mods), cmp_module);
    st.modules = (int)nm;
    fused = xcalloc(nm ? nm : 1, sizeof(*fused));
    int matched = 0;
    for (size_t k = 0; k < nm; k++) {
        const struct module *md = &mods[k];
        const struct fwd *fw = fmap_find(&m, md->prefix);
        if (!fw || !md->up || !md->down) {
            st.unmatched++;
            if (unknown.len < 400)
                buf_printf(&unknown, "%s'%s'", unknown.len ? ", " : "", md->prefix);
            continue;
        }
        matched++;
        struct patcher *p = fw->comp == MODEL_UNET ? unet : fw->comp == MODEL_CLIP2 ? clip2 : clip;
        if (!p)
            continue;
        if (fw->rows > 0) { /* q/k/v of a fused projection: added together below */
            size_t u = 0;
            while (u < nfused && strcmp(fused[u].key, fw->key) != 0)
                u++;
            if (u == nfused)
                fused[nfused++].key = fw->key;
            if (fused[u].n < 3) {
                fused[u].md[fused[u].n] = md;
                fused[u].fw[fused[u].n++] = fw;
            }
            continue;
        }
        float s = fw->comp == MODEL_UNET ? strength_model : strength_clip;
        if ((rc = add_module(f, md, fw, p, s, fam, e)) < 0)
            goto out;
        if (fw->comp == MODEL_UNET)
            st.unet_patched++;
        else
            st.clip_patched++;
    }
    for (size_t u = 0; u < nfused; u++) {
        struct patcher *p = fused[u].fw[0]->comp == MODEL_CLIP2 ? clip2 : clip;
        if ((rc = add_fused(f, &fused[u], p, strength_clip, fam, e)) < 0)
            goto out;
        st.clip_patched += fused[u].n;
    }
    if (matched == 0) {
        rc = err_set(e, ERR_INVALID,
                     "lora '%s': none of its %zu tensors address a weight of this %s model (a "
                     "LoRA for another model type?)",
                     path, f->n_tensors, model_family_get(cfg->family)->name);
        goto out;
    }
    /* The factors were copied into the patches: only a change while we read them
     * matters, and then they may mix two files. */
    if ((rc = st_check(f, e)) < 0)
        goto out;
    if (st.unmatched)
        log_warn("lora '%s': %d keys not loaded: %s%s", path, st.unmatched, unknown.ptr,
                 unknown.len >= 400 ? ", ..." : "");
    log_info("lora '%s': %d unet and %d text encoder patches", path, st.unet_patched,
             st.clip_patched);
    rc = 0;
out:
    for (size_t k = 0; k < nm; k++)
        xfree(mods[k].prefix);
    xfree(mods);
    xfree(fused);
    fmap_release(&m);
    buf_release(&unknown);
    st_close(f);
    if (stats)
        *stats = st;
    return rc;
}

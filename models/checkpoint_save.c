/*
 * checkpoint_save.c — patchers' baked weights into a safetensors file (see
 * checkpoint_save.h). Two passes over the same order: declare every output tensor
 * (the header comes first in the file), then load each part and write its layers.
 */
#include "checkpoint_save.h"

#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "checkpoint.h"
#include "family.h"
#include "safetensors.h"
#include "tensor.h"

/* The file tensors one weight becomes: one, or three row blocks of a fused q/k/v. */
struct out_names {
    int n;
    int transpose; /* a 2-D weight written transposed */
    char name[3][256];
};

static int starts_with(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

/* CLIPSave's name for internal text-encoder name `rel` (Hugging Face, from the
 * component prefix on). */
static void clip_names(const char *rel, struct out_names *o)
{
    const char *qkv = strstr(rel, "self_attn.in_proj.");
    if (strcmp(rel, "text_projection") == 0) {
        /* OpenCLIP's [width, proj] matrix is nn.Linear's [proj, width] weight. */
        snprintf(o->name[0], sizeof(o->name[0]), "text_projection.weight");
        o->transpose = 1;
    } else if (qkv) {
        static const char *const part[3] = {"q", "k", "v"};
        int head = (int)(qkv - rel);
        const char *tail = qkv + strlen("self_attn.in_proj.");
        o->n = 3;
        for (int i = 0; i < 3; i++)
            snprintf(o->name[i], sizeof(o->name[i]), "text_model.%.*sself_attn.%s_proj.%s", head,
                     rel, part[i], tail);
    } else {
        snprintf(o->name[0], sizeof(o->name[0]), "text_model.%s", rel);
    }
}

static int out_names_of(const struct model_config *cfg, enum model_component comp,
                        enum ckpt_save_naming naming, const char *key, int ndim,
                        struct out_names *o, struct err *e)
{
    const char *pre = model_prefix(cfg, comp);
    const struct model_family *f = model_family_get(cfg->family);
    memset(o, 0, sizeof(*o));
    o->n = 1;
    if (!pre || !f || !starts_with(key, pre))
        return err_set(e, ERR_INVALID, "cannot save weight '%s': not a %s weight of %s", key,
                       model_component_name(comp), f ? f->name : "this model");
    const char *rel = key + strlen(pre);
    int text = comp == MODEL_CLIP || comp == MODEL_CLIP2;
    switch (naming) {
    case CKPT_SAVE_CHECKPOINT:
        if (text && f->text_naming[comp - MODEL_CLIP] != TEXT_NAMING_HF) {
            char file[256];
            text_name_to_file(f->text_naming[comp - MODEL_CLIP], rel, file, sizeof(file));
            snprintf(o->name[0], sizeof(o->name[0]), "%s%s", pre, file);
        } else {
            snprintf(o->name[0], sizeof(o->name[0]), "%s", key);
        }
        break;
    case CKPT_SAVE_BARE:
        snprintf(o->name[0], sizeof(o->name[0]), "%s", rel);
        break;
    case CKPT_SAVE_CLIP:
        if (!text)
            return err_set(e, ERR_INVALID, "cannot save weight '%s' as a CLIP weight", key);
        clip_names(rel, o);
        break;
    }
    if (o->transpose && ndim != 2)
        o->transpose = 0;
    return 0;
}

static enum st_dtype st_dtype_of(enum tensor_dtype dt)
{
    switch (dt) {
    case TENSOR_F16: return ST_DTYPE_F16;
    case TENSOR_BF16: return ST_DTYPE_BF16;
    default: return ST_DTYPE_F32;
    }
}

/* Declare the output tensors of every weight of `part`, in layer order. */
static int declare_part(struct st_writer *w, const struct model_config *cfg,
                        const struct ckpt_save_part *part, enum ckpt_save_naming naming,
                        struct err *e)
{
    const struct patcher_model *m = patcher_model_of(part->p);
    for (int l = 0; l < patcher_model_layer_count(m); l++) {
        for (int j = 0; j < patcher_model_weight_count(m, l); j++) {
            enum tensor_dtype dt = patcher_model_weight_dtype(m, l, j);
            int ndim;
            int64_t shape[4];
            patcher_model_host_data(m, l, j, NULL, &ndim, shape);
            struct out_names o;
            int rc = out_names_of(cfg, part->comp, naming, patcher_model_weight_key(m, l, j),
                                  ndim, &o, e);
            if (rc < 0)
                return rc;
            if (o.transpose) {
                int64_t t = shape[0];
                shape[0] = shape[1];
                shape[1] = t;
            }
            if (o.n == 3)
                shape[0] /= 3; /* rows of q, k, v */
            for (int i = 0; i < o.n; i++)
                st_writer_add(w, o.name[i], st_dtype_of(dt), ndim, shape);
        }
    }
    return 0;
}

/* Write one acquired weight: read back as f32 (exact), reorder, store as `dt`. */
static int write_weight(struct st_writer *w, const struct tensor *t, enum tensor_dtype dt,
                        const struct out_names *o, struct err *e)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    size_t es = tensor_dtype_size(dt);
    float *f = xmalloc((size_t)n * sizeof(float));
    void *bytes = xmalloc((size_t)n * es);
    int rc = tensor_read_f32(t, f, n, e);
    if (rc == 0 && o->transpose) {
        float *tr = xmalloc((size_t)n * sizeof(float));
        int64_t r = t->shape[0], c = t->shape[1];
        for (int64_t i = 0; i < r; i++)
            for (int64_t k = 0; k < c; k++)
                tr[k * r + i] = f[i * c + k];
        xfree(f);
        f = tr;
    }
    if (rc == 0) {
        tensor_convert_host(bytes, dt, f, TENSOR_F32, (size_t)n);
        /* A fused q/k/v is three row blocks, contiguous: one write each. */
        size_t part = (size_t)n * es / (size_t)o->n;
        for (int i = 0; rc == 0 && i < o->n; i++)
            rc = st_writer_write(w, (char *)bytes + (size_t)i * part, part, e);
    }
    xfree(bytes);
    xfree(f);
    return rc;
}

/* Load part's model, then write its layers one at a time. */
static int write_part(struct mm *mm, struct st_writer *w, const struct model_config *cfg,
                      const struct ckpt_save_part *part, enum ckpt_save_naming naming,
                      struct err *e)
{
    const struct patcher_model *m = patcher_model_of(part->p);
    struct mm_request req = {.models = {part->p}, .n_models = 1};
    struct mm_report rep;
    int rc = mm_load_models(mm, &req, &rep, e);
    if (rc < 0)
        return rc;
    for (int l = 0; rc == 0 && l < patcher_model_layer_count(m); l++) {
        struct tensor *const *wt;
        if ((rc = patcher_acquire(part->p, l, &wt, e)) < 0)
            break;
        for (int j = 0; rc == 0 && j < patcher_model_weight_count(m, l); j++) {
            enum tensor_dtype dt = patcher_model_weight_dtype(m, l, j);
            struct out_names o;
            rc = out_names_of(cfg, part->comp, naming, patcher_model_weight_key(m, l, j),
                              wt[j]->ndim, &o, e);
            if (rc == 0)
                rc = write_weight(w, wt[j], dt, &o, e);
        }
        patcher_release(part->p, l);
    }
    mm_node_end(mm, &rep);
    return rc;
}

static void writer_meta(void *user, const char *key, const char *val)
{
    st_writer_meta(user, key, val);
}

void ckpt_save_heads_meta(const struct model_config *cfg,
                          void (*fn)(void *user, const char *key, const char *val), void *user)
{
    if (model_config_is_canonical(cfg))
        return;
    char v[32];
    snprintf(v, sizeof(v), "%d", cfg->text[0].heads);
    fn(user, "latentd.clip_heads", v);
    snprintf(v, sizeof(v), "%d", cfg->unet.heads);
    if (cfg->unet.heads) /* a head width (SDXL) needs no saying */
        fn(user, "latentd.unet_heads", v);
}

int ckpt_save(struct mm *mm, const char *path, const struct model_config *cfg,
              const struct ckpt_save_part *parts, int n_parts, enum ckpt_save_naming naming,
              const struct ckpt_save_meta *meta, int n_meta, struct err *e)
{
    if (!mm)
        return err_set(e, ERR_INVALID, "cannot save '%s': no memory manager", path);
    struct st_writer *w = st_writer_new();
    int rc = 0;
    for (int i = 0; rc == 0 && i < n_parts; i++)
        rc = declare_part(w, cfg, &parts[i], naming, e);
    /* save_checkpoint's extra keys: empty "v_pred" (and "ztsnr") tensors mark a
     * v-prediction UNet, which SDXL's detection reads back (family.h, vpred_key). */
    int unet = 0;
    for (int i = 0; i < n_parts; i++)
        unet |= parts[i].comp == MODEL_UNET;
    static const int64_t empty[1] = {0};
    int markers = 0;
    if (rc == 0 && naming == CKPT_SAVE_CHECKPOINT && unet && cfg->prediction) {
        st_writer_add(w, "v_pred", ST_DTYPE_F32, 1, empty);
        markers++;
        if (cfg->zsnr) {
            st_writer_add(w, "ztsnr", ST_DTYPE_F32, 1, empty);
            markers++;
        }
    }
    for (int i = 0; rc == 0 && i < n_meta; i++)
        st_writer_meta(w, meta[i].key, meta[i].value);
    if (naming == CKPT_SAVE_CHECKPOINT)
        ckpt_save_heads_meta(cfg, writer_meta, w);
    else if (naming == CKPT_SAVE_CLIP && n_parts == 1) /* CLIPLoader reads a shrunk one back */
        model_text_file_meta(cfg, parts[0].comp, writer_meta, w);
    if (rc == 0)
        rc = st_writer_begin(w, path, e);
    for (int i = 0; rc == 0 && i < n_parts; i++)
        rc = write_part(mm, w, cfg, &parts[i], naming, e);
    for (int i = 0; rc == 0 && i < markers; i++)
        rc = st_writer_write(w, NULL, 0, e); /* the empty markers, declared last */
    if (rc == 0)
        rc = st_writer_finish(w, e);
    st_writer_free(w); /* unfinished: removes the temporary */
    return rc;
}

int ckpt_save_modelspec(const struct model_config *cfg, const char *title,
                        struct ckpt_save_meta out[5])
{
    const struct model_family *f = model_family_get(cfg->family);
    const char *arch = NULL;
    int n = 0;
    if (cfg->family == MODEL_FAMILY_SDXL)
        arch = "stable-diffusion-xl-v1-base";
    else if (cfg->family == MODEL_FAMILY_SDXL_REFINER)
        arch = "stable-diffusion-xl-v1-refiner";
    /* ComfyUI has no modelspec architecture for SD1.x yet (a TODO in save_checkpoint). */
    if (arch) {
        out[n++] = (struct ckpt_save_meta){"modelspec.architecture", arch};
        out[n++] = (struct ckpt_save_meta){"modelspec.sai_model_spec", "1.0.0"};
        out[n++] = (struct ckpt_save_meta){"modelspec.implementation", "sgm"};
        out[n++] = (struct ckpt_save_meta){"modelspec.title", title};
    }
    /* The UNet's own type, not a ModelSamplingDiscrete patch (ComfyUI reads model_type);
     * its empty "v_pred" tensor is not written: SD2 768-v is told by its weights. */
    if (cfg->prediction)
        out[n++] = (struct ckpt_save_meta){"modelspec.predict_key", "v"};
    else if (f && f->sampling.eps)
        out[n++] = (struct ckpt_save_meta){"modelspec.predict_key", "epsilon"};
    return n;
}

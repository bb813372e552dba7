/*
 * The attention patches' per-call side and the MODEL settings' lifetime (see
 * sd_model_patches.h).
 */
#include "sd_model_patches.h"

#include <string.h>

#include "alloc.h"
#include "hypernetwork.h"
#include "sampling_noise.h"
#include "unet_attn1.h"

struct sd_model_patches *sd_model_patches_clone(const struct sd_model_patches *p)
{
    if (!p)
        return NULL;
    struct sd_model_patches *c = xmalloc(sizeof *c);
    *c = *p;
    if (c->perp_neg_empty)
        value_ref(c->perp_neg_empty);
    for (int i = 0; i < c->n_hn; i++)
        hypernetwork_ref(c->hn[i]);
    return c;
}

void sd_model_patches_free(struct sd_model_patches *p)
{
    if (!p)
        return;
    value_unref(p->perp_neg_empty);
    for (int i = 0; i < p->n_hn; i++)
        hypernetwork_free(p->hn[i]);
    xfree(p);
}

void sd_sag_capture_release(struct sd_sag_capture *c)
{
    xfree(c->colsum);
    memset(c, 0, sizeof *c);
}

int sd_call_has_attn1(const struct sd_call *c)
{
    return c && c->patches && (c->patches->hypertile_on || (c->patches->sag_on && c->cap));
}

int sd_call_attn1_tiles(const struct sd_call *c, const struct unet_attn1_site *s,
                        struct unet_attn1_tiles *t, struct err *e)
{
    memset(t, 0, sizeof *t);
    if (!c || !c->patches || !c->patches->hypertile_on)
        return 0;
    return unet_hypertile_choose(&c->patches->hypertile, c->rng, s, t, e);
}

/*
 * set_model_attn1_replace(attn_and_record, "middle", 0, 0): the first transformer block
 * of the middle block, on calls that hold uncond samples.
 */
int sd_call_attn1_scores(const struct sd_call *c, const struct unet_attn1_site *s,
                         const struct tensor *q, const struct tensor *k, struct err *e)
{
    if (!c || !c->patches || !c->patches->sag_on || !c->cap || c->cap_n <= 0 ||
        s->kind != UNET_SITE_MIDDLE || s->block != 0 || s->block_index != 0)
        return 0;
    struct sd_sag_capture *cap = c->cap;
    if (c->cap_smp0 < 0 || c->cap_smp0 + c->cap_n > cap->batch)
        return err_set(e, ERR_INVALID, "SelfAttentionGuidance: uncond samples out of range");
    if (cap->tokens != s->tokens) { /* another latent size: a new map */
        double *v = NULL;
        int rc = xtry_malloc((size_t)cap->batch * (size_t)s->tokens * sizeof *v, (void **)&v, e);
        if (rc < 0)
            return rc;
        memset(v, 0, (size_t)cap->batch * (size_t)s->tokens * sizeof *v);
        xfree(cap->colsum);
        cap->colsum = v;
        cap->tokens = s->tokens;
    }
    int rc = unet_attn1_colsum(q, k, s->heads, c->cap_first, c->cap_n,
                               cap->colsum + (size_t)c->cap_smp0 * cap->tokens, e);
    if (rc == 0)
        cap->have = 1;
    return rc;
}

int sd_model_patches_noise_rng(uint64_t seed, int disable_noise, const struct sd_latent *lat,
                               struct sampling_rng *rng, struct err *e)
{
    sampling_rng_seed(rng, seed);
    if (disable_noise)
        return 0;
    size_t per = (size_t)(lat->c * lat->h * lat->w);
    size_t draws = lat->batch_index ? 0 : (size_t)lat->b;
    int64_t max_index = -1;
    for (int i = 0; lat->batch_index && i < lat->n_batch_index; i++)
        max_index = lat->batch_index[i] > max_index ? lat->batch_index[i] : max_index;
    /* prepare_noise: one randn of the latent, or one per index up to the largest */
    size_t n = lat->batch_index ? per : per * draws;
    float *scratch = NULL;
    int rc = xtry_malloc(n * sizeof *scratch, (void **)&scratch, e);
    if (rc < 0)
        return rc;
    if (!lat->batch_index)
        sampling_rng_randn(rng, scratch, n, SAMPLING_RANDN_V2);
    for (int64_t i = 0; i <= max_index; i++)
        sampling_rng_randn(rng, scratch, per, SAMPLING_RANDN_V2);
    xfree(scratch);
    return 0;
}

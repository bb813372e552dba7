/*
 * sd_latent_util — helpers of the latent and mask families (see sd_latent_util.h).
 */
#include "sd_latent_util.h"

#include <string.h>

#include "alloc.h"
#include "sd_upscale.h"

const struct sd_latent *sd__latent_in_at(struct node_ctx *c, int index)
{
    const struct sd_latent *l = sd_latent_of(node_in_at(c, index));
    if (!l)
        node_fail(c, "RuntimeError", "input '%s' is not a LATENT", node_in_name(c, index));
    return l;
}

struct sd_latent *sd__latent_like(struct node_ctx *c, const struct sd_latent *src, int64_t b,
                                  int64_t ch, int64_t h, int64_t w)
{
    struct sd_latent *l;
    struct err e = {0};
    int rc = sd_latent_try_new_like(src, b, ch, h, w, &l, &e);
    if (rc < 0) {
        node_fail_code(c, rc, "torch.OutOfMemoryError", "%s", e.msg);
        return NULL;
    }
    return l;
}

int sd__reshape_latent_to(struct node_ctx *c, const struct sd_latent *s2, int64_t tb, int64_t tc,
                          int64_t th, int64_t tw, int repeat_batch, float **out, int64_t *ob)
{
    struct err e = {0};
    int rc;
    if (s2->c != tc)
        return node_fail(c, "RuntimeError",
                         "The size of tensor a (%lld) must match the size of tensor b (%lld) at "
                         "non-singleton dimension 1",
                         (long long)tc, (long long)s2->c);
    size_t img = (size_t)(tc * th * tw);
    const float *src = s2->samples;
    float *resized = NULL;
    if (s2->h != th || s2->w != tw) {
        /* common_upscale(latent, w, h, "bilinear", "center") */
        if ((rc = xtry_malloc((size_t)s2->b * img * sizeof(float), (void **)&resized, &e)) < 0)
            return node_fail_code(c, rc, "torch.OutOfMemoryError", "%s", e.msg);
        if (sd_upscale(s2->samples, s2->b, tc, s2->h, s2->w, "bilinear", 1, resized, th, tw, &e) < 0) {
            xfree(resized);
            return node_fail(c, "ValueError", "%s", e.msg);
        }
        src = resized;
    }
    *ob = repeat_batch ? tb : s2->b;
    if ((rc = xtry_malloc((size_t)*ob * img * sizeof(float), (void **)out, &e)) < 0) {
        xfree(resized);
        return node_fail_code(c, rc, "torch.OutOfMemoryError", "%s", e.msg);
    }
    /* repeat_to_batch_size: image i is image i mod b (cut when b is larger). */
    for (int64_t i = 0; i < *ob; i++)
        memcpy(*out + (size_t)i * img, src + (size_t)(i % s2->b) * img, img * sizeof(float));
    xfree(resized);
    return 0;
}

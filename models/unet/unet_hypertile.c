/*
 * HyperTile's tile choice (see unet_hypertile.h).
 */
#include "unet_hypertile.h"

#include <math.h>
#include <string.h>

#include "pynum.h"

int unet_hypertile_divisor(int64_t value, int64_t min_value, int max_options,
                           struct sampling_rng *rng)
{
    int64_t ns[128];
    int n = 0;
    if (min_value > value)
        min_value = value;
    for (int64_t i = min_value < 1 ? 1 : min_value; i <= value && n < max_options && n < 128; i++)
        if (value % i == 0)
            ns[n++] = value / i;
    if (n == 0)
        return 1;
    int idx = 0;
    if (n - 1 > 0 && rng) /* torch.randint(low=0, high=n - 1): high is exclusive */
        idx = (int)(sampling_rng_u32(rng) % (uint32_t)(n - 1));
    return (int)ns[idx];
}

int unet_hypertile_choose(const struct unet_hypertile *h, struct sampling_rng *rng,
                          const struct unet_attn1_site *s, struct unet_attn1_tiles *t,
                          struct err *e)
{
    memset(t, 0, sizeof *t);
    int depth = -1;
    for (int i = 0; i <= h->max_depth && depth < 0; i++) {
        double p = ldexp(1.0, i); /* 2 ** i */
        if ((double)s->tokens == ((double)s->orig_h / p) * ((double)s->orig_w / p))
            depth = i;
    }
    if (depth < 0)
        return 0;
    int64_t tile = (h->tile_size > 32 ? h->tile_size : 32) / 8;
    double ar = (double)s->orig_w / (double)s->orig_h, hw = (double)s->tokens;
    int64_t rows = (int64_t)pynum_round_half_even(sqrt(hw * ar));
    int64_t cols = (int64_t)pynum_round_half_even(sqrt(hw / ar));
    int64_t factor = h->scale_depth ? (int64_t)1 << depth : 1;
    int nh = unet_hypertile_divisor(rows, tile * factor, h->swap_size, rng);
    int nw = unet_hypertile_divisor(cols, tile * factor, h->swap_size, rng);
    if (nh * nw <= 1)
        return 0;
    if (rows * cols != s->tokens)
        return err_set(e, ERR_INVALID,
                       "HyperTile: %lld tokens are not a %lldx%lld grid (ComfyUI's rearrange "
                       "fails here too)",
                       (long long)s->tokens, (long long)rows, (long long)cols);
    *t = (struct unet_attn1_tiles){.nh = nh, .nw = nw, .rows = rows, .cols = cols};
    return 0;
}

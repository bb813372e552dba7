/*
 * SDXL's ADM ("vector") conditioning y (sdxl.md §5.1; see family.h): the pooled bigG
 * output followed by six 256-wide sinusoidal embeddings of the image size, crop and
 * target size. E(v) is computed as the UNet's timestep embedding is
 * (tensor_timestep_embedding, sd15.md §3.2): float32 frequencies and arguments, cosine
 * half first. libm's float cos/sin of large arguments may differ from torch's in the
 * last bits (sdxl.md §13).
 */
#include "family.h"

#include <math.h>
#include <string.h>

void sdxl_adm_embed(float v, float out[SDXL_ADM_EMBED])
{
    const int half = SDXL_ADM_EMBED / 2;
    for (int k = 0; k < half; k++) {
        float freq = expf(-(float)log(10000.0) * (float)k / (float)half);
        float a = v * freq;
        out[k] = cosf(a);
        out[half + k] = sinf(a);
    }
}

void sdxl_adm_vector(const float *pooled, int pooled_dim, const struct adm_sizes *s, float *y)
{
    const float v[6] = {(float)s->height, (float)s->width,         (float)s->crop_h,
                        (float)s->crop_w, (float)s->target_height, (float)s->target_width};
    memcpy(y, pooled, (size_t)pooled_dim * sizeof(float));
    for (int i = 0; i < 6; i++) /* height before width in each pair (§5.1) */
        sdxl_adm_embed(v[i], y + pooled_dim + i * SDXL_ADM_EMBED);
}

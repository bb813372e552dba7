/*
 * pipeline — what ComfyUI does around the sampler for KSampler and
 * KSamplerAdvanced (sd15.md §5.3, §5.4): latent scaling, noise scaling,
 * the inpaint wrapper's inputs, CFG and noise-mask preparation.
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "sampling.h"

#include <math.h>
#include <string.h>

#include "alloc.h"
#include "resample.h"

int sampling_is_max_denoise(float sigma0, float sigma_max)
{
    /* math.isclose(max_sigma, sigma, rel_tol=1e-05) or sigma > max_sigma */
    double a = sigma_max, b = sigma0;
    double tol = 1e-5 * fmax(fabs(a), fabs(b));
    return fabs(a - b) <= tol || b > a;
}

int sampling_cfg_is_one(double cfg)
{
    return fabs(cfg - 1.0) <= 1e-9 * fmax(fabs(cfg), 1.0);
}

void sampling_cfg_combine(const float *cond, const float *uncond, double cfg, float *out,
                          size_t n)
{
    float scale = (float)cfg; /* a Python float times a float32 tensor */
    for (size_t i = 0; i < n; i++) {
        float diff = cond[i] - uncond[i];
        out[i] = uncond[i] + diff * scale;
    }
}

int sampling_sample_latent(const struct sampling_request *req, const float *latent, float *out,
                           size_t n, struct err *e)
{
    if (!req || !latent || !out || n == 0 || !req->noise || req->n_sigmas < 0 ||
        !(req->latent_scale > 0.0f) ||
        (req->n_sigmas > 0 && !req->sigmas))
        return err_set(e, ERR_INVALID, "invalid sampling request");
    if (req->n_sigmas == 0) {
        /* denoise 0 or a start step past the end: the latent passes through. */
        if (out != latent)
            memmove(out, latent, n * sizeof *out);
        return 0;
    }
    float *scaled = xmalloc(n * sizeof *scaled);
    float *x = xmalloc(n * sizeof *x);
    float *inpaint_noise = NULL;
    int rc;

    /* process_latent_in only when the latent is not all zeros (same result either way). */
    int nonzero = 0;
    for (size_t i = 0; i < n && !nonzero; i++)
        nonzero = latent[i] != 0.0f;
    for (size_t i = 0; i < n; i++)
        scaled[i] = nonzero ? latent[i] * req->latent_scale : latent[i];

    float s0 = req->sigmas[0];
    float f;
    if (sampling_is_max_denoise(s0, req->sigma_max)) {
        float s2 = s0 * s0;
        f = sqrtf(1.0f + s2);
    } else {
        f = s0;
    }
    for (size_t i = 0; i < n; i++) {
        float v = req->noise[i] * f;
        x[i] = v + scaled[i];
    }

    struct sampling_noise ns;
    sampling_noise_init(&ns, req->seed, req->variant);
    struct sampling_inpaint ip;
    if (req->noise_mask) {
        ip.mask = req->noise_mask;
        ip.latent = scaled;
        ip.noise = req->noise;
        if (req->sampler == SAMPLING_SAMPLER_DDIM) {
            /* ComfyUI's "ddim" is euler with inpaint_options random: randn from seed + 1. */
            struct sampling_rng rng;
            inpaint_noise = xmalloc(n * sizeof *inpaint_noise);
            sampling_rng_seed(&rng, req->seed + 1);
            sampling_rng_randn(&rng, inpaint_noise, n, req->variant);
            ip.noise = inpaint_noise;
        }
    }
    struct sampling_run run = {
        .sampler = req->sampler,
        .sigmas = req->sigmas,
        .n_sigmas = req->n_sigmas,
        .denoise = req->denoise,
        .denoise_user = req->denoise_user,
        .step = req->step,
        .step_user = req->step_user,
        .noise = &ns,
        .inpaint = req->noise_mask ? &ip : NULL,
        .opts = req->opts,
        .uncond_x0 = req->uncond_x0,
        .tau_sigma_start = req->tau_sigma_start,
        .tau_sigma_end = req->tau_sigma_end,
    };
    if ((rc = sampling_run_sampler(&run, x, n, e)) < 0)
        goto out;
    /* process_latent_out; inverse noise scaling is the identity for eps models. */
    for (size_t i = 0; i < n; i++)
        out[i] = x[i] / req->latent_scale;
out:
    xfree(inpaint_noise);
    xfree(x);
    xfree(scaled);
    return rc;
}

int sampling_mask_prepare(const float *mask, int mb, int mh, int mw, int batch, int channels,
                          int h, int w, float *out, struct err *e)
{
    if (!mask || mb < 1 || mh < 1 || mw < 1 || batch < 1 || channels < 1 || h < 1 || w < 1)
        return err_set(e, ERR_INVALID, "invalid noise mask shape %dx%dx%d for latent %dx%dx%dx%d",
                       mb, mh, mw, batch, channels, h, w);
    size_t plane = (size_t)h * w;
    float *resized = xmalloc((size_t)mb * plane * sizeof *resized);
    int rc = resample(mask, mb, 1, mh, mw, RESAMPLE_BCHW, "bilinear", 0, resized, h, w, e);
    if (rc < 0) {
        xfree(resized);
        return rc;
    }
    /* repeat_to_batch_size: cut when longer, tile when shorter. */
    for (int b = 0; b < batch; b++) {
        const float *src = resized + (size_t)(b % mb) * plane;
        for (int c = 0; c < channels; c++)
            memcpy(out + ((size_t)b * channels + c) * plane, src, plane * sizeof *out);
    }
    xfree(resized);
    return 0;
}

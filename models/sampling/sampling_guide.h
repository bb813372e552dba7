/*
 * sampling_guide — the ways ComfyUI mixes a step's x0 predictions into one,
 * beyond plain CFG (sampling_cfg_combine in sampling.h):
 *
 *   RescaleCFG  (comfy_extras/nodes_model_advanced.py) a sampler_cfg_function:
 *               CFG on v-prediction values, rescaled towards the positive
 *               side's standard deviation per sample.
 *   DualCFG     (nodes_custom_sampler.py Guider_DualCFG) two positive
 *               conditionings: regular = cfg_fn(middle, negative, cfg2) +
 *               (positive − middle)·cfg1; nested = negative + cfg2·(cfg_fn(
 *               positive, middle, cfg1) − negative).
 *   PerpNeg     (nodes_perpneg.py perp_neg) the negative's part perpendicular
 *               to the positive direction (both relative to an empty prompt),
 *               with dot product and norm over the whole batch tensor.
 *
 * Arrays are float32 [batch · per] in the sampler's space (x0 predictions and
 * the step's input x); every elementwise operation rounds to float32 in
 * PyTorch's order, Python floats meeting a tensor are rounded to float32
 * first; the reductions (std, sum, norm) accumulate in double and round once.
 * `out` may alias none of the inputs. Pure and reentrant: any thread.
 */
#ifndef LATENTD_SAMPLING_GUIDE_H
#define LATENTD_SAMPLING_GUIDE_H

#include <stddef.h>

/*
 * ComfyUI's cfg_function: the model's sampler_cfg_function when one is set
 * (here RescaleCFG, when rescale is non-zero), else uncond + (cond − uncond)·cfg.
 */
struct sampling_cfg_fn {
    int rescale;       /* RescaleCFG patched in */
    double multiplier; /* RescaleCFG's multiplier, in [0, 1] */
};

/*
 * cfg_function(cond, uncond, cfg) for a step at `sigma` with input x, per the
 * patch `fn` (NULL = plain CFG). out [batch · per].
 */
void sampling_cfg_apply(const struct sampling_cfg_fn *fn, const float *x, float sigma,
                        const float *cond, const float *uncond, double cfg, int batch, size_t per,
                        float *out);

/*
 * RescaleCFG's rescale_cfg: with cond/uncond as x0 predictions, x = x_in/(σ²+1),
 * v = (x − (x_in − (x_in − x0)))·sqrt(σ²+1)/σ per side, v_cfg = CFG of the v's,
 * v_final = m·v_cfg·std(v_cond)/std(v_cfg) + (1 − m)·v_cfg (std unbiased, over
 * each sample), result x_in − (x_in − (x − v_final·σ/sqrt(σ²+1))).
 */
void sampling_cfg_rescale(const float *x, float sigma, const float *cond, const float *uncond,
                          double cfg, double multiplier, int batch, size_t per, float *out);

/*
 * Guider_DualCFG.predict_noise's mix of the positive (cond1), middle (cond2) and
 * negative predictions; nested selects the "nested" style.
 */
void sampling_dual_cfg(const struct sampling_cfg_fn *fn, const float *x, float sigma,
                       const float *pos, const float *middle, const float *neg, double cfg_conds,
                       double cfg_cond2_negative, int nested, int batch, size_t per, float *out);

/*
 * perp_neg: p = pos − empty, q = neg − empty, perp = q − (Σq·p / ‖p‖²)·p,
 * out = empty + cfg·(p − perp·neg_scale), the sums over all n values.
 */
void sampling_perp_neg(const float *pos, const float *neg, const float *empty, double cfg,
                       double neg_scale, size_t n, float *out);

#endif

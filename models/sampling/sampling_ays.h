/*
 * sampling_ays — ComfyUI's AlignYourStepsScheduler
 * (comfy_extras/nodes_align_your_steps.py): NVIDIA's optimised 10-step noise
 * levels per model type, stretched to other step counts by log-linear
 * interpolation.
 *
 * Arithmetic follows the Python: the tables are Python floats (double),
 * numpy's linspace and interp run in double, and the result is rounded to
 * float32 once (torch.FloatTensor). Pure and reentrant: any thread.
 */
#ifndef LATENTD_SAMPLING_AYS_H
#define LATENTD_SAMPLING_AYS_H

enum sampling_ays_model {
    SAMPLING_AYS_SD1,
    SAMPLING_AYS_SDXL,
    SAMPLING_AYS_SVD,
    SAMPLING_AYS_COUNT
};

/* "SD1", "SDXL", "SVD" (the node's combo, in its order); NULL out of range. */
const char *sampling_ays_model_name(enum sampling_ays_model m);
/* The model type called `name`; 0, or ERR_INVALID for an unknown name. */
int sampling_ays_model_from_name(const char *name, enum sampling_ays_model *out);

/* The 11 noise levels of model type m (NOISE_LEVELS[m]), highest first. */
const double *sampling_ays_levels(enum sampling_ays_model m);

/*
 * ComfyUI's loglinear_interp: n values (n >= 2) spread over the decreasing
 * levels t[0..len) by numpy's interp of log(t) on linspace grids, highest
 * first. Writes out[0..n).
 */
void sampling_ays_loglinear(const double *t, int len, int n, double *out);

/*
 * AlignYourStepsScheduler's sigmas for `steps` (>= 1) at `denoise` in [0, 1]:
 * the last round(steps·denoise) + 1 of the steps + 1 levels, the final one
 * set to 0; none when denoise <= 0. Writes at most steps + 1 floats to out
 * and returns the count.
 */
int sampling_sigmas_ays(enum sampling_ays_model m, int steps, double denoise, float *out);

#endif

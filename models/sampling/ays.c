/*
 * ays — AlignYourStepsScheduler's sigmas (see sampling_ays.h).
 */
#include "sampling_ays.h"

#include <math.h>
#include <string.h>

#include "alloc.h"
#include "err.h"
#include "pynum.h"

#define AYS_LEVELS 11

/* NOISE_LEVELS of nodes_align_your_steps.py (NVIDIA's published schedules). */
static const double ays_levels[SAMPLING_AYS_COUNT][AYS_LEVELS] = {
    {14.6146412293, 6.4745760956, 3.8636745985, 2.6946151520, 1.8841921177, 1.3943805092,
     0.9642583904, 0.6523686016, 0.3977456272, 0.1515232662, 0.0291671582},
    {14.6146412293, 6.3184485287, 3.7681790315, 2.1811480769, 1.3405244945, 0.8620721141,
     0.5550693289, 0.3798540708, 0.2332364134, 0.1114188177, 0.0291671582},
    {700.00, 54.5, 15.886, 7.977, 4.248, 1.789, 0.981, 0.403, 0.173, 0.034, 0.002},
};
static const char *const ays_names[SAMPLING_AYS_COUNT] = {"SD1", "SDXL", "SVD"};

const char *sampling_ays_model_name(enum sampling_ays_model m)
{
    return (unsigned)m < SAMPLING_AYS_COUNT ? ays_names[m] : NULL;
}

int sampling_ays_model_from_name(const char *name, enum sampling_ays_model *out)
{
    for (int i = 0; name && i < SAMPLING_AYS_COUNT; i++)
        if (strcmp(name, ays_names[i]) == 0) {
            *out = (enum sampling_ays_model)i;
            return 0;
        }
    return ERR_INVALID;
}

const double *sampling_ays_levels(enum sampling_ays_model m)
{
    return ays_levels[m];
}

/*
 * numpy.linspace(0, 1, n)[i]: i·step with step = 1/(n − 1) and the last point
 * exactly 1 (numpy multiplies by the step rather than dividing by n − 1, which
 * can differ in the last bit).
 */
static double linspace01(int n, int i)
{
    if (n == 1)
        return 0.0;
    return i == n - 1 ? 1.0 : i * (1.0 / (n - 1));
}

/* numpy.interp(x, xp, fp) for increasing xp[0..len): clamped at both ends. */
static double np_interp(double x, const double *xp, const double *fp, int len)
{
    if (x <= xp[0])
        return fp[0];
    if (x >= xp[len - 1])
        return fp[len - 1];
    int j = 0;
    while (j + 1 < len - 1 && xp[j + 1] <= x)
        j++;
    if (x == xp[j])
        return fp[j];
    double slope = (fp[j + 1] - fp[j]) / (xp[j + 1] - xp[j]);
    return slope * (x - xp[j]) + fp[j];
}

void sampling_ays_loglinear(const double *t, int len, int n, double *out)
{
    double *xs = xmalloc((size_t)len * sizeof *xs), *ys = xmalloc((size_t)len * sizeof *ys);
    for (int i = 0; i < len; i++) {
        xs[i] = linspace01(len, i);
        ys[i] = log(t[len - 1 - i]); /* np.log(t_steps[::-1]): increasing */
    }
    for (int i = 0; i < n; i++)
        out[n - 1 - i] = exp(np_interp(linspace01(n, i), xs, ys, len));
    xfree(xs);
    xfree(ys);
}

int sampling_sigmas_ays(enum sampling_ays_model m, int steps, double denoise, float *out)
{
    int total = steps;
    if (denoise < 1.0) {
        if (denoise <= 0.0)
            return 0;
        total = (int)pynum_round_half_even(steps * denoise);
    }
    double *s = xmalloc((size_t)(steps + 1) * sizeof *s);
    if (steps + 1 == AYS_LEVELS)
        memcpy(s, ays_levels[m], sizeof ays_levels[m]);
    else
        sampling_ays_loglinear(ays_levels[m], AYS_LEVELS, steps + 1, s);
    /* sigmas[-(total + 1):]: Python's negative slice start, clamped to the list. */
    int keep = total + 1 < steps + 1 ? total + 1 : steps + 1;
    for (int i = 0; i < keep; i++)
        out[i] = (float)s[steps + 1 - keep + i];
    out[keep - 1] = 0.0f;
    xfree(s);
    return keep;
}

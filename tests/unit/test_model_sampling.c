/*
 * test_model_sampling — the MODEL's sampling type and schedule (sampling_sched.h):
 * ModelSamplingDiscrete's zsnr table against a float64 transcription of
 * rescale_zero_terminal_snr_sigmas written here and against values PyTorch printed,
 * V_PREDICTION / X0 / IMG_TO_IMG calculate_denoised and calculate_input against their
 * float64 formulas, EPS bit-identical to sampling_eps_to_x0, and the sampling names.
 */
#include <math.h>
#include <string.h>

#include "alloc.h"
#include "harness.h"
#include "sampling_sched.h"

/* The float64 sigmas of the SD schedule, zsnr-rescaled when asked (independent of
 * model_sampling.c: alpha_bar from the cumulative product, then the rescale). */
static void ref_sigmas(int zsnr, double *sig)
{
    double ab[1000], lo = sqrt(0.00085), hi = sqrt(0.012), acc = 1.0;
    for (int i = 0; i < 1000; i++) {
        double s = lo + (hi - lo) * i / 999.0, beta = s * s;
        acc *= 1.0 - beta;
        ab[i] = acc;
    }
    if (zsnr) {
        double r0 = sqrt(ab[0]), rT = sqrt(ab[999]);
        for (int i = 0; i < 1000; i++) {
            double r = (sqrt(ab[i]) - rT) * r0 / (r0 - rT);
            ab[i] = r * r;
        }
        ab[999] = 4.8973451890853435e-08;
    }
    for (int i = 0; i < 1000; i++)
        sig[i] = sqrt((1.0 - ab[i]) / ab[i]);
}

static void test_zsnr_table(void)
{
    struct sampling_discrete a, b;
    double ref[1000];
    sampling_discrete_init(&a, 0.00085, 0.012);
    sampling_discrete_init_zsnr(&b, 0.00085, 0.012, 0);
    ok(memcmp(&a, &b, sizeof a) == 0, "zsnr off is the plain table, bit for bit");
    EXPECT_EQ(a.prediction, SAMPLING_PREDICTION_EPS);
    sampling_discrete_init_zsnr(&b, 0.00085, 0.012, 1);
    EXPECT_EQ(b.zsnr, 1);
    ref_sigmas(1, ref);
    double worst = 0;
    for (int i = 0; i < 1000; i++) {
        double r = fabs(b.sigmas[i] - ref[i]) / ref[i];
        worst = r > worst ? r : worst;
    }
    ok(worst < 2e-7, "zsnr sigmas within float rounding of float64 (worst %.3g)", worst);
    /* torch: rescale_zero_terminal_snr_sigmas(sigmas).float() at 0, 1, 500, 998, 999 */
    ok(b.sigmas[0] == 0.029167158529162407f && b.sigmas[1] == 0.04206756502389908f &&
           b.sigmas[500] == 1.7745574712753296f && b.sigmas[998] == 2254.238037109375f &&
           b.sigma_max == 4518.763671875f,
       "zsnr sigmas 0, 1, 500, 998, 999 equal PyTorch's float32 values (%.9g %.9g %.9g %.9g %.9g)",
       b.sigmas[0], b.sigmas[1], b.sigmas[500], b.sigmas[998], b.sigma_max);
    ok(b.log_sigmas[999] == (float)log(ref[999]), "log_sigma_max is the float64 log, rounded");
    /* The timestep map works on the new table: sigma_max is t 999. */
    EXPECT_EQ(sampling_discrete_timestep(&b, b.sigma_max), 999);
}

static void test_denoised(void)
{
    struct sampling_discrete ms;
    sampling_discrete_init(&ms, 0.00085, 0.012);
    const float sig[] = {14.614642f, 3.5f, 1.0f, 0.0291671f, 4518.76f};
    const float xs[] = {-2.5f, 0.0f, 0.7f, 13.0f}, outs[] = {1.25f, -0.33f, 0.0f, 4.0f};
    double worst_v = 0;
    int eps_same = 1, x0_same = 1;
    for (size_t s = 0; s < sizeof sig / sizeof sig[0]; s++) {
        struct sampling_denoiser d;
        for (size_t i = 0; i < 4; i++) {
            float x = xs[i], o = outs[i], ref_eps;
            ms.prediction = SAMPLING_PREDICTION_EPS;
            sampling_denoiser_at(&ms, sig[s], &d);
            sampling_eps_to_x0(&x, &o, sig[s], &ref_eps, 1);
            float e = sampling_denoised(&d, x, o);
            eps_same &= memcmp(&e, &ref_eps, sizeof e) == 0;
            ms.prediction = SAMPLING_PREDICTION_V;
            sampling_denoiser_at(&ms, sig[s], &d);
            double S = sig[s], v = x / (S * S + 1) - o * S / sqrt(S * S + 1);
            double err = fabs(sampling_denoised(&d, x, o) - v) / (fabs(v) + 1e-3);
            worst_v = err > worst_v ? err : worst_v;
            ms.prediction = SAMPLING_PREDICTION_X0;
            sampling_denoiser_at(&ms, sig[s], &d);
            x0_same &= sampling_denoised(&d, x, o) == o;
            ms.prediction = SAMPLING_PREDICTION_IMG_TO_IMG;
            sampling_denoiser_at(&ms, sig[s], &d);
            x0_same &= sampling_denoised(&d, x, o) == o;
        }
    }
    ok(eps_same, "EPS denoised equals sampling_eps_to_x0 bit for bit");
    ok(worst_v < 1e-6, "V_PREDICTION denoised within 1e-6 of float64 (worst %.3g)", worst_v);
    ok(x0_same, "X0 and IMG_TO_IMG return the model output");
}

static void test_input(void)
{
    struct sampling_discrete ms;
    sampling_discrete_init(&ms, 0.00085, 0.012);
    float x[3] = {1.0f, -2.0f, 0.5f}, a[3], b[3];
    for (int p = 0; p < SAMPLING_PREDICTION_COUNT; p++) {
        ms.prediction = p;
        sampling_model_input(&ms, x, 2.0f, a, 3);
        sampling_scale_input(x, 2.0f, b, 3);
        if (p == SAMPLING_PREDICTION_IMG_TO_IMG)
            ok(memcmp(a, x, sizeof a) == 0, "img_to_img: the input is not scaled");
        else
            ok(memcmp(a, b, sizeof a) == 0, "prediction %d: x / sqrt(sigma^2 + 1)", p);
    }
    memcpy(a, x, sizeof a);
    ms.prediction = SAMPLING_PREDICTION_IMG_TO_IMG;
    sampling_model_input(&ms, a, 2.0f, a, 3); /* in place */
    ok(memcmp(a, x, sizeof a) == 0, "img_to_img in place");
}

static void test_names(void)
{
    enum sampling_prediction p = SAMPLING_PREDICTION_COUNT;
    EXPECT_EQ(sampling_prediction_from_name("v_prediction", &p), 0);
    EXPECT_EQ(p, SAMPLING_PREDICTION_V);
    EXPECT_EQ(sampling_prediction_from_name("eps", &p), 0);
    EXPECT_EQ(p, SAMPLING_PREDICTION_EPS);
    EXPECT_EQ(sampling_prediction_from_name("img_to_img", &p), 0);
    EXPECT_EQ(p, SAMPLING_PREDICTION_IMG_TO_IMG);
    EXPECT_EQ(sampling_prediction_from_name("lcm", &p), 0);
    EXPECT_EQ(p, SAMPLING_PREDICTION_LCM);
    EXPECT_EQ(sampling_prediction_from_name("lcm_x", &p), ERR_NOT_FOUND);
    EXPECT_EQ(sampling_prediction_from_name("V_PREDICTION", &p), ERR_NOT_FOUND);
}

/*
 * ModelSamplingDiscreteDistilled + LCM: 50 entries (entry 49 - x = sigma[999 - 20x]),
 * timestep = entry * 20 + 19, sigma(t) interpolated over (t - 19) / 20, the schedulers
 * over the 50-entry table, and LCM's x0 = c_out (x - out sigma) + c_skip x at the scaled
 * timestep 10 t with sigma_data 0.5, against float64.
 */
static void test_lcm(void)
{
    struct sampling_discrete full, ms;
    sampling_discrete_init(&full, 0.00085, 0.012);
    ms = full;
    sampling_discrete_distill(&ms);
    ms.prediction = SAMPLING_PREDICTION_LCM;
    EXPECT_EQ(ms.n, 50);
    EXPECT_EQ(ms.skip, 20);
    int same = 1;
    for (int x = 0; x < 50; x++)
        same &= ms.sigmas[49 - x] == full.sigmas[999 - 20 * x];
    ok(same, "distilled entries are every 20th sigma from the last");
    ok(ms.sigma_max == full.sigma_max && ms.sigma_min == full.sigmas[19],
       "distilled sigma_max is the full one, sigma_min entry 19");
    EXPECT_EQ(sampling_discrete_timestep(&ms, ms.sigma_max), 999);
    EXPECT_EQ(sampling_discrete_timestep(&ms, ms.sigma_min), 19);
    EXPECT_EQ(sampling_discrete_timestep(&ms, ms.sigmas[10]), 219);
    ok(fabsf(sampling_discrete_sigma(&ms, 219.0f) - ms.sigmas[10]) <= 1e-6f * ms.sigmas[10],
       "sigma(219) is entry 10");
    ok(fabsf(sampling_discrete_sigma(&ms, 999.0f) - ms.sigma_max) <= 1e-6f * ms.sigma_max,
       "sigma(999) is the last entry");
    float *v = NULL;
    int nv = 0;
    struct err e = {0};
    EXPECT_OK(sampling_schedule(&ms, SAMPLING_SCHEDULER_SIMPLE, 4, &v, &nv, &e));
    /* simple: sigmas[-(1 + int(x * 50 / 4))] for x = 0..3, then 0 */
    ok(nv == 5 && v[0] == ms.sigmas[49] && v[1] == ms.sigmas[37] && v[2] == ms.sigmas[24] &&
           v[3] == ms.sigmas[12] && v[4] == 0.0f,
       "simple scheduler over the 50-entry table");
    xfree(v);
    const float sig[] = {14.614642f, 1.0f, 0.1f};
    double worst = 0;
    for (int s = 0; s < 3; s++) {
        struct sampling_denoiser d;
        sampling_denoiser_at(&ms, sig[s], &d);
        double t = sampling_discrete_timestep(&ms, sig[s]) * 10.0;
        double cs = 0.25 / (t * t + 0.25), co = t / sqrt(t * t + 0.25);
        for (int i = 0; i < 4; i++) {
            double x = 0.3 * i - 0.5, o = 0.7 - 0.2 * i;
            double ref = co * (x - o * sig[s]) + cs * x;
            double got = sampling_denoised(&d, (float)x, (float)o);
            double err = fabs(got - ref) / (fabs(ref) + 1e-3);
            worst = err > worst ? err : worst;
        }
    }
    ok(worst < 1e-6, "LCM denoised within 1e-6 of float64 (worst %.3g)", worst);
}

/*
 * ModelSamplingContinuousEDM / V: the float32 table exp(linspace(ln min, ln max)), the
 * timestep maps (0.25 ln sigma; atan(sigma) 2/pi) and their inverses, percent_to_sigma on
 * the log range, and EDM / V denoised and calculate_input with sigma_data 0.5, against
 * float64.
 */
static void test_continuous(void)
{
    struct sampling_discrete ms;
    sampling_continuous_init(&ms, SAMPLING_TIME_EDM, 0.002, 120.0, 0.5);
    double worst = 0;
    for (int i = 0; i < 1000; i++) {
        double ref = exp(log(0.002) + (log(120.0) - log(0.002)) * i / 999.0);
        double r = fabs(ms.sigmas[i] - ref) / ref;
        worst = r > worst ? r : worst;
    }
    ok(worst < 2e-6, "EDM table within float32 of float64 (worst %.3g)", worst);
    ok(fabs(sampling_discrete_timestep(&ms, 3.0f) - 0.25 * log(3.0)) < 1e-6 &&
           fabs(sampling_discrete_sigma(&ms, 0.25f * logf(3.0f)) - 3.0) < 1e-5,
       "EDM: t = 0.25 ln sigma and back");
    double p = sampling_percent_to_sigma(&ms, 0.25);
    double pref = exp((log((double)ms.sigma_max) - log((double)ms.sigma_min)) * 0.75 +
                      log((double)ms.sigma_min));
    ok(fabs(p - pref) <= 1e-12 * pref && sampling_percent_to_sigma(&ms, 0.0) == 999999999.9 &&
           sampling_percent_to_sigma(&ms, 1.0) == 0.0,
       "EDM percent_to_sigma on the log range (%.9g)", p);
    ms.prediction = SAMPLING_PREDICTION_EDM;
    struct sampling_denoiser d;
    float x = 0.8f, o = -0.3f, s = 2.5f, in;
    sampling_denoiser_at(&ms, s, &d);
    double v = (double)s * s + 0.25;
    double edm = x * 0.25 / v + o * (double)s * 0.5 / sqrt(v);
    ok(fabs(sampling_denoised(&d, x, o) - edm) < 1e-6, "EDM denoised with sigma_data 0.5");
    ms.prediction = SAMPLING_PREDICTION_V;
    sampling_denoiser_at(&ms, s, &d);
    ok(fabs(sampling_denoised(&d, x, o) - (x * 0.25 / v - o * (double)s * 0.5 / sqrt(v))) < 1e-6,
       "V denoised with sigma_data 0.5");
    sampling_model_input(&ms, &x, s, &in, 1);
    ok(fabs(in - x / sqrt(v)) < 1e-7, "calculate_input divides by sqrt(sigma^2 + sigma_data^2)");
    sampling_continuous_init(&ms, SAMPLING_TIME_V, 0.03, 500.0, 1.0);
    ok(fabs(sampling_discrete_timestep(&ms, 1.0f) - 0.5) < 1e-6 &&
           fabs(sampling_discrete_sigma(&ms, 0.5f) - 1.0) < 1e-6 &&
           fabs(sampling_discrete_timestep(&ms, 500.0f) - atan(500.0) * 2 / M_PI) < 1e-6,
       "ContinuousV: t = atan(sigma) 2/pi and back");
    float *sv = NULL;
    int nv = 0;
    struct err e = {0};
    EXPECT_OK(sampling_schedule(&ms, SAMPLING_SCHEDULER_NORMAL, 3, &sv, &nv, &e));
    ok(nv == 4 && fabsf(sv[0] - ms.sigma_max) <= 2e-4f * ms.sigma_max &&
           fabsf(sv[2] - ms.sigma_min) <= 1e-4f && sv[3] == 0.0f,
       "normal scheduler from sigma_max to sigma_min through the V map (%g %g %g)",
       nv > 2 ? sv[0] : 0, nv > 2 ? sv[1] : 0, nv > 2 ? sv[2] : 0);
    xfree(sv);
}

int main(void)
{
    test_zsnr_table();
    test_denoised();
    test_input();
    test_names();
    test_lcm();
    test_continuous();
    return harness_done();
}

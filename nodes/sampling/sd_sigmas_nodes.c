/*
 * sd_sigmas_nodes — ComfyUI's scheduler and sigma-list nodes
 * (comfy_extras/nodes_custom_sampler.py): BasicScheduler, KarrasScheduler,
 * ExponentialScheduler, PolyexponentialScheduler, LaplaceScheduler,
 * VPScheduler, BetaSamplingScheduler, SDTurboScheduler, SplitSigmas,
 * SplitSigmasDenoise, FlipSigmas, SetFirstSigma, ExtendIntermediateSigmas and
 * SamplingPercentToSigma. SIGMAS values are struct sd_sigmas (sd_custom_types.h); the
 * formulas live in models/sampling.
 *
 * Where Python would raise on a parameter (a zero rho, log of 0, an empty
 * list indexed) the node fails with Python's exception type and text, as
 * ComfyUI's execution_error would carry them.
 */
#include <math.h>
#include <string.h>

/* ExtendIntermediateSigmas rounds each torch op to float32 on its own: no fused a*b+c. */
#pragma GCC optimize("fp-contract=off")

#include "alloc.h"
#include "node_registry.h"
#include "sampling_sigmas.h"
#include "sd_custom_nodes.h"
#include "sd_custom_types.h"
#include "sd_types.h"

#define SCHED_CATEGORY "sampling/custom_sampling/schedulers"
#define SIGMAS_CATEGORY "sampling/custom_sampling/sigmas"
#define MODULE "comfy_extras.nodes_custom_sampler"

/* Publish v[0..n) as output `index` (copied). */
static void put_sigmas(struct node_ctx *c, int index, const float *v, int n)
{
    node_set_output(c, index, sd_sigmas_value(sd_sigmas_new(v, n)));
}

/* The SIGMAS at input `index`; NULL after node_fail when it is not one. */
static const struct sd_sigmas *in_sigmas(struct node_ctx *c, int index)
{
    const struct sd_sigmas *s = sd_sigmas_of(node_in_at(c, index));
    if (!s)
        node_fail(c, "RuntimeError", "input '%s' is not a SIGMAS", node_in_name(c, index));
    return s;
}

void sd__scheduler_options(const struct node_env *env, struct node_strlist *out)
{
    (void)env;
    for (int i = 0; i < SAMPLING_SCHEDULER_COUNT; i++)
        node_strlist_add(out, sampling_scheduler_name((enum sampling_scheduler)i));
}

/* ---- BasicScheduler ---- */

enum { BASIC_MODEL, BASIC_SCHEDULER, BASIC_STEPS, BASIC_DENOISE, BASIC_N };
static const struct node_input_def basic_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "scheduler", .type = NODE_COMBO, .options_fn = sd__scheduler_options},
    {.name = "steps", .type = "INT", .def = NODE_I(20), .min = NODE_I(1), .max = NODE_I(10000)},
    {.name = "denoise", .type = "FLOAT", .def = NODE_F(1.0), .min = NODE_F(0.0),
     .max = NODE_F(1.0), .step = NODE_F(0.01)},
    NODE_INPUTS_END};
static const struct node_output_def sigmas_output[] = {{.type = "SIGMAS"}, NODE_OUTPUTS_END};

static int basic_run(struct node_ctx *c)
{
    const struct sd_model *m = sd_model_of(node_in_at(c, BASIC_MODEL));
    const char *name = node_in_str_at(c, BASIC_SCHEDULER);
    int steps = (int)node_in_int_at(c, BASIC_STEPS);
    double denoise = node_in_float_at(c, BASIC_DENOISE);
    enum sampling_scheduler sch;
    if (!m)
        return node_fail(c, "RuntimeError", "input 'model' is not a MODEL");
    if (sampling_scheduler_from_name(name, &sch) < 0)
        return node_fail(c, "ValueError", "scheduler '%s' is not supported", name);
    int total = steps;
    if (denoise < 1.0) {
        if (denoise <= 0.0) {
            put_sigmas(c, 0, NULL, 0);
            return 0;
        }
        double t = (double)steps / denoise; /* Python int(): truncation */
        total = t > 1e7 ? 10000001 : (int)t;
    }
    float *v;
    int n, rc;
    struct err e = {0};
    if ((rc = sampling_schedule(&m->ms, sch, total, &v, &n, &e)) < 0)
        return node_fail_code(c, rc, "RuntimeError", "%s", e.msg);
    int keep = n < steps + 1 ? n : steps + 1; /* sigmas[-(steps + 1):] */
    put_sigmas(c, 0, v + (n - keep), keep);
    xfree(v);
    return 0;
}

const struct node_class sd_basic_scheduler = {
    .name = "BasicScheduler", .category = SCHED_CATEGORY, .python_module = MODULE,
    .inputs = basic_inputs, .n_inputs = BASIC_N, .outputs = sigmas_output, .run = basic_run};

/* ---- the closed-form schedulers ---- */

#define SIGMA_RANGE_INPUTS                                                                 \
    {.name = "steps", .type = "INT", .def = NODE_I(20), .min = NODE_I(1),                 \
     .max = NODE_I(10000)},                                                                \
        {.name = "sigma_max", .type = "FLOAT", .def = NODE_F(14.614642), .min = NODE_F(0.0), \
         .max = NODE_F(5000.0), .step = NODE_F(0.01), .round_false = 1},                   \
        {.name = "sigma_min", .type = "FLOAT", .def = NODE_F(0.0291675), .min = NODE_F(0.0), \
         .max = NODE_F(5000.0), .step = NODE_F(0.01), .round_false = 1}

enum { KARRAS_STEPS, KARRAS_SIGMA_MAX, KARRAS_SIGMA_MIN, KARRAS_RHO, KARRAS_N };
static const struct node_input_def karras_inputs[] = {
    SIGMA_RANGE_INPUTS,
    {.name = "rho", .type = "FLOAT", .def = NODE_F(7.0), .min = NODE_F(0.0), .max = NODE_F(100.0),
     .step = NODE_F(0.01), .round_false = 1},
    NODE_INPUTS_END};
enum { EXP_STEPS, EXP_SIGMA_MAX, EXP_SIGMA_MIN, EXP_N };
static const struct node_input_def exponential_inputs[] = {SIGMA_RANGE_INPUTS, NODE_INPUTS_END};
enum { POLYEXP_STEPS, POLYEXP_SIGMA_MAX, POLYEXP_SIGMA_MIN, POLYEXP_RHO, POLYEXP_N };
static const struct node_input_def polyexp_inputs[] = {
    SIGMA_RANGE_INPUTS,
    {.name = "rho", .type = "FLOAT", .def = NODE_F(1.0), .min = NODE_F(0.0), .max = NODE_F(100.0),
     .step = NODE_F(0.01), .round_false = 1},
    NODE_INPUTS_END};
enum { LAPLACE_STEPS, LAPLACE_SIGMA_MAX, LAPLACE_SIGMA_MIN, LAPLACE_MU, LAPLACE_BETA, LAPLACE_N };
static const struct node_input_def laplace_inputs[] = {
    SIGMA_RANGE_INPUTS,
    {.name = "mu", .type = "FLOAT", .def = NODE_F(0.0), .min = NODE_F(-10.0), .max = NODE_F(10.0),
     .step = NODE_F(0.1), .round_false = 1},
    {.name = "beta", .type = "FLOAT", .def = NODE_F(0.5), .min = NODE_F(0.0), .max = NODE_F(10.0),
     .step = NODE_F(0.1), .round_false = 1},
    NODE_INPUTS_END};
enum { VP_STEPS, VP_BETA_D, VP_BETA_MIN, VP_EPS_S, VP_N };
static const struct node_input_def vp_inputs[] = {
    {.name = "steps", .type = "INT", .def = NODE_I(20), .min = NODE_I(1), .max = NODE_I(10000)},
    {.name = "beta_d", .type = "FLOAT", .def = NODE_F(19.9), .min = NODE_F(0.0),
     .max = NODE_F(5000.0), .step = NODE_F(0.01), .round_false = 1},
    {.name = "beta_min", .type = "FLOAT", .def = NODE_F(0.1), .min = NODE_F(0.0),
     .max = NODE_F(5000.0), .step = NODE_F(0.01), .round_false = 1},
    {.name = "eps_s", .type = "FLOAT", .def = NODE_F(0.001), .min = NODE_F(0.0),
     .max = NODE_F(1.0), .step = NODE_F(0.0001), .round_false = 1},
    NODE_INPUTS_END};

/* Python's math.log(x) for x <= 0 and 1 / 0.0 raise; so does the node. */
static int check_log(struct node_ctx *c, double smin, double smax)
{
    if (smin <= 0.0 || smax <= 0.0)
        return node_fail(c, "ValueError", "math domain error");
    return 0;
}

/* Run a formula into a steps + 1 buffer and publish it. */
#define RUN_FORMULA(c, steps, call)                                                        \
    do {                                                                                   \
        float *v_ = xmalloc((size_t)((steps) + 1) * sizeof *v_);                           \
        float *out = v_;                                                                   \
        int n_ = (call);                                                                   \
        put_sigmas((c), 0, v_, n_);                                                        \
        xfree(v_);                                                                         \
    } while (0)

static int karras_run(struct node_ctx *c)
{
    int steps = (int)node_in_int_at(c, KARRAS_STEPS);
    double smax = node_in_float_at(c, KARRAS_SIGMA_MAX);
    double smin = node_in_float_at(c, KARRAS_SIGMA_MIN);
    double rho = node_in_float_at(c, KARRAS_RHO);
    if (rho == 0.0)
        return node_fail(c, "ZeroDivisionError", "float division by zero");
    RUN_FORMULA(c, steps, sampling_sigmas_karras(steps, smin, smax, rho, out));
    return 0;
}

static int exponential_run(struct node_ctx *c)
{
    int steps = (int)node_in_int_at(c, EXP_STEPS);
    double smax = node_in_float_at(c, EXP_SIGMA_MAX);
    double smin = node_in_float_at(c, EXP_SIGMA_MIN);
    if (check_log(c, smin, smax) < 0)
        return ERR_INVALID;
    RUN_FORMULA(c, steps, sampling_sigmas_exponential(steps, smin, smax, out));
    return 0;
}

static int polyexp_run(struct node_ctx *c)
{
    int steps = (int)node_in_int_at(c, POLYEXP_STEPS);
    double smax = node_in_float_at(c, POLYEXP_SIGMA_MAX);
    double smin = node_in_float_at(c, POLYEXP_SIGMA_MIN);
    double rho = node_in_float_at(c, POLYEXP_RHO);
    if (check_log(c, smin, smax) < 0)
        return ERR_INVALID;
    RUN_FORMULA(c, steps, sampling_sigmas_polyexponential(steps, smin, smax, rho, out));
    return 0;
}

static int laplace_run(struct node_ctx *c)
{
    int steps = (int)node_in_int_at(c, LAPLACE_STEPS);
    double smax = node_in_float_at(c, LAPLACE_SIGMA_MAX);
    double smin = node_in_float_at(c, LAPLACE_SIGMA_MIN);
    double mu = node_in_float_at(c, LAPLACE_MU), beta = node_in_float_at(c, LAPLACE_BETA);
    RUN_FORMULA(c, steps, sampling_sigmas_laplace(steps, smin, smax, mu, beta, out));
    return 0;
}

static int vp_run(struct node_ctx *c)
{
    int steps = (int)node_in_int_at(c, VP_STEPS);
    double beta_d = node_in_float_at(c, VP_BETA_D), beta_min = node_in_float_at(c, VP_BETA_MIN);
    double eps_s = node_in_float_at(c, VP_EPS_S);
    RUN_FORMULA(c, steps, sampling_sigmas_vp(steps, beta_d, beta_min, eps_s, out));
    return 0;
}

const struct node_class sd_karras_scheduler = {
    .name = "KarrasScheduler", .category = SCHED_CATEGORY, .python_module = MODULE,
    .inputs = karras_inputs, .n_inputs = KARRAS_N, .outputs = sigmas_output, .run = karras_run};
const struct node_class sd_exponential_scheduler = {
    .name = "ExponentialScheduler", .category = SCHED_CATEGORY, .python_module = MODULE,
    .inputs = exponential_inputs, .n_inputs = EXP_N, .outputs = sigmas_output,
    .run = exponential_run};
const struct node_class sd_polyexponential_scheduler = {
    .name = "PolyexponentialScheduler", .category = SCHED_CATEGORY, .python_module = MODULE,
    .inputs = polyexp_inputs, .n_inputs = POLYEXP_N, .outputs = sigmas_output, .run = polyexp_run};
const struct node_class sd_laplace_scheduler = {
    .name = "LaplaceScheduler", .category = SCHED_CATEGORY, .python_module = MODULE,
    .inputs = laplace_inputs, .n_inputs = LAPLACE_N, .outputs = sigmas_output, .run = laplace_run};
const struct node_class sd_vp_scheduler = {
    .name = "VPScheduler", .category = SCHED_CATEGORY, .python_module = MODULE,
    .inputs = vp_inputs, .n_inputs = VP_N, .outputs = sigmas_output, .run = vp_run};

/* ---- model-table schedulers: BetaSamplingScheduler, SDTurboScheduler ---- */

enum { BETA_MODEL, BETA_STEPS, BETA_ALPHA, BETA_BETA, BETA_N };
static const struct node_input_def beta_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "steps", .type = "INT", .def = NODE_I(20), .min = NODE_I(1), .max = NODE_I(10000)},
    {.name = "alpha", .type = "FLOAT", .def = NODE_F(0.6), .min = NODE_F(0.0), .max = NODE_F(50.0),
     .step = NODE_F(0.01), .round_false = 1},
    {.name = "beta", .type = "FLOAT", .def = NODE_F(0.6), .min = NODE_F(0.0), .max = NODE_F(50.0),
     .step = NODE_F(0.01), .round_false = 1},
    NODE_INPUTS_END};

static int beta_run(struct node_ctx *c)
{
    const struct sd_model *m = sd_model_of(node_in_at(c, BETA_MODEL));
    int steps = (int)node_in_int_at(c, BETA_STEPS);
    double alpha = node_in_float_at(c, BETA_ALPHA), beta = node_in_float_at(c, BETA_BETA);
    if (!m)
        return node_fail(c, "RuntimeError", "input 'model' is not a MODEL");
    /* scipy's beta.ppf is NaN for a zero shape, and int(NaN) raises. */
    if (!(alpha > 0.0) || !(beta > 0.0))
        return node_fail(c, "ValueError", "cannot convert float NaN to integer");
    RUN_FORMULA(c, steps, sampling_sigmas_beta(&m->ms, steps, alpha, beta, out));
    return 0;
}

enum { TURBO_MODEL, TURBO_STEPS, TURBO_DENOISE, TURBO_N };
static const struct node_input_def turbo_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "steps", .type = "INT", .def = NODE_I(1), .min = NODE_I(1), .max = NODE_I(10)},
    {.name = "denoise", .type = "FLOAT", .def = NODE_F(1.0), .min = NODE_I(0),
     .max = NODE_F(1.0), .step = NODE_F(0.01)},
    NODE_INPUTS_END};

static int turbo_run(struct node_ctx *c)
{
    const struct sd_model *m = sd_model_of(node_in_at(c, TURBO_MODEL));
    int steps = (int)node_in_int_at(c, TURBO_STEPS);
    if (!m)
        return node_fail(c, "RuntimeError", "input 'model' is not a MODEL");
    double denoise = node_in_float_at(c, TURBO_DENOISE);
    RUN_FORMULA(c, steps, sampling_sigmas_sdturbo(&m->ms, steps, denoise, out));
    return 0;
}

const struct node_class sd_beta_sampling_scheduler = {
    .name = "BetaSamplingScheduler", .category = SCHED_CATEGORY, .python_module = MODULE,
    .inputs = beta_inputs, .n_inputs = BETA_N, .outputs = sigmas_output, .run = beta_run};
const struct node_class sd_sdturbo_scheduler = {
    .name = "SDTurboScheduler", .category = SCHED_CATEGORY, .python_module = MODULE,
    .inputs = turbo_inputs, .n_inputs = TURBO_N, .outputs = sigmas_output, .run = turbo_run};

/* ---- SplitSigmas, SplitSigmasDenoise ---- */

static const struct node_output_def split_outputs[] = {
    {.type = "SIGMAS", .name = "high_sigmas"}, {.type = "SIGMAS", .name = "low_sigmas"},
    NODE_OUTPUTS_END};
enum { SPLIT_SIGMAS, SPLIT_STEP, SPLIT_N };
static const struct node_input_def split_inputs[] = {
    {.name = "sigmas", .type = "SIGMAS"},
    {.name = "step", .type = "INT", .def = NODE_I(0), .min = NODE_I(0), .max = NODE_I(10000)},
    NODE_INPUTS_END};

static int split_run(struct node_ctx *c)
{
    const struct sd_sigmas *s = in_sigmas(c, SPLIT_SIGMAS);
    if (!s)
        return ERR_INVALID;
    int64_t step = node_in_int_at(c, SPLIT_STEP);
    /* sigmas[:step + 1] and sigmas[step:]: both share the sigma at `step`. */
    int hi = step + 1 < s->n ? (int)step + 1 : s->n;
    int lo = step < s->n ? (int)step : s->n;
    put_sigmas(c, 0, s->v, hi);
    put_sigmas(c, 1, s->v + lo, s->n - lo);
    return 0;
}

enum { SPLIT_DENOISE_SIGMAS, SPLIT_DENOISE_DENOISE, SPLIT_DENOISE_N };
static const struct node_input_def split_denoise_inputs[] = {
    {.name = "sigmas", .type = "SIGMAS"},
    {.name = "denoise", .type = "FLOAT", .def = NODE_F(1.0), .min = NODE_F(0.0),
     .max = NODE_F(1.0), .step = NODE_F(0.01)},
    NODE_INPUTS_END};

static int split_denoise_run(struct node_ctx *c)
{
    const struct sd_sigmas *s = in_sigmas(c, SPLIT_DENOISE_SIGMAS);
    if (!s)
        return ERR_INVALID;
    int steps = s->n - 1 > 0 ? s->n - 1 : 0;
    /* Python round(): half to even, which rint does in the default rounding mode. */
    int total = (int)rint((double)steps * node_in_float_at(c, SPLIT_DENOISE_DENOISE));
    /* sigmas[:-total] (empty when total is 0: [:-0] is [:0]) and sigmas[-(total + 1):]. */
    int hi = total > 0 && s->n > total ? s->n - total : 0;
    int lo = s->n > total + 1 ? s->n - (total + 1) : 0;
    put_sigmas(c, 0, s->v, hi);
    put_sigmas(c, 1, s->v + lo, s->n - lo);
    return 0;
}

const struct node_class sd_split_sigmas = {
    .name = "SplitSigmas", .category = SIGMAS_CATEGORY, .python_module = MODULE,
    .inputs = split_inputs, .n_inputs = SPLIT_N, .outputs = split_outputs, .run = split_run};
const struct node_class sd_split_sigmas_denoise = {
    .name = "SplitSigmasDenoise", .category = SIGMAS_CATEGORY, .python_module = MODULE,
    .inputs = split_denoise_inputs, .n_inputs = SPLIT_DENOISE_N, .outputs = split_outputs,
    .run = split_denoise_run};

/* ---- FlipSigmas, SetFirstSigma ---- */

enum { FLIP_SIGMAS, FLIP_N };
static const struct node_input_def flip_inputs[] = {{.name = "sigmas", .type = "SIGMAS"},
                                                    NODE_INPUTS_END};

static int flip_run(struct node_ctx *c)
{
    const struct sd_sigmas *s = in_sigmas(c, FLIP_SIGMAS);
    if (!s)
        return ERR_INVALID;
    struct sd_sigmas *f = sd_sigmas_new(s->v, s->n);
    for (int i = 0; i < f->n; i++)
        f->v[i] = s->v[s->n - 1 - i];
    /* A flipped schedule starts at 0, and every update divides by sigma. */
    if (f->n > 0 && f->v[0] == 0.0f)
        f->v[0] = 0.0001f;
    node_set_output(c, 0, sd_sigmas_value(f));
    return 0;
}

enum { SET_FIRST_SIGMAS, SET_FIRST_SIGMA, SET_FIRST_N };
static const struct node_input_def set_first_inputs[] = {
    {.name = "sigmas", .type = "SIGMAS"},
    {.name = "sigma", .type = "FLOAT", .def = NODE_F(136.0), .min = NODE_F(0.0),
     .max = NODE_F(20000.0), .step = NODE_F(0.001), .round_false = 1},
    NODE_INPUTS_END};

static int set_first_run(struct node_ctx *c)
{
    const struct sd_sigmas *s = in_sigmas(c, SET_FIRST_SIGMAS);
    if (!s)
        return ERR_INVALID;
    if (s->n == 0)
        return node_fail(c, "IndexError", "index 0 is out of bounds for dimension 0 with size 0");
    struct sd_sigmas *f = sd_sigmas_new(s->v, s->n);
    f->v[0] = (float)node_in_float_at(c, SET_FIRST_SIGMA);
    node_set_output(c, 0, sd_sigmas_value(f));
    return 0;
}

const struct node_class sd_flip_sigmas = {
    .name = "FlipSigmas", .category = SIGMAS_CATEGORY, .python_module = MODULE,
    .inputs = flip_inputs, .n_inputs = FLIP_N, .outputs = sigmas_output, .run = flip_run};
const struct node_class sd_set_first_sigma = {
    .name = "SetFirstSigma", .category = SIGMAS_CATEGORY, .python_module = MODULE,
    .inputs = set_first_inputs, .n_inputs = SET_FIRST_N, .outputs = sigmas_output,
    .run = set_first_run};

/* ---- ExtendIntermediateSigmas ---- */

static const char *const extend_spacings[] = {"linear", "cosine", "sine", NULL};
enum { EXTEND_SIGMAS, EXTEND_STEPS, EXTEND_START, EXTEND_END, EXTEND_SPACING, EXTEND_N };
static const struct node_input_def extend_inputs[] = {
    {.name = "sigmas", .type = "SIGMAS"},
    {.name = "steps", .type = "INT", .def = NODE_I(2), .min = NODE_I(1), .max = NODE_I(100)},
    {.name = "start_at_sigma", .type = "FLOAT", .def = NODE_F(-1.0), .min = NODE_F(-1.0),
     .max = NODE_F(20000.0), .step = NODE_F(0.01), .round_false = 1},
    {.name = "end_at_sigma", .type = "FLOAT", .def = NODE_F(12.0), .min = NODE_F(0.0),
     .max = NODE_F(20000.0), .step = NODE_F(0.01), .round_false = 1},
    {.name = "spacing", .type = NODE_COMBO, .options = extend_spacings},
    NODE_INPUTS_END};

/*
 * torch.linspace(0, 1, n) in float32 as torch 2's CPU kernel computes it: step * k from
 * the start for the first half, 1 - step * (n - 1 - k) from the end for the rest, where
 * the compiled kernel fuses that multiply-subtract (one rounding; fmaf here). torch 1.13's
 * vectorised kernel differs by an ulp at some points past the 16th.
 */
static float linspace01(int n, int k)
{
    float step = 1.0f / (float)(n - 1);
    return k < n / 2 ? step * (float)k : fmaf(-step, (float)(n - 1 - k), 1.0f);
}

/*
 * The spacing curve at x (float32). torch evaluates sin/cos with SLEEF's float32
 * routines (within 1 ulp); sinf/cosf of the float32 argument x * float(pi) / 2 agree
 * with them to that ulp.
 */
static float extend_curve(int spacing, float x)
{
    float a = x * (float)M_PI / 2.0f;
    if (spacing == 1)
        return (float)sin((double)a);
    if (spacing == 2)
        return 1.0f - (float)cos((double)a);
    return x;
}

static int extend_run(struct node_ctx *c)
{
    const struct sd_sigmas *s = in_sigmas(c, EXTEND_SIGMAS);
    if (!s)
        return ERR_INVALID;
    int steps = (int)node_in_int_at(c, EXTEND_STEPS);
    if (steps < 1 || steps > 100)
        return node_fail(c, "ValueError", "steps %d is outside 1..100", steps);
    double start = node_in_float_at(c, EXTEND_START);
    /* The bounds meet float32 sigmas in torch's comparison: cast to float32 first. */
    float hi = start < 0 ? INFINITY : (float)start;
    float lo = (float)node_in_float_at(c, EXTEND_END);
    const char *name = node_in_str_at(c, EXTEND_SPACING);
    int spacing = !strcmp(name, "cosine") ? 1 : !strcmp(name, "sine") ? 2 : 0;
    /* linspace(0, 1, steps + 1)[1:-1] through the curve. */
    float curve[100];
    for (int k = 1; k < steps; k++)
        curve[k - 1] = extend_curve(spacing, linspace01(steps + 1, k));
    float *v = NULL;
    struct err e = {0};
    if (xtry_calloc((size_t)s->n * (size_t)steps + 1, sizeof *v, (void **)&v, &e) < 0)
        return node_fail_code(c, ERR_TOO_LARGE, "torch.OutOfMemoryError", "%s", e.msg);
    int n = 0;
    for (int i = 0; i + 1 < s->n; i++) {
        float cur = s->v[i];
        v[n++] = cur;
        if (lo <= cur && cur <= hi) {
            float d = s->v[i + 1] - cur;
            for (int k = 0; k < steps - 1; k++)
                v[n++] = curve[k] * d + cur; /* two float32 ops, as torch's two */
        }
    }
    if (s->n > 0)
        v[n++] = s->v[s->n - 1];
    put_sigmas(c, 0, v, n);
    xfree(v);
    return 0;
}

const struct node_class sd_extend_intermediate_sigmas = {
    .name = "ExtendIntermediateSigmas", .category = SIGMAS_CATEGORY, .python_module = MODULE,
    .inputs = extend_inputs, .n_inputs = EXTEND_N, .outputs = sigmas_output, .run = extend_run};

/* ---- SamplingPercentToSigma ---- */

enum { PERCENT_MODEL, PERCENT_SAMPLING_PERCENT, PERCENT_RETURN_ACTUAL_SIGMA, PERCENT_N };
static const struct node_input_def percent_inputs[] = {
    {.name = "model", .type = "MODEL", .empty_opts = 1},
    {.name = "sampling_percent", .type = "FLOAT", .def = NODE_F(0.0), .min = NODE_F(0.0),
     .max = NODE_F(1.0), .step = NODE_F(0.0001)},
    {.name = "return_actual_sigma", .type = "BOOLEAN", .def_bool = 0, .has_def_bool = 1,
     .tooltip = "Return the actual sigma value instead of the value used for interval "
                "checks.\nThis only affects results at 0.0 and 1.0."},
    NODE_INPUTS_END};
static const struct node_output_def percent_output[] = {{.type = "FLOAT", .name = "sigma_value"},
                                                        NODE_OUTPUTS_END};

/* The model sampling's percent_to_sigma: the ends are sentinels for interval checks. */
static int percent_run(struct node_ctx *c)
{
    const struct sd_model *m = sd_model_of(node_in_at(c, PERCENT_MODEL));
    double p = node_in_float_at(c, PERCENT_SAMPLING_PERCENT), sigma;
    if (!m)
        return node_fail(c, "RuntimeError", "input 'model' is not a MODEL");
    if (p <= 0.0)
        sigma = node_in_bool_at(c, PERCENT_RETURN_ACTUAL_SIGMA) ? m->ms.sigma_max : 999999999.9;
    else if (p >= 1.0)
        sigma = node_in_bool_at(c, PERCENT_RETURN_ACTUAL_SIGMA) ? m->ms.sigma_min : 0.0;
    else /* the model sampling's own map (discrete table or continuous range) */
        sigma = sampling_percent_to_sigma(&m->ms, p);
    node_set_output(c, 0, value_new_float(sigma));
    return 0;
}

const struct node_class sd_sampling_percent_to_sigma = {
    .name = "SamplingPercentToSigma", .category = SIGMAS_CATEGORY, .python_module = MODULE,
    .inputs = percent_inputs, .n_inputs = PERCENT_N, .outputs = percent_output, .run = percent_run};

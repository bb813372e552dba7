/*
 * test_sd_extend_sigmas — ExtendIntermediateSigmas (comfy_extras/nodes_custom_sampler.py)
 * run directly through node_ctx:
 *   - against a float64 transcription of the node written here (linspace, the spacing
 *     curves, sigma + curve * (next - sigma)) for every spacing, steps 1..100 and a few
 *     start/end windows: within 4 float32 ulps of the sigmas (torch rounds each of five
 *     ops to float32);
 *   - against values torch 1.13 gave for ComfyUI's code (tools: /usr/bin/python3 with
 *     torch, the node's extend() run on the sigma list below; printed as hex floats):
 *     linear spacing bit for bit, cosine/sine within 1 ulp of the sigmas (torch's SLEEF
 *     sinf is 1 ulp from the correctly rounded sin(pi/3) that sin() gives here);
 *   - the window is checked against float32 sigmas with the bounds cast to float32,
 *     start_at_sigma < 0 means no upper bound, empty and one-sigma lists pass through.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"

/* Expected values are float32 ops rounded one at a time, as torch's. */
#pragma GCC optimize("fp-contract=off")
#include "node_registry.h"
#include "node_run.h"
#include "sd_custom_nodes.h"
#include "sd_custom_types.h"

#define EXTEND_INPUTS_MAX 8

static struct node_env env;
static char last_msg[256];

static const float sched[] = {14.614642f, 7.0f, 3.0f, 1.0f, 0.0291675f, 0.0f};

/* The node's output for a sigma list (NULL on failure, message in last_msg); caller unrefs. */
static struct value *extend(const float *s, int n, int steps, double start, double end,
                            const char *spacing)
{
    struct value *in[EXTEND_INPUTS_MAX] = {0};
    struct value *out[1] = {0};
    const struct node_class *cls = &sd_extend_intermediate_sigmas;
    in[node_class_input_index(cls, "sigmas")] = sd_sigmas_value(sd_sigmas_new(s, n));
    in[node_class_input_index(cls, "steps")] = value_new_int(steps);
    in[node_class_input_index(cls, "start_at_sigma")] = value_new_float(start);
    in[node_class_input_index(cls, "end_at_sigma")] = value_new_float(end);
    in[node_class_input_index(cls, "spacing")] = value_new_string(spacing);
    struct node_ctx c;
    node_ctx_init(&c, cls, "1", &env, in, out);
    int rc = cls->run(&c);
    snprintf(last_msg, sizeof last_msg, "%s: %s", c.exc_type, c.exc_message.ptr ? c.exc_message.ptr : "");
    node_ctx_release(&c);
    for (int i = 0; i < EXTEND_INPUTS_MAX; i++)
        value_unref(in[i]);
    return rc < 0 ? NULL : out[0];
}

/*
 * float64 transcription: returns the count written to ref; scale[i] is the larger
 * magnitude of the two sigmas a value lies between (float32 rounding of each op is
 * relative to those, not to the result, which may be near 0).
 */
static int reference(const float *s, int n, int steps, double start, double end, int spacing,
                     double *ref, double *scale)
{
    double hi = start < 0 ? INFINITY : (double)(float)start, lo = (double)(float)end;
    int m = 0;
    for (int i = 0; i + 1 < n; i++) {
        scale[m] = fabs((double)s[i]);
        ref[m++] = s[i];
        if (lo <= s[i] && s[i] <= hi) {
            for (int k = 1; k < steps; k++) {
                double x = (double)k / steps;
                double f = spacing == 1 ? sin(x * M_PI / 2) : spacing == 2 ? 1 - cos(x * M_PI / 2) : x;
                scale[m] = fmax(fabs((double)s[i]), fabs((double)s[i + 1]));
                ref[m++] = f * ((double)s[i + 1] - s[i]) + s[i];
            }
        }
    }
    if (n > 0) {
        scale[m] = fabs((double)s[n - 1]);
        ref[m++] = s[n - 1];
    }
    return m;
}

/* |got - want| in float32 ulps of `scale` (at least the smallest normal's ulp). */
static double ulps(float got, double want, double scale)
{
    double ulp = ldexp(1.0, (scale > 0x1p-126 ? ilogb(scale) : -126) - 23);
    return fabs((double)got - want) / ulp;
}

static void test_against_float64(void)
{
    static const char *const names[] = {"linear", "cosine", "sine"};
    static const double windows[][2] = {{-1.0, 0.0}, {-1.0, 12.0}, {5.0, 1.0}, {3.0, 0.0291675}};
    double worst = 0;
    int cases = 0, bad_len = 0;
    double ref[6 * 100 + 1], scale[6 * 100 + 1];
    for (int sp = 0; sp < 3; sp++) {
        for (int steps = 1; steps <= 100; steps++) {
            for (size_t w = 0; w < sizeof windows / sizeof windows[0]; w++) {
                struct value *v = extend(sched, 6, steps, windows[w][0], windows[w][1], names[sp]);
                const struct sd_sigmas *got = sd_sigmas_of(v);
                int m = reference(sched, 6, steps, windows[w][0], windows[w][1], sp, ref, scale);
                if (!got || got->n != m) {
                    bad_len++;
                } else {
                    for (int i = 0; i < m; i++) {
                        double u = ulps(got->v[i], ref[i], scale[i]);
                        if (u > worst)
                            worst = u;
                    }
                }
                value_unref(v);
                cases++;
            }
        }
    }
    ok(bad_len == 0, "%d cases: lengths as the float64 transcription's (%d differ)", cases, bad_len);
    /* Five float32 roundings (x, x * pi / 2, the curve, the product, the sum). */
    ok(worst <= 4.0, "every value within 4 float32 ulps (of its sigmas) of float64 (worst %.2f)",
       worst);
}

/* torch 1.13 on ComfyUI's extend(sched, steps, start, end, spacing). */
struct torch_case {
    int steps;
    double start, end;
    const char *spacing;
    int n;
    float v[19];
};
static const struct torch_case torch_cases[] = {
    {3, -1.0, 0.0, "linear", 16,
     {0x1.d3ab26p+3, 0x1.827218p+3, 0x1.31390cp+3, 0x1.cp+2, 0x1.6aaaaap+2, 0x1.155556p+2, 0x1.8p+1,
      0x1.2aaaaap+1, 0x1.aaaaacp+0, 0x1p+0, 0x1.5a4faep-1, 0x1.693ebcp-2, 0x1.dde15cp-6, 0x1.3e963cp-6,
      0x1.3e964p-7, 0}},
    {3, -1.0, 0.0, "cosine", 16,
     {0x1.d3ab26p+3, 0x1.59d594p+3, 0x1.00a53ap+3, 0x1.cp+2, 0x1.4p+2, 0x1.c49854p+1, 0x1.8p+1, 0x1p+1,
      0x1.449854p+0, 0x1p+0, 0x1.077784p-1, 0x1.461cb8p-3, 0x1.dde15cp-6, 0x1.dde15cp-7, 0x1.00187p-8, 0}},
    {3, -1.0, 0.0, "sine", 16,
     {0x1.d3ab26p+3, 0x1.b305ecp+3, 0x1.59d594p+3, 0x1.cp+2, 0x1.9db3d8p+2, 0x1.4p+2, 0x1.8p+1,
      0x1.5db3d8p+1, 0x1p+1, 0x1p+0, 0x1.bd67dep-1, 0x1.077788p-1, 0x1.dde15cp-6, 0x1.9ddb42p-6,
      0x1.dde16p-7, 0}},
    {5, 5.0, 1.0, "linear", 14,
     {0x1.d3ab26p+3, 0x1.cp+2, 0x1.8p+1, 0x1.4cccccp+1, 0x1.19999ap+1, 0x1.ccccccp+0,
      0x1.666666p+0, 0x1p+0, 0x1.9c9634p-1, 0x1.392c6ap-1, 0x1.ab853cp-2, 0x1.c9635p-3, 0x1.dde15cp-6, 0}},
    {14, -1.0, 12.0, "linear", 19,
     {0x1.d3ab26p+3, 0x1.c2437ep+3, 0x1.b0dbd8p+3, 0x1.9f743p+3, 0x1.8e0c88p+3, 0x1.7ca4e2p+3,
      0x1.6b3d3ap+3, 0x1.59d594p+3, 0x1.486decp+3, 0x1.370644p+3, 0x1.259e9cp+3, 0x1.1436f6p+3,
      0x1.02cf4ep+3, 0x1.e2cf5p+2, 0x1.cp+2, 0x1.8p+1, 0x1p+0, 0x1.dde15cp-6, 0}},
    {4, 3.0, 0.02, "sine", 15,
     {0x1.d3ab26p+3, 0x1.cp+2, 0x1.8p+1, 0x1.6c835ep+1, 0x1.3504f4p+1, 0x1.c3ef14p+0, 0x1p+0,
      0x1.da29cp-1, 0x1.6e69a4p-1, 0x1.9a4e34p-2, 0x1.dde15cp-6, 0x1.b980fap-6, 0x1.51e994p-6,
      0x1.6dc0f4p-7, 0}},
};

static void test_against_torch(void)
{
    for (size_t t = 0; t < sizeof torch_cases / sizeof torch_cases[0]; t++) {
        const struct torch_case *tc = &torch_cases[t];
        struct value *v = extend(sched, 6, tc->steps, tc->start, tc->end, tc->spacing);
        const struct sd_sigmas *got = sd_sigmas_of(v);
        int linear = !strcmp(tc->spacing, "linear"), exact = 0;
        double worst = 0, ref[32], scale[32];
        reference(sched, 6, tc->steps, tc->start, tc->end, 0, ref, scale);
        if (got && got->n == tc->n) {
            for (int i = 0; i < tc->n; i++) {
                exact += got->v[i] == tc->v[i];
                double u = ulps(got->v[i], tc->v[i], scale[i]);
                worst = u > worst ? u : worst;
            }
        }
        ok(got && got->n == tc->n && (linear ? exact == tc->n : worst <= 1.0),
           "torch's extend(steps %d, start %g, end %g, %s): %d values, %d/%d identical, worst %.2f ulp",
           tc->steps, tc->start, tc->end, tc->spacing, got ? got->n : -1, exact, tc->n, worst);
        value_unref(v);
    }
}

static void test_edges(void)
{
    struct value *v = extend(NULL, 0, 3, -1.0, 0.0, "linear");
    ok(v && sd_sigmas_of(v)->n == 0, "an empty list stays empty");
    value_unref(v);
    const float one[] = {2.5f};
    v = extend(one, 1, 3, -1.0, 0.0, "linear");
    ok(v && sd_sigmas_of(v)->n == 1 && sd_sigmas_of(v)->v[0] == 2.5f, "one sigma passes through");
    value_unref(v);
    v = extend(sched, 6, 1, -1.0, 0.0, "cosine");
    ok(v && sd_sigmas_of(v)->n == 6 && !memcmp(sd_sigmas_of(v)->v, sched, sizeof sched),
       "steps 1 adds nothing (linspace(0, 1, 2)[1:-1] is empty)");
    value_unref(v);
    /* 0.0291675 as float32 is 0.029167499...: end 0.0291675 (cast to float32) keeps it in
     * the window, as torch's float32 comparison does; a float64 comparison would not. */
    const float pair[] = {0.0291675f, 0.0f};
    v = extend(pair, 2, 2, -1.0, 0.0291675, "linear");
    ok(v && sd_sigmas_of(v)->n == 3 && sd_sigmas_of(v)->v[1] == 0.0291675f * 0.5f,
       "the window bounds are cast to float32 before comparing");
    value_unref(v);
    v = extend(sched, 6, 2, 2.9, 1.0, "linear");
    volatile float d = sched[4] - sched[3], half = 0.5f * d;
    ok(v && sd_sigmas_of(v)->n == 7 && sd_sigmas_of(v)->v[4] == half + sched[3],
       "only sigmas inside [end, start] get intermediate steps (got %d)",
       v ? sd_sigmas_of(v)->n : -1);
    value_unref(v);
    v = extend(sched, 6, 101, -1.0, 0.0, "linear");
    ok(!v && strstr(last_msg, "ValueError"), "steps above 100 fail: %s", last_msg);
}

int main(void)
{
    test_against_float64();
    test_against_torch();
    test_edges();
    return harness_done();
}

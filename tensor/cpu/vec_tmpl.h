/*
 * vec_tmpl.h — SIMD kernel bodies, included by vec.c once per ISA with the V*
 * macros bound to AVX-512 or AVX2 intrinsics (and a #pragma target around
 * it). One body keeps the two ISAs from drifting apart. Tails (n not a
 * multiple of VL) go through the scalar helpers so results match the
 * reference at every length.
 */

static inline VT V(exp)(VT x)
{
    /* exp(x) = 2^n * p(r), n = round(x / ln2), r = x - n ln2 in [-ln2/2, ln2/2];
     * p is the degree-6 Taylor polynomial: relative error < 2e-7 over that range. */
    x = VMIN(VMAX(x, VSET1(-87.0f)), VSET1(88.0f));
    VT n = VROUND(VMUL(x, VSET1(1.44269504088896341f)));
    VT r = VFMA(n, VSET1(-0.693359375f), x);
    r = VFMA(n, VSET1(2.12194440e-4f), r);
    VT p = VSET1(1.0f / 720.0f);
    p = VFMA(p, r, VSET1(1.0f / 120.0f));
    p = VFMA(p, r, VSET1(1.0f / 24.0f));
    p = VFMA(p, r, VSET1(1.0f / 6.0f));
    p = VFMA(p, r, VSET1(0.5f));
    p = VFMA(p, r, VSET1(1.0f));
    p = VFMA(p, r, VSET1(1.0f));
    return VMUL(p, VPOW2I(n));
}

static inline VT V(sigmoid)(VT x)
{
    /* 1 / (1 + e^-x); e^-x saturates at e^87, so the division never sees inf. */
    return VDIV(VSET1(1.0f), VADD(VSET1(1.0f), V(exp)(VSUB(VSET1(0.0f), x))));
}

static inline VT V(erf)(VT x)
{
    /* Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7), odd extension for x < 0. */
    VT a = VABS(x);
    VT t = VDIV(VSET1(1.0f), VFMA(a, VSET1(0.3275911f), VSET1(1.0f)));
    VT p = VSET1(1.061405429f);
    p = VFMA(p, t, VSET1(-1.453152027f));
    p = VFMA(p, t, VSET1(1.421413741f));
    p = VFMA(p, t, VSET1(-0.284496736f));
    p = VFMA(p, t, VSET1(0.254829592f));
    p = VMUL(p, t);
    VT y = VSUB(VSET1(1.0f), VMUL(p, V(exp)(VSUB(VSET1(0.0f), VMUL(a, a)))));
    return VCOPYSIGN(y, x);
}

static inline VT V(act1)(VT x, enum cpu_act act)
{
    switch (act) {
    case CPU_ACT_SILU: return VMUL(x, V(sigmoid)(x));
    case CPU_ACT_QUICK_GELU: return VMUL(x, V(sigmoid)(VMUL(x, VSET1(1.702f))));
    default:
        return VMUL(VMUL(VSET1(0.5f), x),
                    VADD(VSET1(1.0f), V(erf)(VMUL(x, VSET1(0.70710678118654752f)))));
    }
}

static float V(max)(const float *x, int64_t n)
{
    int64_t i = 0;
    float m = -INFINITY;
    if (n >= VL) {
        VT vm = VLOAD(x);
        for (i = VL; i + VL <= n; i += VL)
            vm = VMAX(vm, VLOAD(x + i));
        m = VREDUCE_MAX(vm);
    }
    for (; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

static float V(exp_sum)(float *y, const float *x, int64_t n, float m)
{
    int64_t i = 0;
    VT vs = VSET1(0.0f), vm = VSET1(m);
    for (; i + VL <= n; i += VL) {
        VT e = V(exp)(VSUB(VLOAD(x + i), vm));
        VSTORE(y + i, e);
        vs = VADD(vs, e);
    }
    float s = VREDUCE_ADD(vs);
    for (; i < n; i++) {
        y[i] = scalar_exp(x[i] - m);
        s += y[i];
    }
    return s;
}

static void V(scale)(float *y, const float *x, float s, int64_t n)
{
    int64_t i = 0;
    VT vs = VSET1(s);
    for (; i + VL <= n; i += VL)
        VSTORE(y + i, VMUL(VLOAD(x + i), vs));
    for (; i < n; i++)
        y[i] = x[i] * s;
}

static void V(act)(float *y, const float *x, int64_t n, enum cpu_act act)
{
    int64_t i = 0;
    for (; i + VL <= n; i += VL)
        VSTORE(y + i, V(act1)(VLOAD(x + i), act));
    for (; i < n; i++)
        y[i] = scalar_act(x[i], act);
}

static void V(geglu)(float *y, const float *a, const float *g, int64_t n)
{
    int64_t i = 0;
    for (; i + VL <= n; i += VL)
        VSTORE(y + i, VMUL(VLOAD(a + i), V(act1)(VLOAD(g + i), CPU_ACT_GELU)));
    for (; i < n; i++)
        y[i] = a[i] * scalar_act(g[i], CPU_ACT_GELU);
}

/* sum of x and sum of (x - m)^2, m a shift (the first element) that keeps the
 * single-pass variance accurate; accumulated per lane in f32, lanes in double. */
static void V(moments)(const float *x, int64_t n, float shift, double *sum, double *sumsq)
{
    int64_t i = 0;
    VT vs = VSET1(0.0f), vq = VSET1(0.0f), vm = VSET1(shift);
    double s = 0, q = 0;
    for (; i + VL <= n; i += VL) {
        VT d = VSUB(VLOAD(x + i), vm);
        vs = VADD(vs, d);
        vq = VFMA(d, d, vq);
        if (((i / VL) & 255) == 255) { /* flush lanes to double every 256 vectors */
            s += VREDUCE_ADD(vs);
            q += VREDUCE_ADD(vq);
            vs = VSET1(0.0f);
            vq = VSET1(0.0f);
        }
    }
    s += VREDUCE_ADD(vs);
    q += VREDUCE_ADD(vq);
    for (; i < n; i++) {
        double d = (double)x[i] - shift;
        s += d;
        q += d * d;
    }
    *sum = s;
    *sumsq = q;
}

/* y = x * a + b (scalars), then SiLU if silu. */
static void V(affine)(float *y, const float *x, int64_t n, float a, float b, int silu)
{
    int64_t i = 0;
    VT va = VSET1(a), vb = VSET1(b);
    for (; i + VL <= n; i += VL) {
        VT v = VFMA(VLOAD(x + i), va, vb);
        if (silu)
            v = VMUL(v, V(sigmoid)(v));
        VSTORE(y + i, v);
    }
    for (; i < n; i++) {
        float v = x[i] * a + b;
        y[i] = silu ? scalar_act(v, CPU_ACT_SILU) : v;
    }
}

/* y = (x - m) * r * g + b with vectors g, b (NULL: 1, 0). */
static void V(ln_apply)(float *y, const float *x, int64_t n, float m, float r, const float *g,
                        const float *b)
{
    int64_t i = 0;
    VT vm = VSET1(m), vr = VSET1(r);
    for (; i + VL <= n; i += VL) {
        VT v = VMUL(VSUB(VLOAD(x + i), vm), vr);
        if (g)
            v = VMUL(v, VLOAD(g + i));
        if (b)
            v = VADD(v, VLOAD(b + i));
        VSTORE(y + i, v);
    }
    for (; i < n; i++) {
        float v = (x[i] - m) * r;
        y[i] = (g ? v * g[i] : v) + (b ? b[i] : 0.0f);
    }
}

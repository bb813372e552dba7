/*
 * beta_ppf — the inverse CDF of the Beta distribution, for the "beta"
 * scheduler (sd15.md §5.5, SciPy's beta.ppf).
 *
 * The scheduler rounds ppf(u)·999 to an integer, so we need the quantile to
 * ~1e-12, not speed: the regularized incomplete beta I_x(a, b) by its
 * continued fraction (modified Lentz), inverted by bisection on [0, 1],
 * which cannot fail to converge since I_x is monotonic.
 */
#include "sampling_sched.h"

#include <math.h>

/* Continued fraction for I_x(a, b), valid (fast) for x < (a + 1) / (a + b + 2). */
static double betacf(double a, double b, double x)
{
    const double tiny = 1e-300, eps = 1e-16;
    double c = 1.0, d = 1.0 - (a + b) * x / (a + 1.0);
    if (fabs(d) < tiny)
        d = tiny;
    d = 1.0 / d;
    double h = d;
    for (int m = 1; m <= 1000; m++) {
        double m2 = 2.0 * m;
        /* Even step: d_{2m} = m (b - m) x / ((a + 2m - 1)(a + 2m)). */
        double num = m * (b - m) * x / ((a + m2 - 1.0) * (a + m2));
        d = 1.0 + num * d;
        c = 1.0 + num / c;
        if (fabs(d) < tiny)
            d = tiny;
        if (fabs(c) < tiny)
            c = tiny;
        d = 1.0 / d;
        h *= d * c;
        /* Odd step: d_{2m+1} = -(a + m)(a + b + m) x / ((a + 2m)(a + 2m + 1)). */
        num = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0));
        d = 1.0 + num * d;
        c = 1.0 + num / c;
        if (fabs(d) < tiny)
            d = tiny;
        if (fabs(c) < tiny)
            c = tiny;
        d = 1.0 / d;
        double del = d * c;
        h *= del;
        if (fabs(del - 1.0) < eps)
            break;
    }
    return h;
}

/* Regularized incomplete beta function I_x(a, b). */
static double betainc(double a, double b, double x)
{
    if (x <= 0.0)
        return 0.0;
    if (x >= 1.0)
        return 1.0;
    double lbeta = lgamma(a + b) - lgamma(a) - lgamma(b);
    double front = exp(lbeta + a * log(x) + b * log1p(-x));
    if (x < (a + 1.0) / (a + b + 2.0))
        return front * betacf(a, b, x) / a;
    /* Symmetry I_x(a, b) = 1 - I_{1-x}(b, a) keeps the fraction convergent. */
    return 1.0 - front * betacf(b, a, 1.0 - x) / b;
}

double sampling__beta_ppf(double p, double a, double b)
{
    if (!(p > 0.0))
        return 0.0;
    if (p >= 1.0)
        return 1.0;
    if (a == b && p == 0.5)
        return 0.5; /* the median of a symmetric Beta, exactly (the scheduler rounds 499.5) */
    double lo = 0.0, hi = 1.0;
    for (int i = 0; i < 200 && hi - lo > 1e-16; i++) {
        double mid = 0.5 * (lo + hi);
        if (betainc(a, b, mid) < p)
            lo = mid;
        else
            hi = mid;
    }
    /* The quantile is the least x with I_x >= p: the upper end of the bracket. */
    return hi;
}

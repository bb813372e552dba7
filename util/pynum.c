/*
 * pynum — see pynum.h.
 */
#include "pynum.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void pynum_format_float(double d, struct buf *out)
{
    if (isnan(d)) {
        buf_adds(out, "nan");
        return;
    }
    if (isinf(d)) {
        buf_adds(out, d < 0 ? "-inf" : "inf");
        return;
    }
    /* Python's repr: the shortest digit string that round-trips, written in
     * fixed notation when the decimal exponent is in [-4, 16), else as
     * d.ddde+XX. Find the digits with %.*e, then lay them out by hand. */
    char tmp[48];
    int prec;
    for (prec = 0; prec < 17; prec++) {
        snprintf(tmp, sizeof(tmp), "%.*e", prec, d);
        if (strtod(tmp, NULL) == d)
            break;
    }
    char digits[24];
    int nd = 0, neg = tmp[0] == '-';
    const char *p = tmp + neg;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9')
            digits[nd++] = *p;
    int exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = '\0';
    if (neg)
        buf_addc(out, '-');
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 < 0) {
            buf_adds(out, "0.");
            for (int k = 0; k < -exp10 - 1; k++)
                buf_addc(out, '0');
            buf_adds(out, digits);
        } else {
            for (int k = 0; k <= exp10; k++)
                buf_addc(out, k < nd ? digits[k] : '0');
            buf_addc(out, '.');
            if (nd > exp10 + 1)
                buf_adds(out, digits + exp10 + 1);
            else
                buf_addc(out, '0');
        }
        return;
    }
    buf_addc(out, digits[0]);
    if (nd > 1) {
        buf_addc(out, '.');
        buf_adds(out, digits + 1);
    }
    buf_printf(out, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
}

int pynum_parse_float(const char *s, double *out)
{
    while (isspace((unsigned char)*s))
        s++;
    const char *b = s;
    const char *p = s;
    if (*p == '+' || *p == '-')
        p++;
    const char *words[] = {"infinity", "inf", "nan"};
    for (int k = 0; k < 3; k++) {
        size_t n = strlen(words[k]);
        if (strncasecmp(p, words[k], n) == 0) {
            const char *e = p + n;
            while (isspace((unsigned char)*e))
                e++;
            if (*e)
                continue;
            double x = k == 2 ? NAN : INFINITY;
            *out = *b == '-' ? -x : x;
            return 0;
        }
    }
    /* Copy the numeric part without underscores (valid only between digits). */
    struct buf t;
    buf_init(&t);
    int ok = 1;
    for (p = b; *p && !isspace((unsigned char)*p); p++) {
        if (*p == '_') {
            if (p == b || !isdigit((unsigned char)p[-1]) || !isdigit((unsigned char)p[1])) {
                ok = 0;
                break;
            }
            continue;
        }
        if (!strchr("+-0123456789.eE", *p)) {
            ok = 0;
            break;
        }
        buf_addc(&t, *p);
    }
    while (ok && isspace((unsigned char)*p))
        p++;
    if (ok && *p)
        ok = 0;
    if (ok) {
        char *end;
        *out = strtod(t.ptr, &end);
        ok = t.len > 0 && *end == '\0' && (isdigit((unsigned char)t.ptr[t.len - 1]) || t.ptr[t.len - 1] == '.');
        /* strtod accepts hex and "1e"; Python does not. */
        if (ok && (strchr(t.ptr, 'x') || strchr(t.ptr, 'X')))
            ok = 0;
        if (ok && !strpbrk(t.ptr, "0123456789"))
            ok = 0;
    }
    buf_release(&t);
    return ok ? 0 : -1;
}

double pynum_round_half_even(double x)
{
    /* floor + fraction, not floor(x + 0.5): x + 0.5 itself rounds for x just below .5. */
    double r = floor(x), f = x - r;
    if (f > 0.5 || (f == 0.5 && fmod(r, 2.0) != 0.0))
        r += 1.0;
    return r;
}

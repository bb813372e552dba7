/*
 * Constant coercion with Python's semantics (comfy-api.md §5.6): int(v), float(v),
 * str(v), bool(v) applied to JSON values, with Python's exception texts, because
 * validation reports them verbatim in `invalid_input_type` errors.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "alloc.h"
#include "graph_coerce.h"
#include "pynum.h"

const char *gco_pytype(const cJSON *v)
{
    if (!v || cJSON_IsNull(v))
        return "NoneType";
    if (cJSON_IsBool(v))
        return "bool";
    if (cJSON_IsString(v))
        return "str";
    if (cJSON_IsArray(v))
        return "list";
    if (cJSON_IsObject(v))
        return "dict";
    double d = gjson_number(v);
    if (cJSON_IsRaw(v) ? !strpbrk(v->valuestring, ".eE") : (isfinite(d) && d == floor(d)))
        return "int";
    return "float";
}

/*
 * Python's int(str): surrounding whitespace, optional sign, decimal digits with
 * single underscores between them. Returns 1 when the syntax is valid; *neg and
 * the digit string (underscores removed) in `digits`.
 */
static int py_int_syntax(const char *s, int *neg, struct buf *digits)
{
    while (isspace((unsigned char)*s))
        s++;
    *neg = 0;
    if (*s == '+' || *s == '-')
        *neg = *s++ == '-';
    if (!isdigit((unsigned char)*s))
        return 0;
    for (; *s; s++) {
        if (isdigit((unsigned char)*s)) {
            buf_addc(digits, *s);
        } else if (*s == '_' && isdigit((unsigned char)s[1]) && isdigit((unsigned char)s[-1])) {
            continue;
        } else {
            break;
        }
    }
    while (isspace((unsigned char)*s))
        s++;
    return *s == '\0';
}

/* Digits (no sign) to int64/uint64. Returns 1 when it fits; *overflow otherwise. */
static int digits_to_int(const char *d, int neg, int64_t *out, int *big)
{
    errno = 0;
    unsigned long long u = strtoull(d, NULL, 10);
    if (errno == ERANGE)
        return 0;
    *big = 0;
    if (neg) {
        if (u > (unsigned long long)INT64_MAX + 1ull)
            return 0;
        *out = (int64_t)(0 - u);
        return 1;
    }
    *out = (int64_t)u;
    *big = u > (unsigned long long)INT64_MAX;
    return 1;
}

int gco_to_int(const cJSON *v, int64_t *out, int *big, int *overflow, struct buf *exc)
{
    *big = 0;
    *overflow = 0;
    if (cJSON_IsBool(v)) {
        *out = cJSON_IsTrue(v);
        return 0;
    }
    if (gjson_is_number(v)) {
        double d;
        if (gjson_get_int(v, out, big, &d))
            return 0;
        if (isnan(d)) {
            buf_adds(exc, "cannot convert float NaN to integer");
            return -1;
        }
        if (isinf(d)) {
            buf_adds(exc, "cannot convert float infinity to integer");
            return -1;
        }
        double t = trunc(d);
        if (t >= -9223372036854775808.0 && t < 9223372036854775808.0) {
            *out = (int64_t)t;
            return 0;
        }
        if (t >= 0 && t < 18446744073709551616.0) {
            *out = (int64_t)(uint64_t)t;
            *big = 1;
            return 0;
        }
        *overflow = t > 0 ? 1 : -1; /* Python ints are unbounded: beyond our 64 bits */
        return 0;
    }
    if (cJSON_IsString(v)) {
        struct buf digits;
        buf_init(&digits);
        int neg, rc = 0;
        if (!py_int_syntax(v->valuestring, &neg, &digits)) {
            buf_adds(exc, "invalid literal for int() with base 10: ");
            gjson_py_repr_str(v->valuestring, exc);
            rc = -1;
        } else if (!digits_to_int(digits.ptr, neg, out, big)) {
            *overflow = neg ? -1 : 1;
        }
        buf_release(&digits);
        return rc;
    }
    buf_printf(exc, "int() argument must be a string, a bytes-like object or a real number, not '%s'",
               gco_pytype(v));
    return -1;
}

int gco_to_float(const cJSON *v, double *out, struct buf *exc)
{
    if (cJSON_IsBool(v)) {
        *out = cJSON_IsTrue(v) ? 1.0 : 0.0;
        return 0;
    }
    if (gjson_is_number(v)) {
        *out = gjson_number(v);
        return 0;
    }
    if (cJSON_IsString(v)) {
        if (pynum_parse_float(v->valuestring, out) == 0)
            return 0;
        buf_adds(exc, "could not convert string to float: ");
        gjson_py_repr_str(v->valuestring, exc);
        return -1;
    }
    buf_printf(exc, "float() argument must be a string or a real number, not '%s'", gco_pytype(v));
    return -1;
}

void gco_to_str(const cJSON *v, struct buf *out)
{
    gjson_py(v, 1, out);
}

int gco_truthy(const cJSON *v)
{
    if (!v || cJSON_IsNull(v) || cJSON_IsFalse(v))
        return 0;
    if (cJSON_IsTrue(v))
        return 1;
    if (cJSON_IsString(v))
        return v->valuestring[0] != '\0';
    if (gjson_is_number(v))
        return gjson_number(v) != 0.0;
    if (cJSON_IsArray(v) || cJSON_IsObject(v))
        return v->child != NULL;
    return 1;
}

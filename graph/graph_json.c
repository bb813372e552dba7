/*
 * JSON helpers: Python-style printing (validation messages quote values the way
 * Python's str()/repr() prints them), ASCII-only printing (PNG tEXt chunks are
 * Latin-1), and exact 64-bit integers, which cJSON's doubles cannot hold.
 *
 * Exact integers: graph_json_parse() parses with cJSON, then walks the text's
 * number tokens alongside the tree's number items (both are in document order)
 * and turns every integer literal beyond 2^53 into a cJSON raw item holding the
 * literal text, so a seed of 18446744073709551615 survives parsing, validation,
 * storage and printing unchanged.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "graph_internal.h"
#include "pynum.h"

#define EXACT_LIMIT 9007199254740992.0 /* 2^53: doubles hold every integer up to here */

static int raw_is_number(const char *s)
{
    if (!s)
        return 0;
    const char *p = s;
    if (*p == '-')
        p++;
    if (*p < '0' || *p > '9')
        return 0;
    char *end;
    strtod(s, &end);
    return end != s && *end == '\0';
}

int gjson_is_number(const cJSON *v)
{
    return cJSON_IsNumber(v) || (cJSON_IsRaw(v) && raw_is_number(v->valuestring));
}

double gjson_number(const cJSON *v)
{
    if (cJSON_IsRaw(v) && v->valuestring)
        return strtod(v->valuestring, NULL);
    return v ? v->valuedouble : 0.0;
}

static int literal_is_integer(const char *s)
{
    return !strpbrk(s, ".eE");
}

int gjson_get_int(const cJSON *v, int64_t *i, int *big, double *d)
{
    *big = 0;
    *d = gjson_number(v);
    if (cJSON_IsRaw(v) && v->valuestring && literal_is_integer(v->valuestring)) {
        const char *s = v->valuestring;
        char *end;
        errno = 0;
        long long x = strtoll(s, &end, 10);
        if (errno == 0 && *end == '\0') {
            *i = x;
            return 1;
        }
        if (s[0] != '-') {
            errno = 0;
            unsigned long long u = strtoull(s, &end, 10);
            if (errno == 0 && *end == '\0') {
                *i = (int64_t)u;
                *big = u > (unsigned long long)INT64_MAX;
                return 1;
            }
        }
        return 0; /* beyond 64 bits: callers compare the double */
    }
    double x = *d;
    if (!isfinite(x) || x != floor(x))
        return 0;
    if (x >= -9223372036854775808.0 && x < 9223372036854775808.0) {
        *i = (int64_t)x;
        return 1;
    }
    if (x >= 0 && x < 18446744073709551616.0) {
        *i = (int64_t)(uint64_t)x;
        *big = 1;
        return 1;
    }
    return 0;
}

cJSON *gjson_int(int64_t i, int big)
{
    if (!big && (double)i <= EXACT_LIMIT && (double)i >= -EXACT_LIMIT)
        return cJSON_CreateNumber((double)i);
    char tmp[32];
    if (big)
        snprintf(tmp, sizeof(tmp), "%llu", (unsigned long long)(uint64_t)i);
    else
        snprintf(tmp, sizeof(tmp), "%lld", (long long)i);
    return cJSON_CreateRaw(tmp);
}

cJSON *gjson_pyfloat(double d)
{
    if (!isfinite(d))
        return cJSON_CreateNull();
    struct buf b;
    buf_init(&b);
    pynum_format_float(d, &b);
    cJSON *r = cJSON_CreateRaw(b.ptr);
    buf_release(&b);
    return r;
}

void gjson_py_repr_str(const char *s, struct buf *out)
{
    char q = (strchr(s, '\'') && !strchr(s, '"')) ? '"' : '\'';
    buf_addc(out, q);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        unsigned c = *p;
        if (c == '\\')
            buf_adds(out, "\\\\");
        else if (c == (unsigned)q)
            buf_printf(out, "\\%c", q);
        else if (c == '\n')
            buf_adds(out, "\\n");
        else if (c == '\r')
            buf_adds(out, "\\r");
        else if (c == '\t')
            buf_adds(out, "\\t");
        else if (c < 0x20 || c == 0x7f)
            buf_printf(out, "\\x%02x", c);
        else
            buf_addc(out, (char)c);
    }
    buf_addc(out, q);
}

static void py_number(const cJSON *v, struct buf *out)
{
    if (cJSON_IsRaw(v)) {
        buf_adds(out, v->valuestring);
        return;
    }
    double d = v->valuedouble;
    /* cJSON does not keep the literal: an integral value is taken as a Python int
     * (JSON "8" and "8.0" both print as 8 here). */
    if (isfinite(d) && d == floor(d) && fabs(d) <= EXACT_LIMIT)
        buf_printf(out, "%lld", (long long)d);
    else
        pynum_format_float(d, out);
}

void gjson_py(const cJSON *v, int as_str, struct buf *out)
{
    if (!v || cJSON_IsNull(v)) {
        buf_adds(out, "None");
    } else if (cJSON_IsTrue(v)) {
        buf_adds(out, "True");
    } else if (cJSON_IsFalse(v)) {
        buf_adds(out, "False");
    } else if (cJSON_IsString(v)) {
        if (as_str)
            buf_adds(out, v->valuestring);
        else
            gjson_py_repr_str(v->valuestring, out);
    } else if (gjson_is_number(v)) {
        py_number(v, out);
    } else if (cJSON_IsArray(v)) {
        buf_addc(out, '[');
        for (cJSON *c = v->child; c; c = c->next) {
            gjson_py(c, 0, out);
            if (c->next)
                buf_adds(out, ", ");
        }
        buf_addc(out, ']');
    } else if (cJSON_IsObject(v)) {
        buf_addc(out, '{');
        for (cJSON *c = v->child; c; c = c->next) {
            gjson_py_repr_str(c->string ? c->string : "", out);
            buf_adds(out, ": ");
            gjson_py(c, 0, out);
            if (c->next)
                buf_adds(out, ", ");
        }
        buf_addc(out, '}');
    } else if (cJSON_IsRaw(v)) {
        buf_adds(out, v->valuestring);
    }
}

/* Decode one UTF-8 sequence; returns its length (1 with U+FFFD when invalid). */
static int utf8_decode(const unsigned char *p, uint32_t *cp)
{
    if (p[0] < 0x80) {
        *cp = p[0];
        return 1;
    }
    int n = (p[0] & 0xe0) == 0xc0 ? 2 : (p[0] & 0xf0) == 0xe0 ? 3 : (p[0] & 0xf8) == 0xf0 ? 4 : 0;
    if (!n) {
        *cp = 0xfffd;
        return 1;
    }
    uint32_t c = p[0] & (0x7f >> n);
    for (int k = 1; k < n; k++) {
        if ((p[k] & 0xc0) != 0x80) {
            *cp = 0xfffd;
            return 1;
        }
        c = (c << 6) | (p[k] & 0x3f);
    }
    *cp = c;
    return n;
}

char *gjson_print_ascii(const cJSON *v)
{
    char *s = cJSON_PrintUnformatted(v);
    if (!s)
        return xstrdup("null");
    struct buf b;
    buf_init(&b);
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        if (*p < 0x80) {
            buf_addc(&b, (char)*p++);
            continue;
        }
        uint32_t cp;
        p += utf8_decode(p, &cp);
        if (cp >= 0x10000) {
            cp -= 0x10000;
            buf_printf(&b, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
        } else {
            buf_printf(&b, "\\u%04x", cp);
        }
    }
    cJSON_free(s);
    char *r = buf_detach(&b, NULL);
    buf_release(&b); /* buf_detach re-initialises b, which allocates */
    return r;
}

/* ---- exact-integer parsing ---------------------------------------------------------- */

struct numtok {
    const char *p;
    size_t n;
};

static void collect_items(cJSON *v, cJSON ***items, size_t *n, size_t *cap)
{
    for (; v; v = v->next) {
        if (cJSON_IsNumber(v)) {
            if (*n == *cap) {
                *cap = *cap ? 2 * *cap : 64;
                *items = xrealloc(*items, *cap * sizeof(**items));
            }
            (*items)[(*n)++] = v;
        }
        if (v->child)
            collect_items(v->child, items, n, cap);
    }
}

cJSON *graph_json_parse(const char *text, size_t len)
{
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root)
        return NULL;
    size_t scan = end ? (size_t)(end - text) : len;
    for (size_t k = scan; k < len; k++)
        if (text[k] != ' ' && text[k] != '\t' && text[k] != '\r' && text[k] != '\n') {
            cJSON_Delete(root);
            return NULL;
        }
    /* Cheap exit: no digit run long enough to exceed 2^53 means nothing to fix. */
    int run = 0, need = 0;
    for (size_t k = 0; k < scan && !need; k++) {
        run = (text[k] >= '0' && text[k] <= '9') ? run + 1 : 0;
        need = run >= 16;
    }
    if (!need)
        return root;

    cJSON **items = NULL;
    size_t n_items = 0, cap = 0, idx = 0;
    collect_items(root, &items, &n_items, &cap);
    int in_str = 0;
    for (size_t k = 0; k < scan; k++) {
        char c = text[k];
        if (in_str) {
            if (c == '\\')
                k++;
            else if (c == '"')
                in_str = 0;
            continue;
        }
        if (c == '"') {
            in_str = 1;
            continue;
        }
        if (c != '-' && (c < '0' || c > '9'))
            continue;
        size_t s = k;
        while (k < scan && strchr("+-0123456789.eE", text[k]))
            k++;
        size_t tl = k - s;
        k--;
        if (idx >= n_items)
            break; /* should not happen: cJSON accepted the same text */
        cJSON *item = items[idx++];
        char lit[64];
        if (tl >= sizeof(lit))
            continue;
        memcpy(lit, text + s, tl);
        lit[tl] = '\0';
        if (literal_is_integer(lit) && fabs(item->valuedouble) > EXACT_LIMIT) {
            /* Turn the number into a raw item, keeping key and position. */
            item->type = cJSON_Raw;
            item->valuestring = cJSON_malloc(tl + 1);
            memcpy(item->valuestring, lit, tl + 1);
        }
    }
    xfree(items);
    return root;
}

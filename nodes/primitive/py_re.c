/*
 * py_re — Python re over PCRE2 (py_re.h says what is reproduced and what is not).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "py_re.h"

#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "err.h"

struct py_re {
    pcre2_code *code;          /* owned */
    pcre2_match_data *md;      /* owned; sized for the pattern */
    int n_groups;
};

static int is_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/*
 * Rewrite Python spellings PCRE2 reads differently into `out`. Escapes are copied
 * as pairs so that an escaped bracket or brace never changes the class state.
 */
static void translate(const char *p, struct buf *out)
{
    int in_class = 0;
    for (size_t i = 0; p[i];) {
        char c = p[i];
        if (c == '\\' && p[i + 1]) {
            char e = p[i + 1];
            int nhex = e == 'u' ? 4 : e == 'U' ? 8 : 0;
            int k = 0;
            while (nhex && k < nhex && is_hex(p[i + 2 + k]))
                k++;
            if (nhex && k == nhex) {
                /* \uXXXX / \UXXXXXXXX: a code point, as \x{...}. */
                buf_adds(out, "\\x{");
                buf_add(out, p + i + 2, (size_t)nhex);
                buf_addc(out, '}');
                i += 2 + (size_t)nhex;
                continue;
            }
            if (e == 'Z' && !in_class) {
                buf_adds(out, "\\z"); /* Python's \Z is the absolute end */
                i += 2;
                continue;
            }
            buf_add(out, p + i, 2);
            i += 2;
            continue;
        }
        if (in_class) {
            /* A ']' right after '[' or '[^' is a literal in both dialects. */
            if (c == ']')
                in_class = 0;
            buf_addc(out, c);
            i++;
            continue;
        }
        if (c == '[') {
            in_class = 1;
            buf_addc(out, c);
            i++;
            if (p[i] == '^')
                buf_addc(out, p[i++]);
            if (p[i] == ']')
                buf_addc(out, p[i++]);
            continue;
        }
        if (c == '{' && p[i + 1] == ',') {
            /* {,n} (Python: 0 to n) is a literal to PCRE2 10.42. */
            size_t j = i + 2;
            while (p[j] >= '0' && p[j] <= '9')
                j++;
            if (j > i + 2 && p[j] == '}') {
                buf_adds(out, "{0");
                buf_add(out, p + i + 1, j + 1 - (i + 1));
                i = j + 1;
                continue;
            }
        }
        buf_addc(out, c);
        i++;
    }
}

int py_re_compile(const char *pattern, unsigned flags, struct py_re **out, struct buf *why)
{
    struct buf t;
    buf_init(&t);
    translate(pattern ? pattern : "", &t);
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
    if (flags & PY_RE_IGNORECASE)
        opts |= PCRE2_CASELESS;
    if (flags & PY_RE_MULTILINE)
        opts |= PCRE2_MULTILINE;
    if (flags & PY_RE_DOTALL)
        opts |= PCRE2_DOTALL;
    int ec = 0;
    PCRE2_SIZE eoff = 0;
    pcre2_code *code =
        pcre2_compile((PCRE2_SPTR)(t.ptr ? t.ptr : ""), t.len, opts, &ec, &eoff, NULL);
    buf_release(&t);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        buf_printf(why, "%s at position %zu", (const char *)msg, (size_t)eoff);
        return ERR_INVALID;
    }
    uint32_t ng = 0;
    pcre2_pattern_info(code, PCRE2_INFO_CAPTURECOUNT, &ng);
    if (ng > PY_RE_MAX_GROUPS) {
        pcre2_code_free(code);
        buf_printf(why, "too many groups (%u, at most %d)", (unsigned)ng, PY_RE_MAX_GROUPS);
        return ERR_INVALID;
    }
    struct py_re *re = xcalloc(1, sizeof *re);
    re->code = code;
    re->md = pcre2_match_data_create_from_pattern(code, NULL);
    if (!re->md)
        PANIC("pcre2_match_data_create_from_pattern: out of memory");
    re->n_groups = (int)ng;
    *out = re;
    return 0;
}

void py_re_free(struct py_re *re)
{
    if (!re)
        return;
    pcre2_match_data_free(re->md);
    pcre2_code_free(re->code);
    xfree(re);
}

int py_re_groups(const struct py_re *re)
{
    return re->n_groups;
}

/* One PCRE2 match at or after `pos` with `opts`; 1 matched, 0 none, <0 error. */
static int match_at(const struct py_re *re, const char *s, size_t len, size_t pos, uint32_t opts,
                    struct py_re_match *m, struct buf *why)
{
    int rc = pcre2_match(re->code, (PCRE2_SPTR)s, len, pos, opts, re->md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH)
        return 0;
    if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        buf_printf(why, "%s", (const char *)msg);
        return ERR_INVALID;
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(re->md);
    uint32_t npairs = pcre2_get_ovector_count(re->md);
    m->n_groups = re->n_groups;
    for (int g = 0; g <= re->n_groups; g++) {
        if ((uint32_t)g < npairs && g < rc && ov[2 * g] != PCRE2_UNSET) {
            m->start[g] = (long)ov[2 * g];
            m->end[g] = (long)ov[2 * g + 1];
        } else {
            m->start[g] = m->end[g] = -1;
        }
    }
    return 1;
}

/* Bytes of the UTF-8 character at s[pos] (1 for a stray byte). */
static size_t char_len(const char *s, size_t len, size_t pos)
{
    unsigned char c = (unsigned char)s[pos];
    size_t n = c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
    return pos + n > len ? len - pos : n;
}

int py_re_next(const struct py_re *re, const char *s, size_t len, struct py_re_iter *it,
               struct py_re_match *m, struct buf *why)
{
    if (it->pos > len)
        return 0;
    int rc;
    if (it->prev_empty_at >= 0 && (size_t)it->prev_empty_at == it->pos) {
        /*
         * After an empty match at pos, Python's sre searches again from pos with the
         * rule that the match must not be empty there: a non-empty match starting at
         * pos, or any match further on.
         */
        rc = match_at(re, s, len, it->pos, PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED, m, why);
        if (rc == 0) {
            if (it->pos >= len)
                return 0;
            it->pos += char_len(s, len, it->pos);
            rc = match_at(re, s, len, it->pos, 0, m, why);
        }
    } else {
        rc = match_at(re, s, len, it->pos, 0, m, why);
    }
    if (rc <= 0)
        return rc;
    it->pos = (size_t)m->end[0];
    it->prev_empty_at = m->start[0] == m->end[0] ? m->start[0] : -1;
    return 1;
}

/* ---- re.sub's template ----------------------------------------------------------------- */

/* A parsed template: literal bytes, or a group reference (group >= 0). */
struct piece {
    int group; /* -1: literal text [off, off + n) of `lit` */
    size_t off, n;
};

struct tmpl {
    struct buf lit;
    struct piece *p; /* owned */
    size_t n, cap;
};

static void tmpl_add(struct tmpl *t, int group, const char *text, size_t n)
{
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 8;
        t->p = xrealloc(t->p, t->cap * sizeof *t->p);
    }
    t->p[t->n++] = (struct piece){.group = group, .off = t->lit.len, .n = n};
    if (group < 0)
        buf_add(&t->lit, text, n);
}

static int group_ref(const struct py_re *re, int g, struct buf *why)
{
    if (g > re->n_groups) {
        buf_printf(why, "invalid group reference %d", g);
        return ERR_INVALID;
    }
    return g;
}

/* \g<name> or \g<number> starting at r[*i] == '<'; the group, or <0. */
static int named_ref(const struct py_re *re, const char *r, size_t *i, struct buf *why)
{
    if (r[*i] != '<') {
        buf_adds(why, "missing <");
        return ERR_INVALID;
    }
    const char *name = r + *i + 1, *close = strchr(name, '>');
    if (!close) {
        buf_adds(why, "missing >, unterminated name");
        return ERR_INVALID;
    }
    size_t n = (size_t)(close - name);
    *i += n + 2;
    if (!n) {
        buf_adds(why, "missing group name");
        return ERR_INVALID;
    }
    int digits = 1;
    for (size_t k = 0; k < n; k++)
        digits &= name[k] >= '0' && name[k] <= '9';
    if (digits) {
        if (n > 9) {
            buf_printf(why, "invalid group reference %.*s", (int)n, name);
            return ERR_INVALID;
        }
        return group_ref(re, atoi(name), why);
    }
    char nm[256];
    if (n >= sizeof nm) {
        buf_printf(why, "unknown group name '%.*s'", (int)n, name);
        return ERR_INVALID;
    }
    memcpy(nm, name, n);
    nm[n] = 0;
    int g = pcre2_substring_number_from_name(re->code, (PCRE2_SPTR)nm);
    if (g < 0) {
        /* Python raises IndexError here, not re.error. */
        buf_printf(why, "unknown group name '%s'", nm);
        return ERR_NOT_FOUND;
    }
    return g;
}

/* Python's sre_parse.parse_template. */
static int tmpl_parse(const struct py_re *re, const char *r, struct tmpl *t, struct buf *why)
{
    static const char esc_in[] = "abfnrtv\\", esc_out[] = "\a\b\f\n\r\t\v\\";
    size_t i = 0;
    while (r[i]) {
        size_t j = i;
        while (r[j] && r[j] != '\\')
            j++;
        if (j > i)
            tmpl_add(t, -1, r + i, j - i);
        i = j;
        if (!r[i])
            break;
        char c = r[i + 1];
        if (!c) {
            buf_adds(why, "bad escape (end of pattern)");
            return ERR_INVALID;
        }
        i += 2;
        const char *e = strchr(esc_in, c);
        if (e) {
            tmpl_add(t, -1, esc_out + (e - esc_in), 1);
        } else if (c == 'g') {
            int g = named_ref(re, r, &i, why);
            if (g < 0)
                return g;
            tmpl_add(t, g, NULL, 0);
        } else if (c == '0') {
            /* \0, \0o, \0oo: an octal character. */
            int v = 0, k = 0;
            while (k < 2 && r[i] >= '0' && r[i] <= '7') {
                v = v * 8 + (r[i++] - '0');
                k++;
            }
            char ch = (char)(v & 0xff);
            tmpl_add(t, -1, &ch, 1);
        } else if (c >= '1' && c <= '9') {
            int g = c - '0';
            if (r[i] >= '0' && r[i] <= '9') {
                char d2 = r[i++];
                if (c <= '7' && d2 <= '7' && r[i] >= '0' && r[i] <= '7') {
                    /* Three octal digits: a character, at most \377. */
                    int v = (c - '0') * 64 + (d2 - '0') * 8 + (r[i++] - '0');
                    if (v > 0377) {
                        buf_printf(why, "octal escape value \\%c%c%c outside of range 0-0o377", c,
                                   d2, r[i - 1]);
                        return ERR_INVALID;
                    }
                    /* Python inserts chr(v): a code point, so encode it as UTF-8. */
                    char u[2];
                    size_t un = 1;
                    if (v < 0x80) {
                        u[0] = (char)v;
                    } else {
                        u[0] = (char)(0xc0 | (v >> 6));
                        u[1] = (char)(0x80 | (v & 0x3f));
                        un = 2;
                    }
                    tmpl_add(t, -1, u, un);
                    continue;
                }
                g = g * 10 + (d2 - '0');
            }
            if ((g = group_ref(re, g, why)) < 0)
                return g;
            tmpl_add(t, g, NULL, 0);
        } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
            buf_printf(why, "bad escape \\%c", c);
            return ERR_INVALID;
        } else {
            /* Any other escape stays as written, backslash included. */
            tmpl_add(t, -1, r + i - 2, 2);
        }
    }
    return 0;
}

static void tmpl_release(struct tmpl *t)
{
    buf_release(&t->lit);
    xfree(t->p);
}

int py_re_sub(const struct py_re *re, const char *repl, const char *subject, long count,
              struct buf *out, struct buf *why)
{
    struct tmpl t = {0};
    buf_init(&t.lit);
    int rc = tmpl_parse(re, repl ? repl : "", &t, why);
    if (rc < 0)
        goto done;
    size_t len = strlen(subject), last = 0;
    struct py_re_iter it = {.pos = 0, .prev_empty_at = -1};
    struct py_re_match m;
    long done_n = 0;
    while ((count <= 0 || done_n < count) && (rc = py_re_next(re, subject, len, &it, &m, why)) > 0) {
        buf_add(out, subject + last, (size_t)m.start[0] - last);
        for (size_t k = 0; k < t.n; k++) {
            const struct piece *p = &t.p[k];
            if (p->group < 0)
                buf_add(out, t.lit.ptr + p->off, p->n);
            else if (m.start[p->group] >= 0)
                buf_add(out, subject + m.start[p->group],
                        (size_t)(m.end[p->group] - m.start[p->group]));
        }
        last = (size_t)m.end[0];
        done_n++;
    }
    if (rc < 0)
        goto done;
    buf_adds(out, subject + last);
    rc = 0;
done:
    tmpl_release(&t);
    return rc;
}

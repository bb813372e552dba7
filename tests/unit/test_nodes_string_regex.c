/*
 * test_nodes_string_regex — RegexMatch, RegexExtract and RegexReplace
 * (nodes/primitive/nodes_string_regex.c over py_re.c) run directly. Every expected
 * value below is what CPython 3.11's re returned for the same call through
 * ComfyUI's execute() code (re.search / findall / finditer / sub with the node's
 * flags), produced once by a throwaway script; the test needs no Python.
 */
#include <stdarg.h>
#include <string.h>

#include "alloc.h"
#include "harness.h"
#include "node_registry.h"
#include "node_run.h"
#include "nodes_string.h"
#include "py_re.h"

static struct node_env env = {.preview_size = 512};

struct match_case {
    const char *s, *pat;
    int ci, ml, dotall, want;
};
struct extract_case {
    const char *s, *pat, *mode;
    int ci, ml, dotall, group;
    const char *want;
};
struct replace_case {
    const char *s, *pat, *repl;
    int ci, ml, dotall, count;
    int err; /* 0: none, 1: re.error, 2: IndexError */
    const char *want;
};

static const struct match_case match_cases[] = {
    {"Hello World", "world", 1, 0, 0, 1},
    {"Hello World", "world", 0, 0, 0, 0},
    {"a\nb", "^b", 0, 0, 0, 0},
    {"a\nb", "^b", 0, 1, 0, 1},
    {"a\nb", "a.b", 0, 0, 0, 0},
    {"a\nb", "a.b", 0, 0, 1, 1},
    {"x", "(", 1, 0, 0, 0},
    {"caf\xc3""\xa9""", "CAF\xc3""\x89""", 1, 0, 0, 1},
    {"\xd9""\xa3""", "^\\d$", 0, 0, 0, 1},
    {"ab\n", "ab\\Z", 0, 0, 0, 0},
    {"ab\n", "ab$", 0, 0, 0, 1},
    {"aa", "^a{,2}$", 0, 0, 0, 1},
    {"\xc3""\xa9""", "\\u00e9", 0, 0, 0, 1},
    {"na\xc3""\xaf""ve", "^\\w+$", 0, 0, 0, 1},
};
static const struct extract_case extract_cases[] = {
    {"a1b22c333", "\\d+", "First Match", 1, 0, 0, 1, "1"},
    {"a1b22c333", "\\d+", "All Matches", 1, 0, 0, 1, "1\n22\n333"},
    {"k1=v1;k2=v2", "(\\w+)=(\\w+)", "All Matches", 1, 0, 0, 1, "k1\nk2"},
    {"k1=v1;k2=v2", "(\\w+)=(\\w+)", "All Groups", 1, 0, 0, 2, "v1\nv2"},
    {"k1=v1;k2=v2", "(\\w+)=(\\w+)", "First Group", 1, 0, 0, 2, "v1"},
    {"k1=v1;k2=v2", "(\\w+)=(\\w+)", "First Group", 1, 0, 0, 3, ""},
    {"k1=v1;k2=v2", "(\\w+)=(\\w+)", "First Group", 1, 0, 0, 0, "k1=v1"},
    {"abxd", "x*", "All Matches", 1, 0, 0, 1, "\n\nx\n\n"},
    {"Foo fOO", "(?P<w>foo)", "All Groups", 1, 0, 0, 1, "Foo\nfOO"},
    {"abc", "[", "First Match", 1, 0, 0, 1, ""},
    {"abc", "b", "All Groups", 1, 0, 0, 1, ""},
    {"line1\nline2", "^line(\\d)$", "All Matches", 1, 1, 0, 1, "1\n2"},
};
static const struct replace_case replace_cases[] = {
    {"abxd", "x*", "-", 1, 0, 0, 0, 0, "-a-b--d-"},
    {"Hello hello", "hello", "bye", 1, 0, 0, 0, 0, "bye bye"},
    {"Hello hello", "hello", "bye", 0, 0, 0, 0, 0, "Hello bye"},
    {"a1b2c3", "\\d", "#", 1, 0, 0, 2, 0, "a#b#c3"},
    {"John Smith", "(\\w+) (\\w+)", "\\2, \\1", 1, 0, 0, 0, 0, "Smith, John"},
    {"John Smith", "(?P<f>\\w+) (?P<l>\\w+)", "\\g<l> \\g<f>\\n\\g<0>", 1, 0, 0, 0, 0, "Smith John\nJohn Smith"},
    {"ab", "(a)|(b)", "[\\1\\2]", 1, 0, 0, 0, 0, "[a][b]"},
    {"abc", "b", "\\101\\t\\&", 1, 0, 0, 0, 0, "aA\x09""\\&c"},
    {"a.b", "\\.", "\\\\", 1, 0, 0, 0, 0, "a\\b"},
    {"\xc3""\xa9""t\xc3""\xa9""", "\xc3""\x89""", "e", 1, 0, 0, 0, 0, "ete"},
    {"aaa", "", "-", 1, 0, 0, 0, 0, "-a-a-a-"},
    {"x", "x", "\\q", 1, 0, 0, 0, 1, ""},
    {"x", "x", "\\3", 1, 0, 0, 0, 1, ""},
    {"x", "(", "y", 1, 0, 0, 0, 1, ""},
    {"x", "x", "\\g<nope>", 1, 0, 0, 0, 2, ""},
};

/* Run `cls` on in[0..n) (references taken over); returns the run's code, output 0 in *out. */
static int run(const struct node_class *cls, struct value **in, int n, struct value **out,
               char *exc_type, size_t exc_len)
{
    struct value *outs[1] = {0};
    struct node_ctx c;
    node_ctx_init(&c, cls, "1", &env, in, outs);
    int rc = cls->run(&c);
    if (exc_type)
        snprintf(exc_type, exc_len, "%s", c.exc_type);
    node_ctx_release(&c);
    for (int i = 0; i < n; i++)
        value_unref(in[i]);
    *out = outs[0];
    return rc;
}

#define S(x) value_new_string(x)
#define B(x) value_new_bool(x)
#define I(x) value_new_int(x)

static void check_match(void)
{
    for (size_t i = 0; i < sizeof match_cases / sizeof match_cases[0]; i++) {
        const struct match_case *k = &match_cases[i];
        struct value *in[5] = {S(k->s), S(k->pat), B(k->ci), B(k->ml), B(k->dotall)}, *v = NULL;
        int rc = run(&nodes_regex_match, in, 5, &v, NULL, 0);
        ok(rc == 0 && v && v->i == k->want, "RegexMatch /%s/ (i%d m%d s%d) is %d", k->pat, k->ci,
           k->ml, k->dotall, k->want);
        value_unref(v);
    }
}

static void check_extract(void)
{
    for (size_t i = 0; i < sizeof extract_cases / sizeof extract_cases[0]; i++) {
        const struct extract_case *k = &extract_cases[i];
        struct value *in[7] = {S(k->s),     S(k->pat),     S(k->mode), B(k->ci),
                               B(k->ml),    B(k->dotall),  I(k->group)},
                     *v = NULL;
        int rc = run(&nodes_regex_extract, in, 7, &v, NULL, 0);
        ok(rc == 0 && v && !strcmp(v->s, k->want), "RegexExtract /%s/ %s group %d: '%s' (want '%s')",
           k->pat, k->mode, k->group, v ? v->s : "(null)", k->want);
        value_unref(v);
    }
}

static void check_replace(void)
{
    for (size_t i = 0; i < sizeof replace_cases / sizeof replace_cases[0]; i++) {
        const struct replace_case *k = &replace_cases[i];
        struct value *in[7] = {S(k->s),  S(k->pat),    S(k->repl), B(k->ci),
                               B(k->ml), B(k->dotall), I(k->count)},
                     *v = NULL;
        char exc[64] = "";
        int rc = run(&nodes_regex_replace, in, 7, &v, exc, sizeof exc);
        if (k->err) {
            const char *want_exc = k->err == 2 ? "IndexError" : "re.error";
            ok(rc < 0 && !v && !strcmp(exc, want_exc), "RegexReplace /%s/ -> '%s' raises %s (%s)",
               k->pat, k->repl, want_exc, exc);
        } else {
            ok(rc == 0 && v && !strcmp(v->s, k->want), "RegexReplace /%s/ -> '%s' count %d: '%s' (want '%s')",
               k->pat, k->repl, k->count, v ? v->s : "(null)", k->want);
        }
        value_unref(v);
    }
    /* The optional inputs absent: ComfyUI's defaults (case-insensitive, all matches). */
    struct value *in[7] = {S("A a"), S("a"), S("b")}, *v = NULL;
    int rc = run(&nodes_regex_replace, in, 7, &v, NULL, 0);
    ok(rc == 0 && v && !strcmp(v->s, "b b"), "RegexReplace defaults: '%s'", v ? v->s : "(null)");
    value_unref(v);
}

/* A pattern with more groups than a match can report is refused, not overrun. */
static void check_limits(void)
{
    struct buf p, why;
    buf_init(&p);
    buf_init(&why);
    for (int i = 0; i <= PY_RE_MAX_GROUPS; i++)
        buf_adds(&p, "(a)");
    struct py_re *re = NULL;
    ok(py_re_compile(p.ptr, 0, &re, &why) == ERR_INVALID && !re, "101 groups refused: %s",
       why.ptr ? why.ptr : "");
    buf_release(&p);
    buf_release(&why);
}

int main(void)
{
    long live = alloc_live_count();
    check_match();
    check_extract();
    check_replace();
    check_limits();
    ok(alloc_live_count() == live, "no allocation left live (%ld)", alloc_live_count() - live);
    return harness_done();
}

/*
 * test_nodes_string — comfy_extras/nodes_string.py's nodes (nodes/nodes_string.c)
 * run directly; every expected value is what CPython 3 returns for the same call
 * (str.join, slicing, len, upper/lower/capitalize/title, strip, replace, in,
 * startswith/endswith), worked out by hand from Python's documented semantics.
 */
#include <locale.h>
#include <stdarg.h>
#include <string.h>

#include "alloc.h"
#include "harness.h"
#include "node_registry.h"
#include "node_run.h"
#include "nodes_string.h"

static struct node_env env = {.preview_size = 512};

/* Run `cls` with inputs given as name/value pairs (NULL-terminated); returns output 0. */
static struct value *run(const struct node_class *cls, ...)
{
    struct value *in[8] = {0}, *out[1] = {0};
    va_list ap;
    va_start(ap, cls);
    for (const char *name; (name = va_arg(ap, const char *)) != NULL;) {
        int i = node_class_input_index(cls, name);
        ASSERT(i >= 0);
        in[i] = va_arg(ap, struct value *);
    }
    va_end(ap);
    struct node_ctx c;
    node_ctx_init(&c, cls, "1", &env, in, out);
    int rc = cls->run(&c);
    node_ctx_release(&c);
    for (int i = 0; i < 8; i++)
        value_unref(in[i]);
    ASSERT(rc == 0);
    return out[0];
}

#define S(x) value_new_string(x)
#define I(x) value_new_int(x)
#define B(x) value_new_bool(x)

static void expect_str(struct value *v, const char *want, const char *what)
{
    ok(v && !strcmp(v->s, want), "%s: '%s' (want '%s')", what, v ? v->s : "(null)", want);
    value_unref(v);
}

static void expect_int(struct value *v, int64_t want, const char *what)
{
    ok(v && v->i == want, "%s: %lld (want %lld)", what, v ? (long long)v->i : -1LL, (long long)want);
    value_unref(v);
}

int main(void)
{
    long live = alloc_live_count();
    expect_str(run(&nodes_string_concatenate, "string_a", S("a"), "string_b", S("b"), "delimiter", S("--"), NULL),
               "a--b", "'--'.join(('a', 'b'))");
    const char *s = "h\xc3\xa9llo w\xc3\xb6rld"; /* "héllo wörld": 11 code points, 13 bytes */
    expect_str(run(&nodes_string_substring, "string", S(s), "start", I(1), "end", I(-1), NULL),
               "\xc3\xa9llo w\xc3\xb6rl", "s[1:-1] counts code points");
    expect_str(run(&nodes_string_substring, "string", S(s), "start", I(-5), "end", I(100), NULL),
               "w\xc3\xb6rld", "s[-5:100]");
    expect_str(run(&nodes_string_substring, "string", S(s), "start", I(4), "end", I(2), NULL), "", "s[4:2]");
    expect_str(run(&nodes_string_substring, "string", S(s), "start", I(-100), "end", I(-10), NULL), "h", "s[-100:-10]");
    expect_int(run(&nodes_string_length, "string", S(s), NULL), 11, "len('héllo wörld')");
    expect_int(run(&nodes_string_length, "string", S("a\xf0\x9f\x98\x80"), NULL), 2, "len('a😀')");
    expect_int(run(&nodes_string_length, "string", S(""), NULL), 0, "len('')");

    expect_str(run(&nodes_case_converter, "string", S("hELLO wORLD they're 3rd"), "mode", S("Title Case"), NULL),
               "Hello World They'Re 3Rd", "title(): a letter after a non-cased character is upper");
    expect_str(run(&nodes_case_converter, "string", S("hELLO World"), "mode", S("Capitalize"), NULL),
               "Hello world", "capitalize()");
    expect_str(run(&nodes_case_converter, "string", S("MiXeD 1"), "mode", S("lowercase"), NULL), "mixed 1", "lower()");
    locale_t have_utf8 = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
    if (have_utf8) {
        freelocale(have_utf8);
        expect_str(run(&nodes_case_converter, "string", S(s), "mode", S("UPPERCASE"), NULL),
                   "H\xc3\x89LLO W\xc3\x96RLD", "upper() of non-ASCII letters");
        expect_str(run(&nodes_case_converter, "string", S("\xc3\x89T\xc3\x89"), "mode", S("lowercase"), NULL),
                   "\xc3\xa9t\xc3\xa9", "lower('ÉTÉ')");
    }

    const char *ws = "\xc2\xa0 x y\xe3\x80\x80\n"; /* NBSP, space, "x y", ideographic space, LF */
    expect_str(run(&nodes_string_trim, "string", S(ws), "mode", S("Both"), NULL), "x y", "strip() of Unicode spaces");
    expect_str(run(&nodes_string_trim, "string", S(ws), "mode", S("Left"), NULL), "x y\xe3\x80\x80\n", "lstrip()");
    expect_str(run(&nodes_string_trim, "string", S(ws), "mode", S("Right"), NULL), "\xc2\xa0 x y", "rstrip()");

    expect_str(run(&nodes_string_replace, "string", S("h\xc3\xa9y"), "find", S(""), "replace", S("-"), NULL),
               "-h-\xc3\xa9-y-", "'héy'.replace('', '-') goes between code points");
    expect_str(run(&nodes_string_replace, "string", S("aaa"), "find", S("aa"), "replace", S("b"), NULL), "ba",
               "replace() is left to right, without overlaps");
    expect_str(run(&nodes_string_replace, "string", S(s), "find", S("\xc3\xb6"), "replace", S("o"), NULL),
               "h\xc3\xa9llo world", "replace('ö', 'o')");

    struct value *v = run(&nodes_string_contains, "string", S("Hello"), "substring", S("ELL"), "case_sensitive", B(0), NULL);
    ok(v && v->i == 1, "'ell' in 'hello' (case-insensitive)");
    value_unref(v);
    v = run(&nodes_string_contains, "string", S("Hello"), "substring", S("ELL"), "case_sensitive", B(1), NULL);
    ok(v && v->i == 0, "'ELL' not in 'Hello'");
    value_unref(v);
    static const struct {
        const char *a, *b, *mode;
        int cs, want;
    } cmp[] = {{"Hello", "he", "Starts With", 0, 1}, {"Hello", "he", "Starts With", 1, 0},
               {"Hello", "LO", "Ends With", 0, 1},   {"lo", "Hello", "Ends With", 0, 0},
               {"abc", "ABC", "Equal", 0, 1},        {"abc", "ABC", "Equal", 1, 0}};
    for (size_t i = 0; i < sizeof cmp / sizeof cmp[0]; i++) {
        v = run(&nodes_string_compare, "string_a", S(cmp[i].a), "string_b", S(cmp[i].b), "mode", S(cmp[i].mode),
                "case_sensitive", B(cmp[i].cs), NULL);
        ok(v && v->i == cmp[i].want, "Compare '%s' %s '%s' (case_sensitive %d) is %d", cmp[i].a, cmp[i].mode,
           cmp[i].b, cmp[i].cs, cmp[i].want);
        value_unref(v);
    }
    ok(alloc_live_count() == live, "no allocation left live (%ld)", alloc_live_count() - live);
    return harness_done();
}

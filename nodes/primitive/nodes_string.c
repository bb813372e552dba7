/*
 * comfy_extras/nodes_string.py (V3 nodes): StringConcatenate, StringSubstring,
 * StringLength, CaseConverter, StringTrim, StringReplace, StringContains,
 * StringCompare, with Python's str semantics: lengths, slices and replacing the
 * empty string count code points, strip() removes what str.isspace() calls
 * whitespace, and case changes are per code point.
 *
 * Case mapping is the C library's (glibc's C.UTF-8 tables, or ASCII when that
 * locale is missing): the simple one-to-one mappings. Python's full mappings
 * (upper("ß") == "SS", ligatures, a final sigma lowering to "ς") are not
 * reproduced. RegexMatch, RegexExtract and RegexReplace live in
 * nodes_string_regex.c.
 */
#include <locale.h>
#include <pthread.h>
#include <string.h>
#include <wctype.h>

#include "alloc.h"
#include "buf.h"
#include "node_builtin.h"
#include "node_registry.h"
#include "nodes_string.h"
#include "utf8.h"

#define MODULE "comfy_extras.nodes_string"
#define CATEGORY "utils/string"

/* ---- Python str helpers ---------------------------------------------------------------- */

static locale_t utf8_locale;
static pthread_once_t utf8_once = PTHREAD_ONCE_INIT;

static void utf8_locale_init(void)
{
    utf8_locale = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
}

/* Simple case mappings; ASCII only without a UTF-8 locale. */
static unsigned cp_lower(unsigned cp)
{
    if (utf8_locale)
        return (unsigned)towlower_l((wint_t)cp, utf8_locale);
    return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
}

static unsigned cp_upper(unsigned cp)
{
    if (utf8_locale)
        return (unsigned)towupper_l((wint_t)cp, utf8_locale);
    return cp >= 'a' && cp <= 'z' ? cp - 32 : cp;
}

/* Title case: the locale's "totitle" mapping where it has one (U+01C6 -> U+01C5). */
static unsigned cp_title(unsigned cp)
{
    if (utf8_locale) {
        wctrans_t t = wctrans_l("totitle", utf8_locale);
        if (t)
            return (unsigned)towctrans_l((wint_t)cp, t, utf8_locale);
    }
    return cp_upper(cp);
}

/* Unicode's Cased property, approximated as "has a case mapping or is upper/lower". */
static int cp_cased(unsigned cp)
{
    if (utf8_locale && (iswupper_l((wint_t)cp, utf8_locale) || iswlower_l((wint_t)cp, utf8_locale)))
        return 1;
    return cp_lower(cp) != cp || cp_upper(cp) != cp;
}

/* str.isspace(): bidirectional class WS, B or S, or category Zs. */
static int cp_space(unsigned cp)
{
    return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

/* A string as code points. */
struct ustr {
    unsigned *cp; /* owned */
    size_t n;
};

static void ustr_from(struct ustr *u, const char *s)
{
    pthread_once(&utf8_once, utf8_locale_init);
    u->n = utf8_decode(s ? s : "", &u->cp);
}

static void ustr_release(struct ustr *u)
{
    xfree(u->cp);
}

static void put_cps(struct buf *out, const unsigned *cp, size_t n)
{
    char tmp[4];
    for (size_t i = 0; i < n; i++)
        buf_add(out, tmp, utf8_put(cp[i], tmp));
}

/* Output 0 as a STRING from `b`, which is released. */
static int set_string(struct node_ctx *c, struct buf *b)
{
    node_set_output(c, 0, value_new_string(b->ptr ? b->ptr : ""));
    buf_release(b);
    return 0;
}

/* Python's str.lower() with simple mappings, UTF-8 in, into `out`. */
static void lower_into(const char *s, struct buf *out)
{
    struct ustr u;
    ustr_from(&u, s);
    for (size_t i = 0; i < u.n; i++)
        u.cp[i] = cp_lower(u.cp[i]);
    put_cps(out, u.cp, u.n);
    ustr_release(&u);
}

/* ---- the nodes ------------------------------------------------------------------------- */

#define STR_ML(n) {.name = n, .type = "STRING", .multiline = 1}
#define CASE_SENSITIVE {.name = "case_sensitive", .type = "BOOLEAN", .def_bool = 1, .has_def_bool = 1}

enum { CONCAT_STRING_A, CONCAT_STRING_B, CONCAT_DELIMITER, CONCAT_N };
static const struct node_input_def concatenate_in[] = {
    STR_ML("string_a"), STR_ML("string_b"), {.name = "delimiter", .type = "STRING", .def_str = ""},
    NODE_INPUTS_END};

static int concatenate_run(struct node_ctx *c)
{
    struct buf b;
    buf_init(&b);
    buf_adds(&b, node_in_str_at(c, CONCAT_STRING_A));
    buf_adds(&b, node_in_str_at(c, CONCAT_DELIMITER));
    buf_adds(&b, node_in_str_at(c, CONCAT_STRING_B));
    return set_string(c, &b);
}

/* Python's slice bound: negative counts from the end, then clamped to [0, n]. */
static size_t slice_bound(int64_t i, size_t n)
{
    if (i < 0) {
        i += (int64_t)n;
        return i < 0 ? 0 : (size_t)i;
    }
    return (uint64_t)i > n ? n : (size_t)i;
}

enum { SUBSTRING_STRING, SUBSTRING_START, SUBSTRING_END, SUBSTRING_N };
static const struct node_input_def substring_in[] = {
    STR_ML("string"), {.name = "start", .type = "INT"}, {.name = "end", .type = "INT"}, NODE_INPUTS_END};

static int substring_run(struct node_ctx *c)
{
    struct ustr u;
    ustr_from(&u, node_in_str_at(c, SUBSTRING_STRING));
    size_t s = slice_bound(node_in_int_at(c, SUBSTRING_START), u.n);
    size_t e = slice_bound(node_in_int_at(c, SUBSTRING_END), u.n);
    struct buf b;
    buf_init(&b);
    if (e > s)
        put_cps(&b, u.cp + s, e - s);
    ustr_release(&u);
    return set_string(c, &b);
}

enum { LENGTH_STRING, LENGTH_N };
static const struct node_input_def length_in[] = {STR_ML("string"), NODE_INPUTS_END};

static int length_run(struct node_ctx *c)
{
    struct ustr u;
    ustr_from(&u, node_in_str_at(c, LENGTH_STRING));
    node_set_output(c, 0, value_new_int((int64_t)u.n));
    ustr_release(&u);
    return 0;
}

static const char *const case_modes[] = {"UPPERCASE", "lowercase", "Capitalize", "Title Case", NULL};

enum { CASE_STRING, CASE_MODE, CASE_N };
static const struct node_input_def case_in[] = {
    STR_ML("string"), {.name = "mode", .type = NODE_COMBO, .options = case_modes}, NODE_INPUTS_END};

static int case_run(struct node_ctx *c)
{
    struct ustr u;
    ustr_from(&u, node_in_str_at(c, CASE_STRING));
    const char *mode = node_in_str_at(c, CASE_MODE);
    int cased = 0; /* str.title(): the previous code point was cased */
    for (size_t i = 0; i < u.n; i++) {
        unsigned cp = u.cp[i];
        if (!strcmp(mode, "UPPERCASE"))
            u.cp[i] = cp_upper(cp);
        else if (!strcmp(mode, "lowercase"))
            u.cp[i] = cp_lower(cp);
        else if (!strcmp(mode, "Capitalize")) /* str.capitalize(): title case, then lower */
            u.cp[i] = i == 0 ? cp_title(cp) : cp_lower(cp);
        else if (!strcmp(mode, "Title Case")) {
            u.cp[i] = cased ? cp_lower(cp) : cp_title(cp);
            cased = cp_cased(cp);
        }
    }
    struct buf b;
    buf_init(&b);
    put_cps(&b, u.cp, u.n);
    ustr_release(&u);
    return set_string(c, &b);
}

static const char *const trim_modes[] = {"Both", "Left", "Right", NULL};

enum { TRIM_STRING, TRIM_MODE, TRIM_N };
static const struct node_input_def trim_in[] = {
    STR_ML("string"), {.name = "mode", .type = NODE_COMBO, .options = trim_modes}, NODE_INPUTS_END};

static int trim_run(struct node_ctx *c)
{
    struct ustr u;
    ustr_from(&u, node_in_str_at(c, TRIM_STRING));
    const char *mode = node_in_str_at(c, TRIM_MODE);
    size_t s = 0, e = u.n;
    if (strcmp(mode, "Right") != 0)
        while (s < e && cp_space(u.cp[s]))
            s++;
    if (strcmp(mode, "Left") != 0)
        while (e > s && cp_space(u.cp[e - 1]))
            e--;
    struct buf b;
    buf_init(&b);
    put_cps(&b, u.cp + s, e - s);
    ustr_release(&u);
    return set_string(c, &b);
}

enum { REPLACE_STRING, REPLACE_FIND, REPLACE_REPLACE, REPLACE_N };
static const struct node_input_def replace_in[] = {
    STR_ML("string"), STR_ML("find"), STR_ML("replace"), NODE_INPUTS_END};

static int replace_run(struct node_ctx *c)
{
    const char *s = node_in_str_at(c, REPLACE_STRING), *find = node_in_str_at(c, REPLACE_FIND),
               *rep = node_in_str_at(c, REPLACE_REPLACE);
    struct buf b;
    buf_init(&b);
    if (!*find) {
        /* "abc".replace("", "-") == "-a-b-c-": between code points and at both ends. */
        struct ustr u;
        ustr_from(&u, s);
        buf_adds(&b, rep);
        for (size_t i = 0; i < u.n; i++) {
            put_cps(&b, u.cp + i, 1);
            buf_adds(&b, rep);
        }
        ustr_release(&u);
        return set_string(c, &b);
    }
    /* Valid UTF-8 matches on code point boundaries only, so bytes do. */
    size_t fl = strlen(find);
    for (const char *p; (p = strstr(s, find)) != NULL; s = p + fl) {
        buf_add(&b, s, (size_t)(p - s));
        buf_adds(&b, rep);
    }
    buf_adds(&b, s);
    return set_string(c, &b);
}

/* Inputs a and b, lowered unless input `sensitive` is set, into *pa / *pb (point into
 * la / lb). */
static void fold_pair(struct node_ctx *c, int a, int b, int sensitive, struct buf *la,
                      struct buf *lb, const char **pa, const char **pb)
{
    *pa = node_in_str_at(c, a);
    *pb = node_in_str_at(c, b);
    buf_init(la);
    buf_init(lb);
    if (node_in_bool_at(c, sensitive))
        return;
    lower_into(*pa, la);
    lower_into(*pb, lb);
    *pa = la->ptr ? la->ptr : "";
    *pb = lb->ptr ? lb->ptr : "";
}

enum { CONTAINS_STRING, CONTAINS_SUBSTRING, CONTAINS_CASE_SENSITIVE, CONTAINS_N };
static const struct node_input_def contains_in[] = {
    STR_ML("string"), STR_ML("substring"), CASE_SENSITIVE, NODE_INPUTS_END};

static int contains_run(struct node_ctx *c)
{
    struct buf la, lb;
    const char *a, *b;
    fold_pair(c, CONTAINS_STRING, CONTAINS_SUBSTRING, CONTAINS_CASE_SENSITIVE, &la, &lb, &a, &b);
    node_set_output(c, 0, value_new_bool(strstr(a, b) != NULL));
    buf_release(&la);
    buf_release(&lb);
    return 0;
}

static const char *const compare_modes[] = {"Starts With", "Ends With", "Equal", NULL};

enum { COMPARE_STRING_A, COMPARE_STRING_B, COMPARE_MODE, COMPARE_CASE_SENSITIVE, COMPARE_N };
static const struct node_input_def compare_in[] = {
    STR_ML("string_a"), STR_ML("string_b"), {.name = "mode", .type = NODE_COMBO, .options = compare_modes},
    CASE_SENSITIVE, NODE_INPUTS_END};

static int compare_run(struct node_ctx *c)
{
    struct buf la, lb;
    const char *a, *b, *mode = node_in_str_at(c, COMPARE_MODE);
    fold_pair(c, COMPARE_STRING_A, COMPARE_STRING_B, COMPARE_CASE_SENSITIVE, &la, &lb, &a, &b);
    size_t na = strlen(a), nb = strlen(b);
    int r;
    if (!strcmp(mode, "Equal"))
        r = !strcmp(a, b);
    else if (!strcmp(mode, "Starts With"))
        r = nb <= na && !memcmp(a, b, nb);
    else
        r = nb <= na && !memcmp(a + na - nb, b, nb);
    node_set_output(c, 0, value_new_bool(r));
    buf_release(&la);
    buf_release(&lb);
    return 0;
}

/* ---- declarations ---------------------------------------------------------------------- */


static const struct node_output_def string_out[] = {{.type = "STRING"}, NODE_OUTPUTS_END};
static const struct node_output_def length_out[] = {{.type = "INT", .name = "length"}, NODE_OUTPUTS_END};
static const struct node_output_def contains_out[] = {{.type = "BOOLEAN", .name = "contains"},
                                                      NODE_OUTPUTS_END};
static const struct node_output_def bool_out[] = {{.type = "BOOLEAN"}, NODE_OUTPUTS_END};

#define STRING_CLASS(var, id, title, in, n_in, out, fn)                                          \
    const struct node_class var = {.name = id, .display_name = title, .category = CATEGORY,     \
                                   .python_module = MODULE, .flags = NODE_CLASS_V3, .inputs = in, \
                                   .n_inputs = n_in, .outputs = out, .run = fn}

STRING_CLASS(nodes_string_concatenate, "StringConcatenate", "Concatenate", concatenate_in, CONCAT_N,
             string_out, concatenate_run);
STRING_CLASS(nodes_string_substring, "StringSubstring", "Substring", substring_in, SUBSTRING_N,
             string_out, substring_run);
STRING_CLASS(nodes_string_length, "StringLength", "Length", length_in, LENGTH_N, length_out,
             length_run);
STRING_CLASS(nodes_case_converter, "CaseConverter", "Case Converter", case_in, CASE_N, string_out,
             case_run);
STRING_CLASS(nodes_string_trim, "StringTrim", "Trim", trim_in, TRIM_N, string_out, trim_run);
STRING_CLASS(nodes_string_replace, "StringReplace", "Replace", replace_in, REPLACE_N, string_out,
             replace_run);
STRING_CLASS(nodes_string_contains, "StringContains", "Contains", contains_in, CONTAINS_N,
             contains_out, contains_run);
STRING_CLASS(nodes_string_compare, "StringCompare", "Compare", compare_in, COMPARE_N, bool_out,
             compare_run);

/* get_node_list order. */
static const struct node_class *const string_classes[] = {
    &nodes_string_concatenate, &nodes_string_substring, &nodes_string_length, &nodes_case_converter,
    &nodes_string_trim,        &nodes_string_replace,   &nodes_string_contains, &nodes_string_compare};

void nodes_string_register(struct node_registry *r)
{
    node_registry_add_all(r, string_classes, sizeof(string_classes) / sizeof(string_classes[0]));
}

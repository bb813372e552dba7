/*
 * comfy_extras/nodes_string.py's regex nodes (V3): RegexMatch, RegexExtract and
 * RegexReplace, with Python's re semantics through py_re.h (PCRE2; py_re.h lists
 * where the two dialects still differ).
 *
 * As in ComfyUI, a pattern that does not compile makes RegexMatch false and
 * RegexExtract "", while RegexReplace lets re.error reach the user as the node's
 * error.
 */
#include <string.h>

#include "alloc.h"
#include "buf.h"
#include "node_builtin.h"
#include "node_registry.h"
#include "nodes_string.h"
#include "py_re.h"

#define MODULE "comfy_extras.nodes_string"
#define CATEGORY "utils/string"

/* Input indices (declaration order). */
enum { RX_STRING, RX_PATTERN };
enum { MATCH_CI = 2, MATCH_ML, MATCH_DOTALL, MATCH_N };
enum { EXTRACT_MODE = 2, EXTRACT_CI, EXTRACT_ML, EXTRACT_DOTALL, EXTRACT_GROUP, EXTRACT_N };
enum { REPLACE_REPL = 2, REPLACE_CI, REPLACE_ML, REPLACE_DOTALL, REPLACE_COUNT, REPLACE_N };

static unsigned flags_at(const struct node_ctx *c, int ci)
{
    return (node_in_bool_at(c, ci) ? PY_RE_IGNORECASE : 0u) |
           (node_in_bool_at(c, ci + 1) ? PY_RE_MULTILINE : 0u) |
           (node_in_bool_at(c, ci + 2) ? PY_RE_DOTALL : 0u);
}

static int match_run(struct node_ctx *c)
{
    const char *s = node_in_str_at(c, RX_STRING);
    struct buf why;
    buf_init(&why);
    struct py_re *re = NULL;
    int found = 0;
    if (py_re_compile(node_in_str_at(c, RX_PATTERN), flags_at(c, MATCH_CI), &re, &why) == 0) {
        struct py_re_iter it = {.pos = 0, .prev_empty_at = -1};
        struct py_re_match m;
        found = py_re_next(re, s, strlen(s), &it, &m, &why) > 0;
    }
    py_re_free(re);
    buf_release(&why);
    node_set_output(c, 0, value_new_bool(found));
    return 0;
}

static const char *const extract_modes[] = {"First Match", "All Matches", "First Group",
                                            "All Groups", NULL};

static void add_group(struct buf *out, const char *s, const struct py_re_match *m, int g)
{
    if (m->start[g] >= 0)
        buf_add(out, s + m->start[g], (size_t)(m->end[g] - m->start[g]));
}

/*
 * The extraction of one mode into `out`. Returns 0, or <0 after node_fail for the
 * one case where ComfyUI's code raises (a non-participating group joined as None).
 */
static int extract(struct node_ctx *c, const struct py_re *re, const char *s, const char *mode,
                   int64_t gi, struct buf *out)
{
    size_t len = strlen(s);
    struct py_re_iter it = {.pos = 0, .prev_empty_at = -1};
    struct py_re_match m;
    struct buf why;
    buf_init(&why);
    int rc, n = 0;
    int first = !strcmp(mode, "First Match") || !strcmp(mode, "First Group");
    while ((rc = py_re_next(re, s, len, &it, &m, &why)) > 0) {
        if (!strcmp(mode, "First Match")) {
            add_group(out, s, &m, 0);
        } else if (!strcmp(mode, "First Group")) {
            /* match.group(i) when len(match.groups()) >= i; group 0 is the match. */
            if (m.n_groups >= gi)
                add_group(out, s, &m, (int)gi);
        } else if (!strcmp(mode, "All Matches")) {
            /* re.findall: the match without groups, else group 1 (m[0] of a tuple). */
            if (n)
                buf_addc(out, '\n');
            add_group(out, s, &m, m.n_groups ? 1 : 0);
            n++;
        } else if (m.n_groups && m.n_groups >= gi) { /* All Groups */
            if (m.start[gi] < 0) {
                buf_release(&why);
                return node_fail(c, "TypeError",
                                 "sequence item %d: expected str instance, NoneType found", n);
            }
            if (n)
                buf_addc(out, '\n');
            add_group(out, s, &m, (int)gi);
            n++;
        }
        if (first)
            break;
    }
    buf_release(&why);
    /* A match error (PCRE2's limits) is re.error's "" here, as a bad pattern is. */
    if (rc < 0)
        buf_reset(out);
    return 0;
}

static int extract_run(struct node_ctx *c)
{
    const char *s = node_in_str_at(c, RX_STRING), *mode = node_in_str_at(c, EXTRACT_MODE);
    int64_t gi = node_in_int_at(c, EXTRACT_GROUP);
    struct buf why, out;
    buf_init(&why);
    buf_init(&out);
    struct py_re *re = NULL;
    int rc = 0;
    if (py_re_compile(node_in_str_at(c, RX_PATTERN), flags_at(c, EXTRACT_CI), &re, &why) == 0 &&
        gi >= 0 && gi <= PY_RE_MAX_GROUPS)
        rc = extract(c, re, s, mode, gi, &out);
    py_re_free(re);
    buf_release(&why);
    if (rc == 0)
        node_set_output(c, 0, value_new_string(out.ptr ? out.ptr : ""));
    buf_release(&out);
    return rc;
}

static int replace_run(struct node_ctx *c)
{
    struct buf why, out;
    buf_init(&why);
    buf_init(&out);
    struct py_re *re = NULL;
    int rc = py_re_compile(node_in_str_at(c, RX_PATTERN), flags_at(c, REPLACE_CI), &re, &why);
    if (rc == 0)
        rc = py_re_sub(re, node_in_str_at(c, REPLACE_REPL), node_in_str_at(c, RX_STRING),
                       (long)node_in_int_at(c, REPLACE_COUNT), &out, &why);
    py_re_free(re);
    if (rc < 0)
        rc = node_fail(c, rc == ERR_NOT_FOUND ? "IndexError" : "re.error", "%s",
                       why.ptr ? why.ptr : "bad regular expression");
    else
        node_set_output(c, 0, value_new_string(out.ptr ? out.ptr : ""));
    buf_release(&why);
    buf_release(&out);
    return rc;
}

/* ---- declarations ---------------------------------------------------------------------- */

#define STR_ML(n) {.name = n, .type = "STRING", .multiline = 1}
#define BOOL_IN(n, d, g, tip)                                                                  \
    {.name = n, .type = "BOOLEAN", .def_bool = d, .has_def_bool = 1, .group = g, .tooltip = tip}

static const struct node_input_def match_in[] = {
    STR_ML("string"),
    STR_ML("regex_pattern"),
    BOOL_IN("case_insensitive", 1, NODE_INPUT_REQUIRED, NULL),
    BOOL_IN("multiline", 0, NODE_INPUT_REQUIRED, NULL),
    BOOL_IN("dotall", 0, NODE_INPUT_REQUIRED, NULL),
    NODE_INPUTS_END};
static const struct node_input_def extract_in[] = {
    STR_ML("string"),
    STR_ML("regex_pattern"),
    {.name = "mode", .type = NODE_COMBO, .options = extract_modes},
    BOOL_IN("case_insensitive", 1, NODE_INPUT_REQUIRED, NULL),
    BOOL_IN("multiline", 0, NODE_INPUT_REQUIRED, NULL),
    BOOL_IN("dotall", 0, NODE_INPUT_REQUIRED, NULL),
    {.name = "group_index", .type = "INT", .def = NODE_I(1), .min = NODE_I(0), .max = NODE_I(100)},
    NODE_INPUTS_END};
static const struct node_input_def replace_in[] = {
    STR_ML("string"),
    STR_ML("regex_pattern"),
    STR_ML("replace"),
    BOOL_IN("case_insensitive", 1, NODE_INPUT_OPTIONAL, NULL),
    BOOL_IN("multiline", 0, NODE_INPUT_OPTIONAL, NULL),
    BOOL_IN("dotall", 0, NODE_INPUT_OPTIONAL,
            "When enabled, the dot (.) character will match any character including newline "
            "characters. When disabled, dots won't match newlines."),
    {.name = "count", .type = "INT", .group = NODE_INPUT_OPTIONAL, .def = NODE_I(0),
     .min = NODE_I(0), .max = NODE_I(100),
     .tooltip = "Maximum number of replacements to make. Set to 0 to replace all occurrences "
                "(default). Set to 1 to replace only the first match, 2 for the first two "
                "matches, etc."},
    NODE_INPUTS_END};

static const struct node_output_def matches_out[] = {{.type = "BOOLEAN", .name = "matches"},
                                                     NODE_OUTPUTS_END};
static const struct node_output_def string_out[] = {{.type = "STRING"}, NODE_OUTPUTS_END};

const struct node_class nodes_regex_match = {
    .name = "RegexMatch", .display_name = "Regex Match", .category = CATEGORY,
    .python_module = MODULE, .flags = NODE_CLASS_V3, .inputs = match_in, .n_inputs = MATCH_N,
    .outputs = matches_out, .run = match_run};
const struct node_class nodes_regex_extract = {
    .name = "RegexExtract", .display_name = "Regex Extract", .category = CATEGORY,
    .python_module = MODULE, .flags = NODE_CLASS_V3, .inputs = extract_in, .n_inputs = EXTRACT_N,
    .outputs = string_out, .run = extract_run};
const struct node_class nodes_regex_replace = {
    .name = "RegexReplace", .display_name = "Regex Replace", .category = CATEGORY,
    .description = "Find and replace text using regex patterns.", .python_module = MODULE,
    .flags = NODE_CLASS_V3, .inputs = replace_in, .n_inputs = REPLACE_N, .outputs = string_out,
    .run = replace_run};

static const struct node_class *const regex_classes[] = {&nodes_regex_match, &nodes_regex_extract,
                                                         &nodes_regex_replace};

void nodes_string_regex_register(struct node_registry *r)
{
    node_registry_add_all(r, regex_classes, sizeof(regex_classes) / sizeof(regex_classes[0]));
}

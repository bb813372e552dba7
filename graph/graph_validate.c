/*
 * Validation exactly as ComfyUI's validate_prompt / validate_inputs
 * (comfy-api.md §5): error types and strings, node_errors with
 * dependent_outputs, partial success, Python-semantics coercion written back
 * into the prompt.
 *
 * ComfyUI recurses from each output node through links with memoisation. We do
 * the same walk with an explicit stack (a 100k-deep chain must not overflow the C
 * stack) and a per-node state: unvisited, in progress, done. Meeting an
 * "in progress" node again is a dependency cycle, which ComfyUI does not detect
 * (its recursion overflows); we report it as an exception_during_validation
 * error on the node whose link closes the cycle.
 *
 * Exceptions (a link to a missing node, a bad slot index) follow ComfyUI's
 * attribution quirk: the exception aborts the node being validated; if that node
 * is an output it gets exception_during_validation, otherwise it gets
 * exception_during_inner_validation describing the *downstream* node's link to it.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "graph_coerce.h"
#include "graph_internal.h"
#include "pynum.h"

enum { ST_NEW = 0, ST_BUSY = 1, ST_DONE = 2 };

#define DEPENDENTS_WORK_MAX 20000000L /* nodes visited to fill dependent_outputs */

struct vframe {
    int node;
    int k;      /* next declared input to look at */
    int ok;     /* no upstream failure so far */
    int parent; /* node that linked here, -1 for an output */
    int parent_k;
};

struct optcache {
    const struct node_input_def *in;
    struct node_strlist list;
};

struct vstate {
    struct graph_ctx *g;
    struct gprompt *p;
    uint8_t *state, *valid;
    cJSON **errs; /* own errors per node, or NULL */
    struct vframe *st;
    int sp, cap;
    struct optcache *oc;
    int n_oc;
};

static cJSON *mkerr(const char *type, const char *message, const char *details, cJSON *extra)
{
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "type", type);
    cJSON_AddStringToObject(e, "message", message);
    cJSON_AddStringToObject(e, "details", details);
    cJSON_AddItemToObject(e, "extra_info", extra ? extra : cJSON_CreateObject());
    return e;
}

static void add_err(struct vstate *vs, int node, cJSON *e)
{
    if (!vs->errs[node])
        vs->errs[node] = cJSON_CreateArray();
    cJSON_AddItemToArray(vs->errs[node], e);
}

static const struct node_strlist *options_of(struct vstate *vs, const struct node_input_def *in)
{
    for (int i = 0; i < vs->n_oc; i++)
        if (vs->oc[i].in == in)
            return &vs->oc[i].list;
    vs->oc = xrealloc(vs->oc, (size_t)(vs->n_oc + 1) * sizeof(*vs->oc));
    struct optcache *c = &vs->oc[vs->n_oc++];
    c->in = in;
    node_strlist_init(&c->list);
    node_input_options(&vs->g->env, in, &c->list);
    return &c->list;
}

static cJSON *input_config(struct vstate *vs, const struct node_input_def *in)
{
    return gobj_input_spec(&vs->g->env, in, 1);
}

static cJSON *extra_named(const char *name)
{
    cJSON *x = cJSON_CreateObject();
    cJSON_AddStringToObject(x, "input_name", name);
    return x;
}

static cJSON *extra_cfg(struct vstate *vs, const struct node_input_def *in)
{
    cJSON *x = extra_named(in->name);
    cJSON_AddItemToObject(x, "input_config", input_config(vs, in));
    return x;
}

/* ---- frames ------------------------------------------------------------------------ */

static void push(struct vstate *vs, int node, int parent, int parent_k)
{
    if (vs->sp == vs->cap) {
        vs->cap = vs->cap ? 2 * vs->cap : 64;
        vs->st = xrealloc(vs->st, (size_t)vs->cap * sizeof(*vs->st));
    }
    vs->st[vs->sp++] = (struct vframe){node, 0, 1, parent, parent_k};
    vs->state[node] = ST_BUSY;
}

static void finish_top(struct vstate *vs, int valid)
{
    struct vframe *f = &vs->st[--vs->sp];
    vs->state[f->node] = ST_DONE;
    vs->valid[f->node] = (uint8_t)valid;
    if (vs->sp > 0 && !valid)
        vs->st[vs->sp - 1].ok = 0;
}

/* An exception inside the top node's validation (see the file comment). */
static void raise_top(struct vstate *vs, const char *exc_type, const char *msg)
{
    struct vframe *f = &vs->st[vs->sp - 1];
    int n = f->node;
    cJSON_Delete(vs->errs[n]);
    vs->errs[n] = NULL;
    cJSON *extra = cJSON_CreateObject();
    if (f->parent < 0) {
        cJSON_AddStringToObject(extra, "exception_type", exc_type);
        cJSON_AddItemToObject(extra, "traceback", cJSON_CreateArray());
        add_err(vs, n, mkerr("exception_during_validation", "Exception when validating node", msg, extra));
    } else {
        const struct gnode *pn = &vs->p->nodes[f->parent];
        const struct node_input_def *in = &pn->cls->inputs[f->parent_k];
        cJSON_AddStringToObject(extra, "input_name", in->name);
        cJSON_AddItemToObject(extra, "input_config", input_config(vs, in));
        cJSON_AddStringToObject(extra, "exception_message", msg);
        cJSON_AddStringToObject(extra, "exception_type", exc_type);
        cJSON_AddItemToObject(extra, "traceback", cJSON_CreateArray());
        cJSON_AddItemToObject(extra, "linked_node", cJSON_Duplicate(pn->in[f->parent_k].json, 1));
        add_err(vs, n, mkerr("exception_during_inner_validation", "Exception when validating inner node",
                             msg, extra));
    }
    finish_top(vs, 0);
}

/* ---- links ------------------------------------------------------------------------- */

/* Python's "tuple indices must be integers" check plus the index itself. */
static int link_slot(const cJSON *sl, int n_out, int *slot, struct buf *exc, const char **exc_type)
{
    int64_t i;
    int big;
    double d;
    if (cJSON_IsBool(sl)) {
        i = cJSON_IsTrue(sl);
    } else if (gjson_is_number(sl) && !strcmp(gco_pytype(sl), "int")) {
        if (!gjson_get_int(sl, &i, &big, &d) || big)
            i = INT64_MAX;
    } else {
        *exc_type = "TypeError";
        buf_printf(exc, "tuple indices must be integers or slices, not %s", gco_pytype(sl));
        return -1;
    }
    if (i < 0)
        i += n_out; /* Python's negative indices */
    if (i < 0 || i >= n_out) {
        *exc_type = "IndexError";
        buf_adds(exc, "tuple index out of range");
        return -1;
    }
    *slot = (int)i;
    return 0;
}

static int types_match(const char *received, const char *wanted)
{
    if (!strcmp(received, wanted))
        return 1;
    /* Comma-separated type sets intersect, or either side has "*". */
    char a[256], b[256];
    snprintf(a, sizeof(a), "%s", received);
    snprintf(b, sizeof(b), "%s", wanted);
    char *sa, *sb;
    for (char *x = strtok_r(a, ",", &sa); x; x = strtok_r(NULL, ",", &sa)) {
        while (*x == ' ')
            x++;
        size_t lx = strlen(x);
        while (lx && x[lx - 1] == ' ')
            x[--lx] = '\0';
        if (!strcmp(x, "*"))
            return 1;
        snprintf(b, sizeof(b), "%s", wanted);
        for (char *y = strtok_r(b, ",", &sb); y; y = strtok_r(NULL, ",", &sb)) {
            while (*y == ' ')
                y++;
            size_t ly = strlen(y);
            while (ly && y[ly - 1] == ' ')
                y[--ly] = '\0';
            if (!strcmp(y, "*") || !strcmp(x, y))
                return 1;
        }
    }
    return 0;
}

/* Returns 1 when a frame was pushed (the caller must re-enter the loop). */
static int check_link(struct vstate *vs, struct vframe *f, int k, cJSON *v)
{
    const struct gnode *gn = &vs->p->nodes[f->node];
    const struct node_input_def *in = &gn->cls->inputs[k];
    int n = f->node;
    if (cJSON_GetArraySize(v) != 2) {
        cJSON *x = extra_cfg(vs, in);
        cJSON_AddItemToObject(x, "received_value", cJSON_Duplicate(v, 1));
        add_err(vs, n, mkerr("bad_linked_input",
                             "Bad linked input, must be a length-2 list of [node_id, slot_index]",
                             in->name, x));
        return 0;
    }
    cJSON *id = v->child, *sl = id->next;
    struct buf exc;
    buf_init(&exc);
    const char *exc_type = "KeyError";
    int src = -1, slot = 0;
    if (cJSON_IsString(id)) {
        src = gprompt_find(vs->p, id->valuestring);
        if (src < 0)
            gjson_py(id, 0, &exc);
    } else if (cJSON_IsArray(id) || cJSON_IsObject(id)) {
        exc_type = "TypeError";
        buf_printf(&exc, "unhashable type: '%s'", gco_pytype(id));
    } else {
        gjson_py(id, 0, &exc); /* prompt[4]: KeyError(4) prints as 4 */
    }
    if (src >= 0 && link_slot(sl, vs->p->nodes[src].n_out, &slot, &exc, &exc_type) < 0)
        src = -1;
    if (src < 0) {
        raise_top(vs, exc_type, exc.ptr);
        buf_release(&exc);
        return 1; /* the frame is gone */
    }
    buf_release(&exc);

    const struct gnode *sn = &vs->p->nodes[src];
    const char *received = sn->cls->outputs[slot].type;
    int is_combo = !strcmp(in->type, NODE_COMBO);
    if (is_combo ? strcmp(received, NODE_COMBO) != 0 : !types_match(received, in->type)) {
        struct buf d;
        buf_init(&d);
        buf_printf(&d, "%s, received_type(%s) mismatch input_type(", in->name, received);
        if (is_combo) {
            const struct node_strlist *l = options_of(vs, in);
            buf_addc(&d, '[');
            for (size_t i = 0; i < l->n; i++) {
                gjson_py_repr_str(l->items[i], &d);
                if (i + 1 < l->n)
                    buf_adds(&d, ", ");
            }
            buf_addc(&d, ']');
        } else {
            buf_adds(&d, in->type);
        }
        buf_addc(&d, ')');
        cJSON *x = extra_cfg(vs, in);
        cJSON_AddStringToObject(x, "received_type", received);
        cJSON_AddItemToObject(x, "linked_node", cJSON_Duplicate(v, 1));
        add_err(vs, n, mkerr("return_type_mismatch", "Return type mismatch between linked nodes", d.ptr, x));
        buf_release(&d);
        return 0;
    }
    if (vs->state[src] == ST_DONE) {
        if (!vs->valid[src])
            f->ok = 0;
        return 0;
    }
    if (vs->state[src] == ST_BUSY) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddStringToObject(x, "exception_type", "RuntimeError");
        cJSON_AddItemToObject(x, "traceback", cJSON_CreateArray());
        add_err(vs, n, mkerr("exception_during_validation", "Exception when validating node",
                             "Dependency cycle detected", x));
        return 0;
    }
    push(vs, src, n, k);
    return 1;
}

/* ---- constants ---------------------------------------------------------------------- */

static void fmt_int(struct buf *b, int64_t i, int big)
{
    if (big)
        buf_printf(b, "%llu", (unsigned long long)(uint64_t)i);
    else
        buf_printf(b, "%lld", (long long)i);
}

/* Compare an exact integer (or a beyond-64-bit one, overflow = +-1) with a bound. */
static int cmp_int(int64_t i, int big, int overflow, const struct node_num *b)
{
    if (overflow)
        return overflow;
    if (big != b->big)
        return big ? 1 : -1; /* big values exceed every signed bound */
    if (big)
        return (uint64_t)i < (uint64_t)b->i ? -1 : (uint64_t)i > (uint64_t)b->i;
    return i < b->i ? -1 : i > b->i;
}

static void replace_value(cJSON *inputs, cJSON **slot, cJSON *nv)
{
    /* ReplaceItemViaPointer keeps the position but not the key: copy it. */
    const char *key = (*slot)->string;
    if (key) {
        size_t n = strlen(key) + 1;
        if (nv->string && !(nv->type & cJSON_StringIsConst))
            cJSON_free(nv->string);
        nv->string = cJSON_malloc(n);
        memcpy(nv->string, key, n);
        nv->type &= ~cJSON_StringIsConst;
    }
    cJSON_ReplaceItemViaPointer(inputs, *slot, nv);
    *slot = nv;
}

static void range_error(struct vstate *vs, int n, const struct node_input_def *in, int smaller,
                        const char *val_txt, const char *bound_txt, cJSON *received)
{
    struct buf m;
    buf_init(&m);
    buf_printf(&m, "Value %s %s of %s", val_txt, smaller ? "smaller than min" : "bigger than max", bound_txt);
    cJSON *x = extra_cfg(vs, in);
    cJSON_AddItemToObject(x, "received_value", received);
    add_err(vs, n, mkerr(smaller ? "value_smaller_than_min" : "value_bigger_than_max", m.ptr, in->name, x));
    buf_release(&m);
}

static void check_const(struct vstate *vs, int n, int k)
{
    struct gnode *gn = &vs->p->nodes[n];
    const struct node_input_def *in = &gn->cls->inputs[k];
    cJSON *inputs = gn->inputs;
    cJSON *v = gn->in[k].json;
    struct gconst typed = {0};

    if (cJSON_IsObject(v)) {
        cJSON *w = cJSON_GetObjectItemCaseSensitive(v, "__value__");
        if (w) {
            cJSON *nv = cJSON_DetachItemViaPointer(v, w);
            replace_value(inputs, &gn->in[k].json, nv);
            v = nv;
        }
    }
    struct buf exc, a, b;
    buf_init(&exc);
    buf_init(&a);
    buf_init(&b);
    const char *t = in->type;
    int custom = in->validate != NULL;
    /* Range messages are formatted only when they are needed: printf for every
     * valid number was a third of a chain's validation. */
    if (!strcmp(t, "INT")) {
        int64_t i;
        int big, overflow;
        if (gco_to_int(v, &i, &big, &overflow, &exc) < 0)
            goto bad_type;
        if (!overflow && !(cJSON_IsNumber(v) && fabs(v->valuedouble) <= 9007199254740992.0 &&
                           v->valuedouble == (double)i))
            replace_value(inputs, &gn->in[k].json, gjson_int(i, big));
        int below = !custom && in->min.set && cmp_int(i, big, overflow, &in->min) < 0;
        int above = !below && !custom && in->max.set && cmp_int(i, big, overflow, &in->max) > 0;
        if (below || above) {
            if (overflow)
                gco_to_str(v, &a); /* not replaced: v is still the prompt's item */
            else
                fmt_int(&a, i, big);
            const struct node_num *bound = below ? &in->min : &in->max;
            fmt_int(&b, bound->i, bound->big);
            range_error(vs, n, in, below, a.ptr, b.ptr, cJSON_Duplicate(gn->in[k].json, 1));
        } else if (overflow) {
            buf_adds(&exc, "Python int too large to convert to C long");
            goto bad_type;
        } else {
            /* What graph__const_type would read back from the coerced item. */
            typed = (struct gconst){.i = i, .kind = GCONST_INT, .big = (uint8_t)big};
        }
        goto done;
    }
    if (!strcmp(t, "FLOAT")) {
        double d;
        if (gco_to_float(v, &d, &exc) < 0)
            goto bad_type;
        /* Non-finite values stay as sent: JSON has no literal for them. */
        if (isfinite(d))
            replace_value(inputs, &gn->in[k].json, gjson_pyfloat(d));
        int below = !custom && in->min.set && d < in->min.f;
        int above = !below && !custom && in->max.set && d > in->max.f;
        if (below || above) {
            pynum_format_float(d, &a);
            pynum_format_float(below ? in->min.f : in->max.f, &b);
            range_error(vs, n, in, below, a.ptr, b.ptr, cJSON_Duplicate(gn->in[k].json, 1));
            goto done;
        }
        goto typed_done;
    }
    if (!strcmp(t, "STRING")) {
        if (!cJSON_IsString(v)) {
            gco_to_str(v, &a);
            replace_value(inputs, &gn->in[k].json, cJSON_CreateString(a.ptr));
        }
        goto typed_done;
    }
    if (!strcmp(t, "BOOLEAN")) {
        if (!cJSON_IsBool(v))
            replace_value(inputs, &gn->in[k].json, cJSON_CreateBool(gco_truthy(v)));
        goto typed_done;
    }
    if (!strcmp(t, NODE_COMBO) && !custom) {
        const struct node_strlist *l = options_of(vs, in);
        int found = 0;
        if (cJSON_IsString(v))
            for (size_t i = 0; i < l->n && !found; i++)
                found = strcmp(l->items[i], v->valuestring) == 0;
        if (!found) {
            buf_printf(&a, "%s: '", in->name);
            gco_to_str(v, &a);
            buf_adds(&a, "' not in ");
            cJSON *x = extra_named(in->name);
            if (l->n > 20) {
                buf_printf(&a, "(list of length %zu)", l->n);
                cJSON_AddNullToObject(x, "input_config");
            } else {
                buf_addc(&a, '[');
                for (size_t i = 0; i < l->n; i++) {
                    gjson_py_repr_str(l->items[i], &a);
                    if (i + 1 < l->n)
                        buf_adds(&a, ", ");
                }
                buf_addc(&a, ']');
                cJSON_AddItemToObject(x, "input_config", input_config(vs, in));
            }
            cJSON_AddItemToObject(x, "received_value", cJSON_Duplicate(v, 1));
            add_err(vs, n, mkerr("value_not_in_list", "Value not in list", a.ptr, x));
            goto done;
        }
    }
    /* Socket types given a constant pass validation, as in ComfyUI; the executor
     * reports them when the node runs (graph__const_value gives them no value). */
    goto typed_done;

bad_type:
    buf_reset(&a);
    buf_printf(&a, "Failed to convert an input value to a %s value", t);
    buf_printf(&b, "%s, ", in->name);
    gco_to_str(v, &b);
    buf_printf(&b, ", %s", exc.ptr);
    {
        cJSON *x = extra_cfg(vs, in);
        cJSON_AddItemToObject(x, "received_value", cJSON_Duplicate(v, 1));
        cJSON_AddStringToObject(x, "exception_message", exc.ptr);
        add_err(vs, n, mkerr("invalid_input_type", a.ptr, b.ptr, x));
    }
    goto done;
typed_done:
    graph__const_type(in, gn->in[k].json, &typed); /* from the item as coerced */
done:
    /* The native prompt's constant (a node is checked once; errors leave it untyped). */
    gn->in[k].konst = typed;
    buf_release(&exc);
    buf_release(&a);
    buf_release(&b);
}

static void check_custom(struct vstate *vs, int n)
{
    const struct gnode *gn = &vs->p->nodes[n];
    for (int k = 0; k < gn->n_in; k++) {
        const struct node_input_def *in = &gn->cls->inputs[k];
        cJSON *v = gn->in[k].json;
        if (!in->validate || !v || cJSON_IsArray(v))
            continue;
        struct buf s, reason, d;
        buf_init(&s);
        buf_init(&reason);
        buf_init(&d);
        gco_to_str(v, &s);
        if (in->validate(&vs->g->env, s.ptr, &reason) < 0) {
            buf_printf(&d, "%s", in->name);
            if (reason.len)
                buf_printf(&d, " - %s", reason.ptr);
            add_err(vs, n, mkerr("custom_validation_failed", "Custom validation failed for node", d.ptr,
                                 extra_named(in->name)));
        }
        buf_release(&s);
        buf_release(&reason);
        buf_release(&d);
    }
}

/*
 * ComfyUI reads prompt[id]['inputs'] first: a missing member is a KeyError, and a
 * number or null is a TypeError on the first `x not in inputs`. (A string or a
 * list is searchable in Python, so every input is then simply missing.)
 * Returns 1 when the top frame raised and is gone.
 */
static int bad_inputs_member(struct vstate *vs)
{
    const struct gnode *gn = &vs->p->nodes[vs->st[vs->sp - 1].node];
    cJSON *inputs = gn->inputs;
    if (!inputs) {
        raise_top(vs, "KeyError", "'inputs'");
        return 1;
    }
    if (cJSON_IsObject(inputs) || cJSON_IsString(inputs) || cJSON_IsArray(inputs))
        return 0;
    int declared = 0;
    for (int k = 0; k < gn->n_in; k++)
        declared |= gn->cls->inputs[k].group != NODE_INPUT_HIDDEN;
    if (!declared)
        return 0;
    struct buf m;
    buf_init(&m);
    buf_printf(&m, "argument of type '%s' is not iterable", gco_pytype(inputs));
    raise_top(vs, "TypeError", m.ptr);
    buf_release(&m);
    return 1;
}

/* Validate output `o` and everything it reaches. */
static void validate_output(struct vstate *vs, int o)
{
    if (vs->state[o] == ST_DONE)
        return;
    push(vs, o, -1, -1);
    while (vs->sp > 0) {
        struct vframe *f = &vs->st[vs->sp - 1];
        const struct gnode *gn = &vs->p->nodes[f->node];
        int pushed = 0;
        if (f->k == 0 && bad_inputs_member(vs))
            continue;
        /* `pushed` first: push() may move the stack, leaving `f` dangling. */
        while (!pushed && f->k < gn->n_in) {
            int k = f->k++;
            const struct node_input_def *in = &gn->cls->inputs[k];
            if (in->group == NODE_INPUT_HIDDEN)
                continue;
            cJSON *v = gn->in[k].json;
            if (!v) {
                if (in->group == NODE_INPUT_REQUIRED)
                    add_err(vs, f->node, mkerr("required_input_missing", "Required input is missing",
                                               in->name, extra_named(in->name)));
                continue;
            }
            if (cJSON_IsArray(v))
                pushed = check_link(vs, f, k, v);
            else
                check_const(vs, f->node, k);
        }
        if (pushed)
            continue;
        check_custom(vs, f->node);
        finish_top(vs, f->ok && !vs->errs[f->node]);
    }
}

/* ---- the whole prompt ---------------------------------------------------------------- */

static cJSON *top_error(const char *type, const char *message, const char *details)
{
    return mkerr(type, message, details, NULL);
}

int graph_validate_targets(struct graph_ctx *g, cJSON *prompt, const cJSON *targets,
                           struct graph_validation *out)
{
    memset(out, 0, sizeof(*out));
    out->node_errors = cJSON_CreateObject();
    out->outputs = cJSON_CreateArray();
    struct gprompt p;
    struct buf d;
    buf_init(&d);
    if (gprompt_parse(&p, g->reg, prompt) < 0) {
        out->error = top_error("invalid_prompt", "Cannot execute because the prompt is not an object.", "");
        buf_release(&d);
        return 0;
    }
    /* Step 1: every node needs a known class_type. */
    for (int i = 0; i < p.n; i++) {
        const struct gnode *gn = &p.nodes[i];
        if (gn->cls)
            continue;
        cJSON *ct = cJSON_IsObject(gn->json) ? cJSON_GetObjectItemCaseSensitive(gn->json, "class_type") : NULL;
        buf_reset(&d);
        buf_printf(&d, "Node ID '#%s'", gn->id);
        if (!ct) {
            out->error = top_error("invalid_prompt",
                                   "Cannot execute because a node is missing the class_type property.", d.ptr);
        } else {
            struct buf m;
            buf_init(&m);
            buf_adds(&m, "Cannot execute because node ");
            gco_to_str(ct, &m);
            buf_adds(&m, " does not exist.");
            out->error = top_error("invalid_prompt", m.ptr, d.ptr);
            buf_release(&m);
        }
        buf_release(&d);
        gprompt_release(&p);
        return 0;
    }
    /* Step 2: output nodes, restricted to the targets when given. */
    int *outs = xmalloc((size_t)(p.n ? p.n : 1) * sizeof(int));
    int n_out = 0;
    for (int i = 0; i < p.n; i++) {
        if (!node_class_is_output(p.nodes[i].cls))
            continue;
        if (targets) {
            int hit = 0;
            for (const cJSON *t = targets->child; t && !hit; t = t->next)
                hit = cJSON_IsString(t) && !strcmp(t->valuestring, p.nodes[i].id);
            if (!hit)
                continue;
        }
        outs[n_out++] = i;
    }
    if (n_out == 0) {
        out->error = top_error("prompt_no_outputs", "Prompt has no outputs", "");
        xfree(outs);
        buf_release(&d);
        gprompt_release(&p);
        return 0;
    }
    /* Step 3: validate from each output. */
    struct vstate vs = {.g = g, .p = &p};
    vs.state = xcalloc((size_t)p.n, 1);
    vs.valid = xcalloc((size_t)p.n, 1);
    vs.errs = xcalloc((size_t)p.n, sizeof(*vs.errs));
    for (int i = 0; i < n_out; i++)
        validate_output(&vs, outs[i]);

    /* Step 4: good outputs; node_errors for the failing ones' ancestors. */
    cJSON **entry = xcalloc((size_t)p.n, sizeof(*entry));
    int *stamp = xcalloc((size_t)p.n, sizeof(int));
    size_t n_edges = 1;
    for (int i = 0; i < p.n; i++)
        n_edges += (size_t)p.nodes[i].n_in;
    int *stack = xmalloc(n_edges * sizeof(int));
    int n_good = 0;
    long work = 0;
    buf_reset(&d);
    for (int i = 0; i < n_out; i++) {
        int o = outs[i];
        if (vs.valid[o]) {
            cJSON_AddItemToArray(out->outputs, cJSON_CreateString(p.nodes[o].id));
            n_good++;
            continue;
        }
        for (cJSON *e = vs.errs[o] ? vs.errs[o]->child : NULL; e; e = e->next) {
            if (d.len)
                buf_addc(&d, '\n');
            buf_printf(&d, "%s: %s", cJSON_GetObjectItem(e, "message")->valuestring,
                       cJSON_GetObjectItem(e, "details")->valuestring);
        }
        int sp = 0;
        stack[sp++] = o;
        while (sp > 0) {
            int x = stack[--sp];
            if (stamp[x] == i + 1)
                continue;
            stamp[x] = i + 1;
            if (vs.errs[x] || entry[x]) {
                if (!entry[x]) {
                    entry[x] = cJSON_CreateObject();
                    cJSON_AddItemToObject(entry[x], "errors", vs.errs[x]);
                    vs.errs[x] = NULL;
                    cJSON_AddArrayToObject(entry[x], "dependent_outputs");
                    cJSON_AddStringToObject(entry[x], "class_type", p.nodes[x].cls->name);
                    cJSON_AddItemToObject(out->node_errors, p.nodes[x].id, entry[x]);
                }
                cJSON_AddItemToArray(cJSON_GetObjectItem(entry[x], "dependent_outputs"),
                                     cJSON_CreateString(p.nodes[o].id));
            }
            /* A valid node has only valid ancestors: nothing to find above it. The
             * budget bounds pathological prompts (many failing outputs over one long
             * failing chain); past it, dependent_outputs may be incomplete. */
            if (vs.state[x] != ST_DONE || vs.valid[x] || ++work > DEPENDENTS_WORK_MAX)
                continue;
            for (int k = p.nodes[x].n_in - 1; k >= 0; k--) {
                int s = p.nodes[x].in[k].src;
                if (s >= 0 && stamp[s] != i + 1)
                    stack[sp++] = s;
            }
        }
    }
    out->ok = n_good > 0;
    if (!out->ok)
        out->error = top_error("prompt_outputs_failed_validation", "Prompt outputs failed validation", d.ptr);

    for (int i = 0; i < p.n; i++)
        cJSON_Delete(vs.errs[i]);
    for (int i = 0; i < vs.n_oc; i++)
        node_strlist_release(&vs.oc[i].list);
    xfree(vs.oc);
    xfree(vs.st);
    xfree(vs.state);
    xfree(vs.valid);
    xfree(vs.errs);
    xfree(entry);
    xfree(stamp);
    xfree(stack);
    xfree(outs);
    buf_release(&d);
    if (out->ok) {
        /* The JSON is final now: hash what of the signatures it decides and hand the
         * whole over. check_const typed the constants of every node validation reached,
         * which includes every node this prompt can run; the executor types any other
         * from the same JSON if it ever needs one (an IS_CHANGED it calls). */
        out->prompt = xcalloc(1, sizeof(*out->prompt));
        out->prompt->p = p;
        out->prompt->json = prompt;
        gprompt_hash_inputs(&out->prompt->p);
    } else {
        gprompt_release(&p);
    }
    return 0;
}

int graph_validate(struct graph_ctx *g, cJSON *prompt, struct graph_validation *out)
{
    return graph_validate_targets(g, prompt, NULL, out);
}

void graph_validation_release(struct graph_validation *v)
{
    cJSON_Delete(v->error);
    cJSON_Delete(v->node_errors);
    cJSON_Delete(v->outputs);
    graph_prompt_free(v->prompt);
    memset(v, 0, sizeof(*v));
}

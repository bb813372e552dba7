/*
 * The API-format prompt parsed into native structs: node array in prompt key
 * order, inputs by declared index, links resolved to node indices, and (once
 * validation has coerced the JSON in place) constants as typed values. Validation
 * hands this object to the executor (struct graph_prompt), so a queued prompt is
 * parsed and typed once; the executor never reads an input's JSON.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "graph_run.h"
#include "strhash.h"


int gjson_is_link(const cJSON *v)
{
    /* Python's bool is an int, so [id, true] is a link to slot 1 in ComfyUI too. */
    return cJSON_IsArray(v) && cJSON_GetArraySize(v) == 2 && cJSON_IsString(v->child) &&
           (gjson_is_number(v->child->next) || cJSON_IsBool(v->child->next));
}

int gprompt_find(const struct gprompt *p, const char *id)
{
    if (!p->nslots || !id)
        return -1;
    size_t mask = p->nslots - 1;
    for (size_t s = strhash(id) & mask; p->slots[s] >= 0; s = (s + 1) & mask)
        if (strcmp(p->nodes[p->slots[s]].id, id) == 0)
            return p->slots[s];
    return -1;
}

void gprompt_release(struct gprompt *p)
{
    xfree(p->nodes); /* the block of all four arrays */
    memset(p, 0, sizeof(*p));
}

int gprompt_parse(struct gprompt *p, const struct node_registry *reg, cJSON *prompt)
{
    memset(p, 0, sizeof(*p));
    if (!cJSON_IsObject(prompt))
        return ERR_INVALID;
    int n = 0;
    for (cJSON *it = prompt->child; it; it = it->next)
        n++;
    p->n = n;
    p->nslots = 16;
    while (p->nslots < 2 * (size_t)n)
        p->nslots *= 2;

    /* First pass: classes, to size the inputs. */
    const struct node_class **cls = xmalloc((size_t)(n ? n : 1) * sizeof(*cls));
    size_t total_in = 0;
    int i = 0;
    for (cJSON *it = prompt->child; it; it = it->next, i++) {
        cJSON *ct = cJSON_IsObject(it) ? cJSON_GetObjectItemCaseSensitive(it, "class_type") : NULL;
        cls[i] = cJSON_IsString(ct) ? node_registry_find(reg, ct->valuestring) : NULL;
        if (cls[i])
            total_in += (size_t)node_class_n_inputs(cls[i]);
    }

    /*
     * One block: nodes, id table, inputs, key orders. A large prompt's arrays are
     * each above malloc's mmap threshold; freed one by one they raised it only to
     * the largest, so the heap top a prompt left behind was trimmed and faulted in
     * again by the next one (a 10k-node chain's validation took 450 page faults,
     * most of its time). One block raises the threshold to what a prompt frees, and
     * the next prompt of that size reuses the pages. Each part's size keeps the next
     * 8-byte aligned (the id table has a power of two >= 16 of slots).
     */
    size_t nodes_bytes = (size_t)(n ? n : 1) * sizeof(*p->nodes);
    size_t slots_bytes = p->nslots * sizeof(*p->slots);
    size_t ins_bytes = (total_in ? total_in : 1) * sizeof(*p->ins);
    size_t keys_bytes = (total_in ? total_in : 1) * sizeof(*p->keys);
    char *block = xmalloc(nodes_bytes + slots_bytes + ins_bytes + keys_bytes);
    p->nodes = (struct gnode *)block;
    p->slots = (int32_t *)(block + nodes_bytes);
    p->ins = (struct gin *)(block + nodes_bytes + slots_bytes);
    p->keys = (uint16_t *)(block + nodes_bytes + slots_bytes + ins_bytes);
    memset(p->nodes, 0, nodes_bytes);
    memset(p->slots, 0xff, slots_bytes);

    /* Second pass: ids and sizes. Duplicate keys (possible in JSON text) keep the
     * first occurrence in the id table, as a dict would keep the last value;
     * cJSON's lookup also returns the first, so we are consistent with it. */
    i = 0;
    for (cJSON *it = prompt->child; it; it = it->next, i++) {
        struct gnode *g = &p->nodes[i];
        g->id = it->string ? it->string : "";
        g->json = it;
        size_t mask = p->nslots - 1, s = strhash(g->id) & mask;
        int dup = 0;
        for (; p->slots[s] >= 0; s = (s + 1) & mask)
            if (strcmp(p->nodes[p->slots[s]].id, g->id) == 0) {
                dup = 1;
                break;
            }
        if (!dup)
            p->slots[s] = i;
        g->cls = cls[i];
        if (g->cls) {
            g->n_in = node_class_n_inputs(g->cls);
            g->n_out = node_class_n_outputs(g->cls);
        }
    }
    xfree(cls);

    /* Third pass: inputs and links. */
    size_t off = 0;
    for (i = 0; i < n; i++) {
        struct gnode *g = &p->nodes[i];
        if (!g->cls)
            continue;
        g->in = p->ins + off;
        g->key_order = p->keys + off;
        off += (size_t)g->n_in;
        for (int k = 0; k < g->n_in; k++) {
            g->in[k].json = NULL;
            g->in[k].src = -1;
            g->in[k].slot = -1;
            g->in[k].konst = (struct gconst){0};
        }
        cJSON *inputs = g->inputs = cJSON_GetObjectItemCaseSensitive(g->json, "inputs");
        if (!cJSON_IsObject(inputs))
            continue;
        for (cJSON *v = inputs->child; v; v = v->next) {
            if (!v->string)
                continue;
            int k = node_class_input_index(g->cls, v->string);
            if (k < 0 || g->cls->inputs[k].group == NODE_INPUT_HIDDEN || g->in[k].json)
                continue;
            g->in[k].json = v;
            g->key_order[g->n_keys++] = (uint16_t)k;
            if (!gjson_is_link(v))
                continue;
            int src = gprompt_find(p, v->child->valuestring);
            const cJSON *sl = v->child->next;
            double slot = cJSON_IsBool(sl) ? (double)cJSON_IsTrue(sl) : gjson_number(sl);
            if (src < 0 || !p->nodes[src].cls || slot != floor(slot))
                continue;
            if (slot < 0)
                slot += p->nodes[src].n_out; /* Python's negative indices, as validation allows */
            if (!(slot >= 0) || slot >= p->nodes[src].n_out)
                continue;
            g->in[k].src = src;
            g->in[k].slot = (int32_t)slot;
        }
    }
    return 0;
}

int graph__const_type(const struct node_input_def *in, const cJSON *v, struct gconst *c)
{
    const char *t = in->type;
    int64_t i;
    int big;
    double d;
    *c = (struct gconst){0};
    if (!strcmp(t, "INT")) {
        c->kind = GCONST_INT;
        if (cJSON_IsBool(v)) {
            c->i = cJSON_IsTrue(v);
        } else if (gjson_get_int(v, &i, &big, &d)) {
            c->i = i;
            c->big = (uint8_t)big;
        } else {
            c->i = (int64_t)d;
        }
        return 1;
    }
    if (!strcmp(t, "FLOAT")) {
        c->kind = GCONST_FLOAT;
        if (cJSON_IsString(v))
            c->f = strtod(v->valuestring, NULL);
        else
            c->f = cJSON_IsBool(v) ? cJSON_IsTrue(v) : gjson_number(v);
        return 1;
    }
    if (!strcmp(t, "BOOLEAN")) {
        c->kind = GCONST_BOOL;
        c->i = cJSON_IsTrue(v) || (gjson_is_number(v) && gjson_number(v) != 0);
        return 1;
    }
    if (!strcmp(t, "*")) {
        /* A wildcard socket takes a constant as it is, as ComfyUI passes it. */
        if (cJSON_IsString(v)) {
            c->kind = GCONST_STRING;
            c->s = v->valuestring;
        } else if (cJSON_IsBool(v)) {
            c->kind = GCONST_BOOL;
            c->i = cJSON_IsTrue(v);
        } else if (gjson_is_number(v) && gjson_get_int(v, &i, &big, &d)) {
            c->kind = GCONST_INT;
            c->i = i;
            c->big = (uint8_t)big;
        } else if (gjson_is_number(v)) {
            c->kind = GCONST_FLOAT;
            c->f = d;
        }
        return c->kind != GCONST_NONE;
    }
    if ((!strcmp(t, "STRING") || !strcmp(t, NODE_COMBO)) && cJSON_IsString(v)) {
        c->kind = GCONST_STRING;
        c->s = v->valuestring;
        return 1;
    }
    return 0;
}

static struct value *gconst_value(const struct gconst *c)
{
    switch (c->kind) {
    case GCONST_INT:
        return c->big ? value_new_u64((uint64_t)c->i) : value_new_int(c->i);
    case GCONST_FLOAT:
        return value_new_float(c->f);
    case GCONST_BOOL:
        return value_new_bool((int)c->i);
    case GCONST_STRING:
        return value_new_string(c->s);
    default:
        return NULL;
    }
}

struct value *graph__const_value(const struct node_input_def *in, const cJSON *v)
{
    struct gconst c;
    if (graph__const_type(in, v, &c))
        return gconst_value(&c);
    if (strcmp(in->type, "STRING") != 0 && strcmp(in->type, NODE_COMBO) != 0)
        return NULL; /* a constant on a socket input: the caller reports it */
    struct buf b; /* str() of a non-string */
    buf_init(&b);
    gjson_py(v, 1, &b);
    struct value *r = value_new_string(b.ptr);
    buf_release(&b);
    return r;
}

struct value *gin_const_value(const struct gin *gi, const struct node_input_def *in)
{
    if (gi->konst.kind != GCONST_NONE)
        return gconst_value(&gi->konst);
    return graph__const_value(in, gi->json);
}

void gprompt_type_constants(struct gprompt *p)
{
    for (int i = 0; i < p->n; i++) {
        struct gnode *g = &p->nodes[i];
        for (int k = 0; g->cls && k < g->n_in; k++) {
            struct gin *in = &g->in[k];
            const struct node_input_def *d = &g->cls->inputs[k];
            if (!in->json || gjson_is_link(in->json) || !graph__const_type(d, in->json, &in->konst))
                in->konst = (struct gconst){0};
        }
    }
    gprompt_hash_inputs(p);
}

struct graph_prompt *graph__prompt_parse_untyped(struct graph_ctx *g, cJSON *prompt)
{
    struct graph_prompt *np = xcalloc(1, sizeof(*np));
    if (gprompt_parse(&np->p, g->reg, prompt) < 0) {
        xfree(np);
        return NULL;
    }
    np->json = prompt;
    gprompt_hash_inputs(&np->p); /* the JSON is final: nothing coerces a raw prompt */
    return np;
}

struct graph_prompt *graph_prompt_parse(struct graph_ctx *g, cJSON *prompt)
{
    struct graph_prompt *np = graph__prompt_parse_untyped(g, prompt);
    if (np)
        gprompt_type_constants(&np->p);
    return np;
}

void graph_prompt_free(struct graph_prompt *np)
{
    if (!np)
        return;
    gprompt_release(&np->p);
    xfree(np);
}

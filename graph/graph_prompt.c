/*
 * The API-format prompt parsed into native structs: node array in prompt key
 * order, inputs by declared index, links resolved to node indices, and (once
 * validation has coerced the JSON in place) constants as typed values. Validation
 * hands this object to the executor (struct graph_prompt), so a queued prompt is
 * parsed and typed once; the executor never reads an input's JSON.
 */
#include <math.h>
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
    for (int i = 0; i < p->n; i++)
        for (int k = 0; k < p->nodes[i].n_in && p->nodes[i].cls; k++)
            value_unref(p->nodes[i].in[k].konst);
    xfree(p->nodes);
    xfree(p->ins);
    xfree(p->keys);
    xfree(p->slots);
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
    p->nodes = xcalloc(n ? n : 1, sizeof(*p->nodes));
    p->nslots = 16;
    while (p->nslots < 2 * (size_t)n)
        p->nslots *= 2;
    p->slots = xmalloc(p->nslots * sizeof(*p->slots));
    memset(p->slots, 0xff, p->nslots * sizeof(*p->slots));

    /* First pass: ids, classes, sizes. Duplicate keys (possible in JSON text) keep
     * the first occurrence in the id table, as a dict would keep the last value;
     * cJSON's lookup also returns the first, so we are consistent with it. */
    size_t total_in = 0;
    int i = 0;
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
        cJSON *ct = cJSON_IsObject(it) ? cJSON_GetObjectItemCaseSensitive(it, "class_type") : NULL;
        g->cls = cJSON_IsString(ct) ? node_registry_find(reg, ct->valuestring) : NULL;
        if (g->cls) {
            g->n_in = node_class_n_inputs(g->cls);
            g->n_out = node_class_n_outputs(g->cls);
            total_in += (size_t)g->n_in;
        }
    }
    p->ins = xmalloc((total_in ? total_in : 1) * sizeof(*p->ins));
    p->keys = xmalloc((total_in ? total_in : 1) * sizeof(*p->keys));

    /* Second pass: inputs and links. */
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
            g->in[k].konst = NULL;
        }
        cJSON *inputs = cJSON_GetObjectItemCaseSensitive(g->json, "inputs");
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

void gprompt_type_constants(struct gprompt *p)
{
    for (int i = 0; i < p->n; i++) {
        struct gnode *g = &p->nodes[i];
        for (int k = 0; g->cls && k < g->n_in; k++) {
            struct gin *in = &g->in[k];
            value_unref(in->konst);
            in->konst = in->json && !gjson_is_link(in->json)
                            ? graph__const_value(&g->cls->inputs[k], in->json)
                            : NULL;
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

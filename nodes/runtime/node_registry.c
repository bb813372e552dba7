#include "node_registry.h"

#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "strhash.h"
#include "err.h"
#include "node_files.h"

/*
 * Classes are kept in registration order (object_info order) plus an
 * open-addressing hash table of indices for lookups: validation looks up every
 * node of a prompt, and a 100k-node prompt must not scan the list each time.
 */
struct node_registry {
    const struct node_class **cls; /* borrowed, in order */
    size_t n, cap;
    int32_t *slots;                /* index into cls, -1 = empty */
    size_t nslots;                 /* power of two */
};


struct node_registry *node_registry_new(void)
{
    struct node_registry *r = xcalloc(1, sizeof(*r));
    r->nslots = 64;
    r->slots = xmalloc(r->nslots * sizeof(*r->slots));
    memset(r->slots, 0xff, r->nslots * sizeof(*r->slots));
    return r;
}

void node_registry_free(struct node_registry *r)
{
    if (!r)
        return;
    xfree(r->cls);
    xfree(r->slots);
    xfree(r);
}

static void slots_insert(struct node_registry *r, int32_t idx)
{
    size_t mask = r->nslots - 1;
    size_t s = strhash(r->cls[idx]->name) & mask;
    while (r->slots[s] >= 0)
        s = (s + 1) & mask;
    r->slots[s] = idx;
}

void node_registry_add(struct node_registry *r, const struct node_class *cls)
{
    ASSERT(cls && cls->name && cls->run);
    struct err e = {0};
    if (node_class_check(cls, &e) < 0)
        PANIC("%s", e.msg);
    if (node_registry_find(r, cls->name))
        PANIC("node class '%s' registered twice", cls->name);
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 32;
        r->cls = xrealloc(r->cls, r->cap * sizeof(*r->cls));
    }
    r->cls[r->n++] = cls;
    if (2 * r->n > r->nslots) {
        xfree(r->slots);
        r->nslots *= 2;
        r->slots = xmalloc(r->nslots * sizeof(*r->slots));
        memset(r->slots, 0xff, r->nslots * sizeof(*r->slots));
        for (size_t i = 0; i < r->n; i++)
            slots_insert(r, (int32_t)i);
    } else {
        slots_insert(r, (int32_t)(r->n - 1));
    }
}

void node_registry_add_all(struct node_registry *r, const struct node_class *const *cls, size_t n)
{
    for (size_t i = 0; i < n; i++)
        node_registry_add(r, cls[i]);
}

const struct node_class *node_registry_find(const struct node_registry *r, const char *name)
{
    if (!name)
        return NULL;
    size_t mask = r->nslots - 1;
    for (size_t s = strhash(name) & mask; r->slots[s] >= 0; s = (s + 1) & mask)
        if (strcmp(r->cls[r->slots[s]]->name, name) == 0)
            return r->cls[r->slots[s]];
    return NULL;
}

size_t node_registry_count(const struct node_registry *r)
{
    return r->n;
}

const struct node_class *node_registry_at(const struct node_registry *r, size_t i)
{
    ASSERT(i < r->n);
    return r->cls[i];
}

int node_class_n_inputs(const struct node_class *cls)
{
    int n = 0;
    if (cls->inputs)
        while (cls->inputs[n].name)
            n++;
    return n;
}

int node_class_check(const struct node_class *cls, struct err *e)
{
    int n = node_class_n_inputs(cls);
    if (cls->n_inputs && cls->n_inputs != n)
        return err_set(e, ERR_INVALID,
                       "node class '%s': its input index enum counts %d inputs, the declaration %d",
                       cls->name, cls->n_inputs, n);
    return 0;
}

int node_class_n_outputs(const struct node_class *cls)
{
    int n = 0;
    if (cls->outputs)
        while (cls->outputs[n].type)
            n++;
    return n;
}

int node_class_input_index(const struct node_class *cls, const char *name)
{
    if (!cls->inputs)
        return -1;
    for (int i = 0; cls->inputs[i].name; i++)
        if (strcmp(cls->inputs[i].name, name) == 0)
            return i;
    return -1;
}

int node_type_is_widget(const char *type)
{
    return !strcmp(type, "INT") || !strcmp(type, "FLOAT") || !strcmp(type, "STRING") ||
           !strcmp(type, "BOOLEAN") || !strcmp(type, NODE_COMBO);
}

/* ---- string lists ---------------------------------------------------------------- */

void node_strlist_init(struct node_strlist *l)
{
    memset(l, 0, sizeof(*l));
}

void node_strlist_release(struct node_strlist *l)
{
    for (size_t i = 0; i < l->n; i++)
        xfree(l->items[i]);
    xfree(l->items);
    node_strlist_init(l);
}

void node_strlist_add(struct node_strlist *l, const char *s)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->items = xrealloc(l->items, l->cap * sizeof(*l->items));
    }
    l->items[l->n++] = xstrdup(s);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void node_strlist_sort(struct node_strlist *l)
{
    if (l->n > 1)
        qsort(l->items, l->n, sizeof(*l->items), cmp_str);
}

void node_input_options(const struct node_env *env, const struct node_input_def *in,
                        struct node_strlist *out)
{
    if (in->options) {
        for (size_t i = 0; in->options[i]; i++)
            node_strlist_add(out, in->options[i]);
    } else if (in->options_folder) {
        node_files_list_models(env, in->options_folder, in->options_exts, out);
    } else if (in->options_fn) {
        in->options_fn(env, out);
    }
}

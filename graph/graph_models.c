/*
 * graph_models.c — the model files a prompt names (see graph.h): what a cluster worker
 * that ran it keeps loaded, and so what the next prompt's claim can prefer.
 */
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "buf.h"
#include "graph.h"
#include "graph_internal.h"

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

char *graph_prompt_model_files(const struct graph_prompt *gp)
{
    const struct gprompt *p = &gp->p;
    size_t n = 0, cap = 0;
    char **v = NULL;
    for (int i = 0; i < p->n; i++) {
        const struct gnode *nd = &p->nodes[i];
        if (!nd->cls || !nd->cls->inputs)
            continue;
        for (int k = 0; k < nd->n_in; k++) {
            const struct node_input_def *d = &nd->cls->inputs[k];
            const cJSON *j = nd->in[k].json;
            /* A constant only: a name arriving through a link is not known before the run. */
            if (!d->options_folder || nd->in[k].src >= 0 || !cJSON_IsString(j))
                continue;
            if (n == cap)
                v = xrealloc(v, (cap = cap ? 2 * cap : 8) * sizeof(*v));
            struct buf b;
            buf_init(&b);
            buf_printf(&b, "%s/%s", d->options_folder, j->valuestring);
            v[n++] = buf_detach(&b, NULL);
        }
    }
    if (n > 1) /* qsort's base must not be NULL, even for 0 items (UBSan aborts) */
        qsort(v, n, sizeof(*v), cmp_str);
    struct buf out;
    buf_init(&out);
    for (size_t i = 0; i < n; i++) {
        /* Newlines separate entries: a name holding one cannot be told apart; skip it. */
        if ((i == 0 || strcmp(v[i], v[i - 1]) != 0) && !strchr(v[i], '\n'))
            buf_printf(&out, "%s%s", out.len ? "\n" : "", v[i]);
        xfree(v[i]);
    }
    xfree(v);
    return buf_detach(&out, NULL);
}

/*
 * test_graph_lists — list I/O in the executor (graph/graph_node.c), as ComfyUI's
 * execution.py does it: a node fed a list runs once per item (a shorter list
 * repeats its last item), its outputs become lists, an INPUT_IS_LIST node runs
 * once with the whole lists, an OUTPUT_IS_LIST output is concatenated over the
 * calls, and an output node's UI results are merged over its calls. Then
 * RebatchLatents and RebatchImages (nodes/latent/nodes_rebatch.c), run directly on
 * hand-built lists whose expected batches, masks and batch_index follow
 * nodes_rebatch.py step by step (worked out in the comments), and through the
 * executor (EmptyImage -> RebatchImages -> ImageInvert -> an output node).
 */
#include <string.h>

#include "alloc.h"
#include "graph_test_util.h"
#include "harness.h"
#include "node_registry.h"
#include "nodes_rebatch.h"
#include "sd_types.h"

static int add_calls;

/* TList: n INTs 10, 20, ... as one list output. */
static int tlist_run(struct node_ctx *c)
{
    int64_t n = node_in_int_at(c, 0);
    struct value *items[16];
    for (int64_t i = 0; i < n && i < 16; i++)
        items[i] = value_new_int(10 * (i + 1));
    node_set_output(c, 0, value_new_list("INT", items, (int)(n < 16 ? n : 16)));
    return 0;
}

static int tadd_run(struct node_ctx *c)
{
    add_calls++;
    node_set_output(c, 0, value_new_int(node_in_int_at(c, 0) + node_in_int_at(c, 1)));
    return 0;
}

/* TSum (INPUT_IS_LIST): the sum of its list. */
static int tsum_run(struct node_ctx *c)
{
    const struct value *v = node_in_at(c, 0);
    int64_t s = 0;
    for (int i = 0; i < value_list_len(v); i++)
        s += value_list_at(v, i)->i;
    node_set_output(c, 0, value_new_int(s));
    return 0;
}

/* TShow (output node): a UI entry "v<value>" per call. */
static int tshow_run(struct node_ctx *c)
{
    const struct value *v = node_in_at(c, 0);
    char name[64];
    if (v->kind == VALUE_TENSOR)
        snprintf(name, sizeof name, "b%lld:%g", (long long)v->shape[0], v->data[0]);
    else
        snprintf(name, sizeof name, "v%lld", (long long)v->i);
    node_ui_add_image(c, name, "", "temp");
    return 0;
}

static const struct node_input_def tlist_in[] = {{.name = "n", .type = "INT"}, NODE_INPUTS_END};
static const struct node_input_def tadd_in[] = {{.name = "a", .type = "INT"}, {.name = "b", .type = "INT"},
                                                NODE_INPUTS_END};
static const struct node_input_def tsum_in[] = {{.name = "v", .type = "INT"}, NODE_INPUTS_END};
static const struct node_input_def tshow_in[] = {{.name = "v", .type = "*"}, NODE_INPUTS_END};
static const struct node_output_def int_list_out[] = {{.type = "INT", .is_list = 1}, NODE_OUTPUTS_END};
static const struct node_output_def int_out[] = {{.type = "INT"}, NODE_OUTPUTS_END};
static const struct node_output_def no_out[] = {NODE_OUTPUTS_END};

static const struct node_class tlist = {.name = "TList", .category = "test", .inputs = tlist_in,
                                        .outputs = int_list_out, .run = tlist_run};
static const struct node_class tadd = {.name = "TAdd", .category = "test", .inputs = tadd_in,
                                       .outputs = int_out, .run = tadd_run};
static const struct node_class tsum = {.name = "TSum", .category = "test", .flags = NODE_CLASS_INPUT_IS_LIST,
                                       .inputs = tsum_in, .outputs = int_out, .run = tsum_run};
static const struct node_class tshow = {.name = "TShow", .category = "test", .flags = NODE_CLASS_OUTPUT,
                                        .inputs = tshow_in, .outputs = no_out, .run = tshow_run};
static const struct node_class *const test_classes[] = {&tlist, &tadd, &tsum, &tshow};

static struct graph_ctx *G;

/* Run prompt `json` (text); returns the result (release with graph_result_release). */
static void run_prompt(const char *json, struct graph_result *r)
{
    cJSON *p = cJSON_Parse(json);
    ASSERT(p);
    struct graph_validation v;
    graph_validate(G, p, &v);
    ok(v.ok, "prompt validates: %s", json);
    struct graph_job job = {.prompt_id = "lists", .prompt = p, .outputs_to_execute = v.outputs};
    graph_execute(G, &job, NULL, r);
    graph_validation_release(&v);
    cJSON_Delete(p);
}

/* The UI names of node `id` joined by ',' into out. */
static void ui_names(const struct graph_result *r, const char *id, char *out, size_t cap)
{
    out[0] = 0;
    const cJSON *imgs = cJSON_GetObjectItem(cJSON_GetObjectItem(r->outputs, id), "images");
    const cJSON *it;
    cJSON_ArrayForEach(it, imgs)
    {
        size_t l = strlen(out);
        snprintf(out + l, cap - l, "%s%s", l ? "," : "", cJSON_GetObjectItem(it, "filename")->valuestring);
    }
}

static const char *error_message(const struct graph_result *r)
{
    const cJSON *m;
    cJSON_ArrayForEach(m, r->messages)
    {
        if (!strcmp(cJSON_GetArrayItem(m, 0)->valuestring, "execution_error"))
            return cJSON_GetObjectItem(cJSON_GetArrayItem(m, 1), "exception_message")->valuestring;
    }
    return "";
}

static void check_mapping(void)
{
    struct graph_result r;
    char names[512];
    /* [10, 20, 30] + 1 per item -> [11, 21, 31]; TSum sees the list: 63. */
    add_calls = 0;
    run_prompt("{\"1\":{\"class_type\":\"TList\",\"inputs\":{\"n\":3}},"
               "\"2\":{\"class_type\":\"TAdd\",\"inputs\":{\"a\":[\"1\",0],\"b\":1}},"
               "\"3\":{\"class_type\":\"TSum\",\"inputs\":{\"v\":[\"2\",0]}},"
               "\"4\":{\"class_type\":\"TShow\",\"inputs\":{\"v\":[\"3\",0]}},"
               "\"5\":{\"class_type\":\"TShow\",\"inputs\":{\"v\":[\"2\",0]}}}",
               &r);
    ui_names(&r, "4", names, sizeof names);
    ok(r.status == GRAPH_STATUS_SUCCESS && add_calls == 3 && !strcmp(names, "v63"),
       "a list input maps the node over its items, INPUT_IS_LIST sees the list (%d calls, %s)", add_calls, names);
    ui_names(&r, "5", names, sizeof names);
    ok(!strcmp(names, "v11,v21,v31"), "an output node's UI results merge over its calls (%s)", names);
    graph_result_release(&r);

    /* Lists of 3 and 2: the shorter repeats its last item: 10+10, 20+20, 30+20. */
    run_prompt("{\"1\":{\"class_type\":\"TList\",\"inputs\":{\"n\":3}},"
               "\"6\":{\"class_type\":\"TList\",\"inputs\":{\"n\":2}},"
               "\"2\":{\"class_type\":\"TAdd\",\"inputs\":{\"a\":[\"1\",0],\"b\":[\"6\",0]}},"
               "\"5\":{\"class_type\":\"TShow\",\"inputs\":{\"v\":[\"2\",0]}}}",
               &r);
    ui_names(&r, "5", names, sizeof names);
    ok(r.status == GRAPH_STATUS_SUCCESS && !strcmp(names, "v20,v40,v50"), "slice_dict repeats the last item (%s)",
       names);
    graph_result_release(&r);

    /* An empty list is an execution error, not a crash. */
    run_prompt("{\"1\":{\"class_type\":\"TList\",\"inputs\":{\"n\":0}},"
               "\"2\":{\"class_type\":\"TAdd\",\"inputs\":{\"a\":[\"1\",0],\"b\":1}},"
               "\"5\":{\"class_type\":\"TShow\",\"inputs\":{\"v\":[\"2\",0]}}}",
               &r);
    ok(r.status == GRAPH_STATUS_ERROR && strstr(error_message(&r), "empty list"), "an empty list: %s",
       error_message(&r));
    graph_result_release(&r);

    /* Real nodes: 3 images of value 0 (EmptyImage color 0) rebatched by 2, inverted per batch. */
    run_prompt("{\"1\":{\"class_type\":\"EmptyImage\",\"inputs\":{\"width\":8,\"height\":4,\"batch_size\":3,"
               "\"color\":0}},"
               "\"2\":{\"class_type\":\"RebatchImages\",\"inputs\":{\"images\":[\"1\",0],\"batch_size\":2}},"
               "\"3\":{\"class_type\":\"ImageInvert\",\"inputs\":{\"image\":[\"2\",0]}},"
               "\"4\":{\"class_type\":\"TShow\",\"inputs\":{\"v\":[\"3\",0]}}}",
               &r);
    ui_names(&r, "4", names, sizeof names);
    ok(r.status == GRAPH_STATUS_SUCCESS && !strcmp(names, "b2:1,b1:1"),
       "EmptyImage -> RebatchImages(2) -> ImageInvert runs per batch (%s) %s", names, error_message(&r));
    graph_result_release(&r);
}

/* ---- the rebatch nodes, directly ------------------------------------------------------- */

static struct node_env env = {.preview_size = 512};

static struct value *run_list_node(const struct node_class *cls, struct value *a, struct value *bs)
{
    struct value *in[2] = {a, bs}, *out[1] = {0};
    struct node_ctx c;
    node_ctx_init(&c, cls, "1", &env, in, out);
    int rc = cls->run(&c);
    if (rc < 0)
        printf("# %s failed: %s\n", cls->name, c.exc_message.ptr ? c.exc_message.ptr : "");
    node_ctx_release(&c);
    value_unref(a);
    value_unref(bs);
    return out[0];
}

/* A latent b x 4 x h x w whose sample k of every channel holds base + k. */
static struct value *latent(int64_t b, int64_t h, int64_t w, float base)
{
    struct sd_latent *l = sd_latent_new(b, 4, h, w);
    for (int64_t k = 0; k < b; k++)
        for (int64_t i = 0; i < 4 * h * w; i++)
            l->samples[k * 4 * h * w + i] = base + (float)k;
    return sd_latent_value(l);
}

static void check_rebatch_latents(void)
{
    /*
     * A: 3 samples 2x2 (values 0,1,2), B: 2 samples 2x2 (10,11) with a 1-row noise_mask
     * of 16x16 = (h*8)^2 holding 0.5, C: 1 sample 3x3 (20). batch_size 2. Following
     * LatentRebatch.execute: A (3 > 2) -> out [A0 A1], keeps [A2]; B joins (3 > 2) ->
     * out [A2 B0], keeps [B1]; C differs in size -> out [B1], current C; end -> out
     * [C0]. batch_index: A 0,1,2, B from offset 3: 3,4, C: 5. Masks: A's are ones
     * (16x16), B's one row repeated to two; [A0 A1] is all ones (dropped), [A2 B0]
     * keeps [ones, 0.5], [B1] keeps [0.5], [C0] is ones (24x24: dropped).
     */
    struct value *b = latent(2, 2, 2, 10.0f);
    struct sd_latent *bl = (struct sd_latent *)sd_latent_of(b);
    bl->noise_mask = xmalloc(16 * 16 * sizeof(float));
    for (int i = 0; i < 256; i++)
        bl->noise_mask[i] = 0.5f;
    bl->mb = 1;
    bl->mh = bl->mw = 16;
    struct value *items[3] = {latent(3, 2, 2, 0.0f), b, latent(1, 3, 3, 20.0f)};
    struct value *out = run_list_node(&nodes_rebatch_latents, value_new_list("LATENT", items, 3),
                                      value_new_int(2));
    ok(out && value_list_len(out) == 4, "RebatchLatents: 4 batches (%d)", value_list_len(out));
    if (!out || value_list_len(out) != 4) {
        value_unref(out);
        return;
    }
    static const int want_b[4] = {2, 2, 1, 1};
    static const float want_first[4][2] = {{0, 1}, {2, 10}, {11, -1}, {20, -1}};
    static const int64_t want_idx[4][2] = {{0, 1}, {2, 3}, {4, -1}, {5, -1}};
    static const int want_mask[4] = {0, 1, 1, 0};
    for (int k = 0; k < 4; k++) {
        const struct sd_latent *l = sd_latent_of(value_list_at(out, k));
        int good = l && l->b == want_b[k] && l->n_batch_index == want_b[k] && (l->noise_mask != NULL) == want_mask[k];
        for (int j = 0; good && j < want_b[k]; j++)
            good = l->samples[j * 4 * l->h * l->w] == want_first[k][j] && l->batch_index[j] == want_idx[k][j];
        ok(good, "RebatchLatents batch %d: %d samples, values, batch_index and mask as LatentRebatch gives", k,
           l ? (int)l->b : -1);
    }
    const struct sd_latent *l1 = sd_latent_of(value_list_at(out, 1));
    ok(l1->mb == 2 && l1->mh == 16 && l1->noise_mask[0] == 1.0f && l1->noise_mask[256] == 0.5f,
       "batch 1's mask: a row of ones (A2) then B's 0.5 row");
    value_unref(out);
}

static void check_rebatch_images(void)
{
    /* Images of 2 and 3 frames (values 0,1 and 2,3,4), batch_size 2 -> [0 1] [2 3] [4]. */
    struct value *a = value_new_image(2, 2, 3, 3), *b = value_new_image(3, 2, 3, 3);
    for (int k = 0; k < 2; k++)
        a->data[k * 18] = (float)k;
    for (int k = 0; k < 3; k++)
        b->data[k * 18] = (float)(2 + k);
    struct value *items[2] = {a, b};
    struct value *out = run_list_node(&nodes_rebatch_images, value_new_list("IMAGE", items, 2), value_new_int(2));
    int good = out && value_list_len(out) == 3;
    for (int k = 0; good && k < 3; k++) {
        const struct value *v = value_list_at(out, k);
        good = v->shape[0] == (k < 2 ? 2 : 1) && v->data[0] == (float)(2 * k);
        if (good && k < 2)
            good = v->data[18] == (float)(2 * k + 1);
    }
    ok(good, "RebatchImages: frames regrouped 2, 2, 1 in order");
    value_unref(out);
    /* Frames of another size in one batch: torch.cat's error, not a crash. */
    struct value *c2 = value_new_image(1, 4, 4, 3), *d2 = value_new_image(1, 2, 2, 3);
    struct value *it2[2] = {c2, d2};
    out = run_list_node(&nodes_rebatch_images, value_new_list("IMAGE", it2, 2), value_new_int(2));
    ok(out == NULL, "RebatchImages: frames of two sizes in one batch fail");
}

int main(void)
{
    long live = alloc_live_count();
    struct tdirs d;
    tdirs_make(&d);
    G = tgraph_new(&d, GRAPH_CACHE_CLASSIC, 0);
    node_registry_add_all(graph_registry(G), test_classes, sizeof(test_classes) / sizeof(test_classes[0]));
    check_mapping();
    graph_free(G);
    tdirs_remove(&d);
    check_rebatch_latents();
    check_rebatch_images();
    ok(alloc_live_count() == live, "no allocation left live (%ld)", alloc_live_count() - live);
    return harness_done();
}

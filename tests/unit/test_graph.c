/*
 * graph/ unit tests: validation (a corpus of malformed prompts with ComfyUI's exact
 * error types and strings), execution order, events, caching, interrupts and
 * failures, driven directly in C through graph.h with a fake event sink.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "alloc.h"
#include "buf.h"
#include "graph_internal.h"
#include "graph_test_util.h"
#include "harness.h"
#include "memmgr.h"
#include "node_registry.h"

/* The corpus table leaves trailing fields out on purpose (unchecked = NULL). */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

static struct graph_ctx *G; /* the context under test (test nodes interrupt it) */

/* ---- test-only node classes (registered by this program, never shipped) -------------- */

static char run_log[8192];
static int run_count;

static void log_run(const struct node_ctx *c)
{
    size_t n = strlen(run_log);
    snprintf(run_log + n, sizeof(run_log) - n, "%s%s", n ? "," : "", c->node_id);
    run_count++;
}

static void log_reset(void)
{
    run_log[0] = '\0';
    run_count = 0;
}

/* The test classes read by index: x (or seed, steps) first, then a (or interrupt_at). */
static int tcount_run(struct node_ctx *c)
{
    log_run(c);
    const struct value *a = node_in_at(c, 1);
    node_set_output(c, 0, value_new_int(node_in_int_at(c, 0) + (a ? value_i64(a) : 0)));
    return 0;
}

static int tout_run(struct node_ctx *c)
{
    log_run(c);
    char name[64];
    snprintf(name, sizeof(name), "v=%lld", (long long)value_i64(node_in_at(c, 0)));
    node_ui_add_image(c, name, "", "output");
    return 0;
}

static int tslow_run(struct node_ctx *c)
{
    log_run(c);
    int64_t steps = node_in_int_at(c, 0), at = node_in_int_at(c, 1);
    uint8_t rgb[4 * 4 * 3] = {0};
    for (int64_t i = 0; i < steps; i++) {
        if (i + 1 == at)
            graph_interrupt(G); /* as /interrupt from another thread would */
        struct timespec ts = {0, 11 * 1000 * 1000};
        nanosleep(&ts, NULL);
        int rc = node_progress(c, (double)(i + 1), (double)steps, rgb, 4, 4);
        if (rc < 0)
            return rc;
    }
    node_set_output(c, 0, value_new_int(steps));
    return 0;
}

static int tfail_run(struct node_ctx *c)
{
    log_run(c);
    return node_fail(c, "ValueError", "boom %lld", (long long)node_in_int_at(c, 0));
}

/* Progress as fast as it can, no preview. */
static int tfast_run(struct node_ctx *c)
{
    log_run(c);
    int64_t steps = node_in_int_at(c, 0);
    for (int64_t i = 0; i < steps; i++) {
        int rc = node_progress(c, (double)(i + 1), (double)steps, NULL, 0, 0);
        if (rc < 0)
            return rc;
    }
    node_set_output(c, 0, value_new_int(steps));
    return 0;
}

/* Interrupts without a progress call: the next node must not start. */
static int tintr_run(struct node_ctx *c)
{
    log_run(c);
    graph_interrupt(G);
    node_set_output(c, 0, value_new_int(1));
    return 0;
}

/* Outputs the number of cached results at the moment it runs. */
static int tcc_run(struct node_ctx *c)
{
    log_run(c);
    node_set_output(c, 0, value_new_int((int64_t)graph_cache_count(G)));
    return 0;
}

static const struct node_input_def tcount_in[] = {
    {.name = "x", .type = "INT", .def = NODE_I(0)},
    {.name = "a", .type = "INT", .group = NODE_INPUT_OPTIONAL},
    NODE_INPUTS_END};
static const struct node_input_def tout_in[] = {{.name = "v", .type = "INT"}, NODE_INPUTS_END};
static const struct node_input_def tslow_in[] = {
    {.name = "steps", .type = "INT", .def = NODE_I(5), .min = NODE_I(1), .max = NODE_I(1000)},
    {.name = "interrupt_at", .type = "INT", .def = NODE_I(0)},
    {.name = "a", .type = "INT", .group = NODE_INPUT_OPTIONAL},
    NODE_INPUTS_END};
static const struct node_input_def tfail_in[] = {
    {.name = "x", .type = "INT", .def = NODE_I(0)},
    {.name = "a", .type = "INT", .group = NODE_INPUT_OPTIONAL},
    NODE_INPUTS_END};
static const struct node_input_def tseed_in[] = {
    {.name = "seed", .type = "INT", .def = NODE_I(0), .min = NODE_I(0), .max = NODE_U64_MAX,
     .control_after_generate = 1, .tooltip = "The random seed."},
    NODE_INPUTS_END};
static const struct node_output_def int_out[] = {{.type = "INT"}, NODE_OUTPUTS_END};
static const struct node_output_def no_out[] = {NODE_OUTPUTS_END};

static const struct node_class tcount = {.name = "TCount", .category = "test", .inputs = tcount_in,
                                         .outputs = int_out, .run = tcount_run};
static const struct node_class tout = {.name = "TOut", .category = "test", .flags = NODE_CLASS_OUTPUT,
                                       .inputs = tout_in, .outputs = no_out, .run = tout_run};
static const struct node_class tslow = {.name = "TSlow", .category = "test", .inputs = tslow_in,
                                        .outputs = int_out, .run = tslow_run};
static const struct node_class tfail = {.name = "TFail", .category = "test", .inputs = tfail_in,
                                        .outputs = int_out, .run = tfail_run};
static const struct node_class tseed = {.name = "TSeed", .category = "test", .inputs = tseed_in,
                                        .outputs = int_out, .run = tcount_run};

/* Stand-ins for the SD1.5 nodes (same sockets), to check ComfyUI's order. */
static int standin_run(struct node_ctx *c)
{
    log_run(c);
    for (int i = 0; c->cls->outputs[i].type; i++)
        node_set_output(c, i, value_new_object(c->cls->outputs[i].type, NULL, NULL));
    if (node_class_is_output(c->cls))
        node_ui_add_image(c, "x.png", "", "output");
    return 0;
}
static const struct node_input_def ckpt_in[] = {{.name = "ckpt_name", .type = "STRING"}, NODE_INPUTS_END};
static const struct node_output_def ckpt_out[] = {{.type = "MODEL"}, {.type = "CLIP"}, {.type = "VAE"},
                                                  NODE_OUTPUTS_END};
static const struct node_input_def clip_in[] = {{.name = "text", .type = "STRING"},
                                                {.name = "clip", .type = "CLIP"}, NODE_INPUTS_END};
static const struct node_output_def cond_out[] = {{.type = "CONDITIONING"}, NODE_OUTPUTS_END};
static const struct node_input_def latent_in[] = {{.name = "width", .type = "INT"},
                                                  {.name = "height", .type = "INT"},
                                                  {.name = "batch_size", .type = "INT"}, NODE_INPUTS_END};
static const struct node_output_def latent_out[] = {{.type = "LATENT"}, NODE_OUTPUTS_END};
static const struct node_input_def ks_in[] = {
    {.name = "model", .type = "MODEL"},          {.name = "seed", .type = "INT", .max = NODE_U64_MAX},
    {.name = "steps", .type = "INT"},            {.name = "cfg", .type = "FLOAT"},
    {.name = "sampler_name", .type = "STRING"},  {.name = "scheduler", .type = "STRING"},
    {.name = "positive", .type = "CONDITIONING"}, {.name = "negative", .type = "CONDITIONING"},
    {.name = "latent_image", .type = "LATENT"},  {.name = "denoise", .type = "FLOAT"},
    NODE_INPUTS_END};
static const struct node_input_def vae_in[] = {{.name = "samples", .type = "LATENT"},
                                               {.name = "vae", .type = "VAE"}, NODE_INPUTS_END};
static const struct node_output_def image_out[] = {{.type = "IMAGE"}, NODE_OUTPUTS_END};
static const struct node_input_def save_in[] = {{.name = "images", .type = "IMAGE"},
                                                {.name = "filename_prefix", .type = "STRING"},
                                                NODE_INPUTS_END};
static const struct node_class s_ckpt = {.name = "T_CheckpointLoaderSimple", .inputs = ckpt_in,
                                         .outputs = ckpt_out, .run = standin_run};
static const struct node_class s_clip = {.name = "T_CLIPTextEncode", .inputs = clip_in,
                                         .outputs = cond_out, .run = standin_run};
static const struct node_class s_latent = {.name = "T_EmptyLatentImage", .inputs = latent_in,
                                           .outputs = latent_out, .run = standin_run};
static const struct node_class s_ks = {.name = "T_KSampler", .inputs = ks_in, .outputs = latent_out,
                                       .run = standin_run};
static const struct node_class s_vae = {.name = "T_VAEDecode", .inputs = vae_in, .outputs = image_out,
                                        .run = standin_run};
static const struct node_class s_save = {.name = "T_SaveImage", .flags = NODE_CLASS_OUTPUT,
                                         .inputs = save_in, .outputs = no_out, .run = standin_run};

static const struct node_class tintr = {.name = "TIntr", .category = "test", .inputs = tfail_in,
                                        .outputs = int_out, .run = tintr_run};
static const struct node_class tcc = {.name = "TCacheCount", .category = "test", .inputs = tfail_in,
                                      .outputs = int_out, .run = tcc_run};

static const struct node_class tfast = {.name = "TFast", .category = "test", .inputs = tfail_in,
                                        .outputs = int_out, .run = tfast_run};

static const struct node_class *const test_classes[] = {&tfast, &tintr, &tcc, &tcount, &tout, &tslow, &tfail, &tseed,
                                                        &s_ckpt, &s_clip, &s_latent, &s_ks, &s_vae,
                                                        &s_save};

static void register_test_nodes(struct graph_ctx *g)
{
    node_registry_add_all(graph_registry(g), test_classes, sizeof(test_classes) / sizeof(test_classes[0]));
}

/* ---- helpers -------------------------------------------------------------------------- */

/* JSON written with ' for " (readability). */
static char *jq(const char *s)
{
    char *d = strdup(s);
    for (char *p = d; *p; p++)
        if (*p == '\'')
            *p = '"';
    return d;
}

struct vres {
    int ok;
    char type[64], message[256], details[1024];
    cJSON *node_errors, *outputs, *prompt;
};

static void vres_release(struct vres *r)
{
    cJSON_Delete(r->node_errors);
    cJSON_Delete(r->outputs);
    cJSON_Delete(r->prompt);
}

static struct vres validate_text(struct graph_ctx *g, const char *text_q)
{
    struct vres r = {0};
    char *text = jq(text_q);
    r.prompt = graph_json_parse(text, strlen(text));
    free(text);
    if (!r.prompt) {
        snprintf(r.type, sizeof(r.type), "parse_error");
        return r;
    }
    struct graph_validation v;
    graph_validate(g, r.prompt, &v);
    r.ok = v.ok;
    if (v.error) {
        snprintf(r.type, sizeof(r.type), "%s", cJSON_GetObjectItem(v.error, "type")->valuestring);
        snprintf(r.message, sizeof(r.message), "%s", cJSON_GetObjectItem(v.error, "message")->valuestring);
        snprintf(r.details, sizeof(r.details), "%s", cJSON_GetObjectItem(v.error, "details")->valuestring);
    }
    r.node_errors = v.node_errors;
    r.outputs = v.outputs;
    v.node_errors = v.outputs = NULL;
    graph_validation_release(&v);
    return r;
}

/* The first error of node `id` (or NULL). */
static const cJSON *node_err(const struct vres *r, const char *id)
{
    const cJSON *n = cJSON_GetObjectItem(r->node_errors, id);
    return n ? cJSON_GetArrayItem(cJSON_GetObjectItem(n, "errors"), 0) : NULL;
}

static const char *estr(const cJSON *e, const char *key)
{
    const cJSON *v = e ? cJSON_GetObjectItem(e, key) : NULL;
    return cJSON_IsString(v) ? v->valuestring : "(missing)";
}

/* ---- the validation corpus -------------------------------------------------------------- */

#define BASE1 "'1': {'class_type': 'EmptyImage', 'inputs': {'width': 8, 'height': 8, 'batch_size': 1, 'color': 0}}"
#define INV2 "'2': {'class_type': 'ImageInvert', 'inputs': {'image': ['1', 0]}}"
#define SAVE9 "'9': {'class_type': 'SaveImage', 'inputs': {'images': ['2', 0], 'filename_prefix': 't'}}"

struct vcase {
    const char *name;
    const char *prompt;
    int ok;
    const char *type;    /* top error type; NULL when ok */
    const char *message; /* top message, NULL = unchecked */
    const char *details; /* top details, NULL = unchecked */
    const char *node;    /* node with the (first) error, NULL = none */
    const char *etype, *emsg, *edetails;
};

static const struct vcase cases[] = {
    {"missing class_type", "{'1': {'inputs': {}}}", 0, "invalid_prompt",
     "Cannot execute because a node is missing the class_type property.", "Node ID '#1'"},
    {"node not an object", "{'1': 5}", 0, "invalid_prompt",
     "Cannot execute because a node is missing the class_type property.", "Node ID '#1'"},
    {"unknown class", "{'7': {'class_type': 'Nope', 'inputs': {}}}", 0, "invalid_prompt",
     "Cannot execute because node Nope does not exist.", "Node ID '#7'"},
    {"numeric class_type", "{'7': {'class_type': 5, 'inputs': {}}}", 0, "invalid_prompt",
     "Cannot execute because node 5 does not exist.", "Node ID '#7'"},
    {"unknown class after a good node", "{" BASE1 ", '3': {'class_type': 'KSamplerX'}}", 0, "invalid_prompt",
     "Cannot execute because node KSamplerX does not exist.", "Node ID '#3'"},
    {"prompt not an object", "[1, 2]", 0, "invalid_prompt", NULL, ""},
    {"empty prompt", "{}", 0, "prompt_no_outputs", "Prompt has no outputs", ""},
    {"no output node", "{" BASE1 ", " INV2 "}", 0, "prompt_no_outputs", "Prompt has no outputs", ""},
    {"required input missing", "{" BASE1 ", '9': {'class_type': 'SaveImage', 'inputs': {'filename_prefix': 'x'}}}",
     0, "prompt_outputs_failed_validation", "Prompt outputs failed validation",
     "Required input is missing: images", "9", "required_input_missing", "Required input is missing", "images"},
    {"required widget missing upstream", "{'1': {'class_type': 'EmptyImage', 'inputs': {'width': 8, 'height': 8, 'batch_size': 1}}, " INV2 ", " SAVE9 "}",
     0, "prompt_outputs_failed_validation", NULL, "", "1", "required_input_missing", NULL, "color"},
    {"link to missing node (output)", "{'9': {'class_type': 'SaveImage', 'inputs': {'images': ['99', 0], 'filename_prefix': 'x'}}}",
     0, "prompt_outputs_failed_validation", NULL, "Exception when validating node: '99'", "9",
     "exception_during_validation", "Exception when validating node", "'99'"},
    {"link to missing node (inner)", "{'2': {'class_type': 'ImageInvert', 'inputs': {'image': ['99', 0]}}, " SAVE9 "}",
     0, "prompt_outputs_failed_validation", NULL, "", "2", "exception_during_inner_validation",
     "Exception when validating inner node", "'99'"},
    {"numeric node id in link", "{'9': {'class_type': 'SaveImage', 'inputs': {'images': [1, 0], 'filename_prefix': 'x'}}, " BASE1 "}",
     0, "prompt_outputs_failed_validation", NULL, NULL, "9", "exception_during_validation", NULL, "1"},
    {"link index out of range", "{" BASE1 ", '9': {'class_type': 'SaveImage', 'inputs': {'images': ['1', 3], 'filename_prefix': 'x'}}}",
     0, "prompt_outputs_failed_validation", NULL, NULL, "9", "exception_during_validation", NULL,
     "tuple index out of range"},
    {"link index is a string", "{" BASE1 ", '9': {'class_type': 'SaveImage', 'inputs': {'images': ['1', '0'], 'filename_prefix': 'x'}}}",
     0, "prompt_outputs_failed_validation", NULL, NULL, "9", "exception_during_validation", NULL,
     "tuple indices must be integers or slices, not str"},
    {"link index is a float", "{" BASE1 ", '9': {'class_type': 'SaveImage', 'inputs': {'images': ['1', 0.5], 'filename_prefix': 'x'}}}",
     0, "prompt_outputs_failed_validation", NULL, NULL, "9", "exception_during_validation", NULL,
     "tuple indices must be integers or slices, not float"},
    {"link index negative (Python indexing)", "{" BASE1 ", '9': {'class_type': 'SaveImage', 'inputs': {'images': ['1', -1], 'filename_prefix': 'x'}}}",
     1},
    {"link id is a list", "{" BASE1 ", '9': {'class_type': 'SaveImage', 'inputs': {'images': [['1'], 0], 'filename_prefix': 'x'}}}",
     0, "prompt_outputs_failed_validation", NULL, NULL, "9", "exception_during_validation", NULL,
     "unhashable type: 'list'"},
    {"link of length 1", "{" BASE1 ", '9': {'class_type': 'SaveImage', 'inputs': {'images': ['1'], 'filename_prefix': 'x'}}}",
     0, "prompt_outputs_failed_validation", NULL, NULL, "9", "bad_linked_input",
     "Bad linked input, must be a length-2 list of [node_id, slot_index]", "images"},
    {"link of length 3", "{" BASE1 ", '9': {'class_type': 'SaveImage', 'inputs': {'images': ['1', 0, 0], 'filename_prefix': 'x'}}}",
     0, "prompt_outputs_failed_validation", NULL, NULL, "9", "bad_linked_input", NULL, "images"},
    {"wrong link type", "{'1': {'class_type': 'PrimitiveInt', 'inputs': {'value': 3}}, '9': {'class_type': 'SaveImage', 'inputs': {'images': ['1', 0], 'filename_prefix': 'x'}}}",
     0, "prompt_outputs_failed_validation", NULL, NULL, "9", "return_type_mismatch",
     "Return type mismatch between linked nodes", "images, received_type(INT) mismatch input_type(IMAGE)"},
    {"INT below min", "{'1': {'class_type': 'EmptyImage', 'inputs': {'width': 0, 'height': 8, 'batch_size': 1, 'color': 0}}, " INV2 ", " SAVE9 "}",
     0, "prompt_outputs_failed_validation", NULL, "", "1", "value_smaller_than_min", "Value 0 smaller than min of 1", "width"},
    {"INT above max", "{'1': {'class_type': 'EmptyImage', 'inputs': {'width': 20000, 'height': 8, 'batch_size': 1, 'color': 0}}, " INV2 ", " SAVE9 "}",
     0, "prompt_outputs_failed_validation", NULL, "", "1", "value_bigger_than_max", "Value 20000 bigger than max of 16384", "width"},
    {"FLOAT below min", "{" BASE1 ", '2': {'class_type': 'ImageScaleBy', 'inputs': {'image': ['1', 0], 'upscale_method': 'area', 'scale_by': 0.001}}, " SAVE9 "}",
     0, "prompt_outputs_failed_validation", NULL, "", "2", "value_smaller_than_min", "Value 0.001 smaller than min of 0.01", "scale_by"},
    {"FLOAT above max (int given)", "{" BASE1 ", '2': {'class_type': 'ImageScaleBy', 'inputs': {'image': ['1', 0], 'upscale_method': 'area', 'scale_by': 9}}, " SAVE9 "}",
     0, "prompt_outputs_failed_validation", NULL, "", "2", "value_bigger_than_max", "Value 9.0 bigger than max of 8.0", "scale_by"},
    {"FLOAT 'inf' string", "{" BASE1 ", '2': {'class_type': 'ImageScaleBy', 'inputs': {'image': ['1', 0], 'upscale_method': 'area', 'scale_by': 'inf'}}, " SAVE9 "}",
     0, "prompt_outputs_failed_validation", NULL, "", "2", "value_bigger_than_max", "Value inf bigger than max of 8.0", "scale_by"},
    {"FLOAT '-Infinity' string", "{" BASE1 ", '2': {'class_type': 'ImageScaleBy', 'inputs': {'image': ['1', 0], 'upscale_method': 'area', 'scale_by': '-Infinity'}}, " SAVE9 "}",
     0, "prompt_outputs_failed_validation", NULL, "", "2", "value_smaller_than_min", "Value -inf smaller than min of 0.01", "scale_by"},
    {"FLOAT 'NaN' string passes the bounds", "{" BASE1 ", '2': {'class_type': 'ImageScaleBy', 'inputs': {'image': ['1', 0], 'upscale_method': 'area', 'scale_by': 'NaN'}}, " SAVE9 "}",
     1},
    {"FLOAT not a number", "{" BASE1 ", '2': {'class_type': 'ImageScaleBy', 'inputs': {'image': ['1', 0], 'upscale_method': 'area', 'scale_by': 'abc'}}, " SAVE9 "}",
     0, "prompt_outputs_failed_validation", NULL, "", "2", "invalid_input_type",
     "Failed to convert an input value to a FLOAT value", "scale_by, abc, could not convert string to float: 'abc'"},
    {"FLOAT null", "{" BASE1 ", '2': {'class_type': 'ImageScaleBy', 'inputs': {'image': ['1', 0], 'upscale_method': 'area', 'scale_by': null}}, " SAVE9 "}",
     0, "prompt_outputs_failed_validation", NULL, "", "2", "invalid_input_type", NULL,
     "scale_by, None, float() argument must be a string or a real number, not 'NoneType'"},
    {"not in list", "{" BASE1 ", '2': {'class_type': 'ImageScale', 'inputs': {'image': ['1', 0], 'upscale_method': 'nope', 'width': 4, 'height': 4, 'crop': 'disabled'}}, " SAVE9 "}",
     0, "prompt_outputs_failed_validation", NULL, "", "2", "value_not_in_list", "Value not in list",
     "upscale_method: 'nope' not in ['nearest-exact', 'bilinear', 'area', 'bicubic', 'lanczos']"},
    {"number for a combo", "{" BASE1 ", '2': {'class_type': 'ImageScale', 'inputs': {'image': ['1', 0], 'upscale_method': 'area', 'width': 4, 'height': 4, 'crop': 1}}, " SAVE9 "}",
     0, "prompt_outputs_failed_validation", NULL, "", "2", "value_not_in_list", "Value not in list",
     "crop: '1' not in ['disabled', 'center']"},
    {"INT from a word", "{'1': {'class_type': 'EmptyImage', 'inputs': {'width': 'abc', 'height': 8, 'batch_size': 1, 'color': 0}}, " INV2 ", " SAVE9 "}",
     0, "prompt_outputs_failed_validation", NULL, "", "1", "invalid_input_type",
     "Failed to convert an input value to a INT value", "width, abc, invalid literal for int() with base 10: 'abc'"},
    {"INT from '1.5'", "{'1': {'class_type': 'EmptyImage', 'inputs': {'width': '1.5', 'height': 8, 'batch_size': 1, 'color': 0}}, " INV2 ", " SAVE9 "}",
     0, "prompt_outputs_failed_validation", NULL, "", "1", "invalid_input_type", NULL,
     "width, 1.5, invalid literal for int() with base 10: '1.5'"},
    {"INT from null", "{'1': {'class_type': 'EmptyImage', 'inputs': {'width': null, 'height': 8, 'batch_size': 1, 'color': 0}}, " INV2 ", " SAVE9 "}",
     0, "prompt_outputs_failed_validation", NULL, "", "1", "invalid_input_type", NULL,
     "width, None, int() argument must be a string, a bytes-like object or a real number, not 'NoneType'"},
    {"INT from an object", "{'1': {'class_type': 'EmptyImage', 'inputs': {'width': {'a': 1}, 'height': 8, 'batch_size': 1, 'color': 0}}, " INV2 ", " SAVE9 "}",
     0, "prompt_outputs_failed_validation", NULL, "", "1", "invalid_input_type", NULL,
     "width, {'a': 1}, int() argument must be a string, a bytes-like object or a real number, not 'dict'"},
    {"INT from 'NaN'", "{'1': {'class_type': 'EmptyImage', 'inputs': {'width': 'NaN', 'height': 8, 'batch_size': 1, 'color': 0}}, " INV2 ", " SAVE9 "}",
     0, "prompt_outputs_failed_validation", NULL, "", "1", "invalid_input_type", NULL,
     "width, NaN, invalid literal for int() with base 10: 'NaN'"},
    {"INT from ' 16 ' is accepted", "{'1': {'class_type': 'EmptyImage', 'inputs': {'width': ' 16 ', 'height': '8', 'batch_size': true, 'color': 0.9}}, " INV2 ", " SAVE9 "}",
     1},
    {"INT beyond 64 bits", "{'1': {'class_type': 'PrimitiveInt', 'inputs': {'value': 99999999999999999999999}}, '9': {'class_type': 'TOut', 'inputs': {'v': ['1', 0]}}}",
     0, "prompt_outputs_failed_validation", NULL, "", "1", "value_bigger_than_max",
     "Value 99999999999999999999999 bigger than max of 9223372036854775807", "value"},
    {"seed at 2^64-1 is exact", "{'1': {'class_type': 'TSeed', 'inputs': {'seed': 18446744073709551615}}, '9': {'class_type': 'TOut', 'inputs': {'v': ['1', 0]}}}",
     1},
    {"seed at 2^64", "{'1': {'class_type': 'TSeed', 'inputs': {'seed': 18446744073709551616}}, '9': {'class_type': 'TOut', 'inputs': {'v': ['1', 0]}}}",
     0, "prompt_outputs_failed_validation", NULL, "", "1", "value_bigger_than_max",
     "Value 18446744073709551616 bigger than max of 18446744073709551615", "seed"},
    {"negative seed", "{'1': {'class_type': 'TSeed', 'inputs': {'seed': -1}}, '9': {'class_type': 'TOut', 'inputs': {'v': ['1', 0]}}}",
     0, "prompt_outputs_failed_validation", NULL, "", "1", "value_smaller_than_min", "Value -1 smaller than min of 0", "seed"},
    {"cycle of two nodes", "{'2': {'class_type': 'ImageInvert', 'inputs': {'image': ['3', 0]}}, '3': {'class_type': 'ImageInvert', 'inputs': {'image': ['2', 0]}}, " SAVE9 "}",
     0, "prompt_outputs_failed_validation", NULL, "", "3", "exception_during_validation",
     "Exception when validating node", "Dependency cycle detected"},
    {"self loop", "{'2': {'class_type': 'ImageInvert', 'inputs': {'image': ['2', 0]}}, " SAVE9 "}",
     0, "prompt_outputs_failed_validation", NULL, "", "2", "exception_during_validation", NULL,
     "Dependency cycle detected"},
    {"inputs missing", "{'9': {'class_type': 'SaveImage'}}", 0, "prompt_outputs_failed_validation", NULL,
     "Exception when validating node: 'inputs'", "9", "exception_during_validation", NULL, "'inputs'"},
    {"inputs is a number", "{'9': {'class_type': 'SaveImage', 'inputs': 5}}", 0,
     "prompt_outputs_failed_validation", NULL, NULL, "9", "exception_during_validation", NULL,
     "argument of type 'int' is not iterable"},
    {"inputs is a list", "{'9': {'class_type': 'SaveImage', 'inputs': [1]}}", 0,
     "prompt_outputs_failed_validation", NULL, NULL, "9", "required_input_missing", NULL, "images"},
    {"missing image file", "{'1': {'class_type': 'LoadImage', 'inputs': {'image': 'missing.png'}}, '9': {'class_type': 'SaveImage', 'inputs': {'images': ['1', 0], 'filename_prefix': 'x'}}}",
     0, "prompt_outputs_failed_validation", NULL, "", "1", "custom_validation_failed",
     "Custom validation failed for node", "image - Invalid image file: missing.png"},
    {"image path escaping input", "{'1': {'class_type': 'LoadImage', 'inputs': {'image': '../secret.png'}}, '9': {'class_type': 'SaveImage', 'inputs': {'images': ['1', 0], 'filename_prefix': 'x'}}}",
     0, "prompt_outputs_failed_validation", NULL, "", "1", "custom_validation_failed", NULL,
     "image - Invalid image file: ../secret.png"},
    {"__value__ wrapper unwrapped", "{'1': {'class_type': 'EmptyImage', 'inputs': {'width': {'__value__': 8}, 'height': 8, 'batch_size': 1, 'color': 0}}, " INV2 ", " SAVE9 "}",
     1},
    {"extra unknown inputs ignored", "{" BASE1 ", '2': {'class_type': 'ImageInvert', 'inputs': {'image': ['1', 0], 'bogus': ['77', 0]}}, " SAVE9 "}",
     1},
    {"unreachable broken node ignored", "{" BASE1 ", " INV2 ", " SAVE9 ", '5': {'class_type': 'ImageInvert', 'inputs': {'image': ['404', 0]}}}",
     1},
};

static void test_corpus(struct graph_ctx *g)
{
    size_t n = sizeof(cases) / sizeof(cases[0]);
    ok(n >= 40, "corpus has %zu malformed/edge prompts", n);
    for (size_t i = 0; i < n; i++) {
        const struct vcase *c = &cases[i];
        struct vres r = validate_text(g, c->prompt);
        ok(r.ok == c->ok, "[%s] ok=%d (got %d; %s: %s)", c->name, c->ok, r.ok, r.type, r.details);
        if (c->type)
            ok(!strcmp(r.type, c->type), "[%s] type %s (got %s)", c->name, c->type, r.type);
        if (c->message)
            ok(!strcmp(r.message, c->message), "[%s] message \"%s\" (got \"%s\")", c->name, c->message, r.message);
        if (c->details)
            ok(!strcmp(r.details, c->details), "[%s] details \"%s\" (got \"%s\")", c->name, c->details, r.details);
        if (c->node) {
            const cJSON *e = node_err(&r, c->node);
            const cJSON *ne = cJSON_GetObjectItem(r.node_errors, c->node);
            ok(e != NULL, "[%s] node_errors has node %s", c->name, c->node);
            if (c->etype)
                ok(!strcmp(estr(e, "type"), c->etype), "[%s] node error type %s (got %s)", c->name, c->etype,
                   estr(e, "type"));
            if (c->emsg)
                ok(!strcmp(estr(e, "message"), c->emsg), "[%s] node error message \"%s\" (got \"%s\")", c->name,
                   c->emsg, estr(e, "message"));
            if (c->edetails)
                ok(!strcmp(estr(e, "details"), c->edetails), "[%s] node error details \"%s\" (got \"%s\")",
                   c->name, c->edetails, estr(e, "details"));
            ok(ne && cJSON_IsString(cJSON_GetObjectItem(ne, "class_type")) &&
                   cJSON_IsArray(cJSON_GetObjectItem(ne, "dependent_outputs")),
               "[%s] node error entry has class_type and dependent_outputs", c->name);
        } else if (c->type && strcmp(c->type, "prompt_outputs_failed_validation")) {
            ok(cJSON_GetArraySize(r.node_errors) == 0, "[%s] node_errors is empty", c->name);
        }
        vres_release(&r);
    }
}

/* Details that need a look at the whole response. */
static void test_validation_details(struct graph_ctx *g)
{
    /* Coercion written back with Python semantics. */
    struct vres r = validate_text(g,
        "{'1': {'class_type': 'EmptyImage', 'inputs': {'width': ' 16 ', 'height': 8.9, 'batch_size': true, 'color': '0'}},"
        " '2': {'class_type': 'ImageScaleBy', 'inputs': {'image': ['1', 0], 'upscale_method': 'area', 'scale_by': 2}},"
        " '3': {'class_type': 'PrimitiveString', 'inputs': {'value': 5}},"
        " '4': {'class_type': 'PrimitiveBoolean', 'inputs': {'value': 'false'}},"
        " '5': {'class_type': 'PrimitiveString', 'inputs': {'value': null}},"
        " '6': {'class_type': 'PrimitiveString', 'inputs': {'value': true}},"
        " '9': {'class_type': 'SaveImage', 'inputs': {'images': ['2', 0], 'filename_prefix': 'x'}},"
        " '10': {'class_type': 'TOut', 'inputs': {'v': ['11', 0]}},"
        " '11': {'class_type': 'TCount', 'inputs': {'x': 1, 'a': ['12', 0]}},"
        " '12': {'class_type': 'PrimitiveInt', 'inputs': {'value': '7'}},"
        " '13': {'class_type': 'PrimitiveInt', 'inputs': {'value': 'unreachable'}}}");
    ok(r.ok, "coercion prompt is valid");
    char *p = cJSON_PrintUnformatted(r.prompt);
    ok(strstr(p, "\"width\":16,") != NULL, "' 16 ' coerced to 16");
    ok(strstr(p, "\"height\":8,") != NULL, "8.9 truncated to 8");
    ok(strstr(p, "\"batch_size\":1,") != NULL, "true coerced to 1");
    ok(strstr(p, "\"color\":0}") != NULL, "'0' coerced to 0");
    ok(strstr(p, "\"scale_by\":2.0}") != NULL, "FLOAT 2 written back as 2.0");
    ok(strstr(p, "\"12\":{\"class_type\":\"PrimitiveInt\",\"inputs\":{\"value\":7}") != NULL, "'7' -> 7 on a linked primitive");
    ok(strstr(p, "\"value\":\"unreachable\"") != NULL, "unreachable nodes are not coerced");
    ok(strstr(p, "\"value\":5}") != NULL, "unreachable PrimitiveString left alone");
    free(p);
    vres_release(&r);

    /* str()/bool() coercion when reachable. */
    r = validate_text(g, "{'3': {'class_type': 'PrimitiveString', 'inputs': {'value': 5}},"
                         " '4': {'class_type': 'PrimitiveBoolean', 'inputs': {'value': 'false'}},"
                         " '5': {'class_type': 'PrimitiveString', 'inputs': {'value': null}},"
                         " '6': {'class_type': 'PrimitiveFloat', 'inputs': {'value': 1.5}},"
                         " '9': {'class_type': 'TStr', 'inputs': {}}}");
    vres_release(&r);

    /* Partial success: one good output, one bad; 200 with node_errors. */
    r = validate_text(g, "{" BASE1 ", " INV2 ", " SAVE9 ", '12': {'class_type': 'LoadImage', 'inputs': {'image': 'missing.png'}},"
                         " '11': {'class_type': 'PreviewImage', 'inputs': {'images': ['12', 0]}}}");
    ok(r.ok, "partial success is ok");
    ok(cJSON_GetArraySize(r.outputs) == 1 && !strcmp(cJSON_GetArrayItem(r.outputs, 0)->valuestring, "9"),
       "only the good output is queued");
    const cJSON *ne = cJSON_GetObjectItem(r.node_errors, "12");
    char *s = cJSON_PrintUnformatted(ne);
    EXPECT_STR(s, "{\"errors\":[{\"type\":\"custom_validation_failed\",\"message\":\"Custom validation failed for node\","
                  "\"details\":\"image - Invalid image file: missing.png\",\"extra_info\":{\"input_name\":\"image\"}}],"
                  "\"dependent_outputs\":[\"11\"],\"class_type\":\"LoadImage\"}");
    free(s);
    vres_release(&r);

    /* Two outputs sharing a failing ancestor: both are dependent outputs. */
    r = validate_text(g, "{'1': {'class_type': 'EmptyImage', 'inputs': {'width': 0, 'height': 8, 'batch_size': 1, 'color': 0}},"
                         " 'a': {'class_type': 'SaveImage', 'inputs': {'images': ['1', 0], 'filename_prefix': 'x'}},"
                         " 'b': {'class_type': 'PreviewImage', 'inputs': {'images': ['1', 0]}}}");
    ok(!r.ok, "shared failing ancestor fails both outputs");
    s = cJSON_PrintUnformatted(cJSON_GetObjectItem(cJSON_GetObjectItem(r.node_errors, "1"), "dependent_outputs"));
    EXPECT_STR(s, "[\"a\",\"b\"]");
    free(s);
    ok(cJSON_GetArraySize(r.node_errors) == 1, "outputs invalid only through an ancestor are not listed");
    /* extra_info of a range error. */
    s = cJSON_PrintUnformatted(cJSON_GetObjectItem(node_err(&r, "1"), "extra_info"));
    EXPECT_STR(s, "{\"input_name\":\"width\",\"input_config\":[\"INT\",{\"default\":512,\"min\":1,\"max\":16384,"
                  "\"step\":1}],\"received_value\":0}");
    free(s);
    vres_release(&r);

    /* The inner-exception quirk: recorded on the source with the downstream link. */
    r = validate_text(g, "{'2': {'class_type': 'ImageInvert', 'inputs': {'image': ['99', 0]}}, " SAVE9 "}");
    s = cJSON_PrintUnformatted(cJSON_GetObjectItem(node_err(&r, "2"), "extra_info"));
    EXPECT_STR(s, "{\"input_name\":\"images\",\"input_config\":[\"IMAGE\",{\"tooltip\":\"The images to save.\"}],"
                  "\"exception_message\":\"'99'\",\"exception_type\":\"KeyError\",\"traceback\":[],"
                  "\"linked_node\":[\"2\",0]}");
    free(s);
    vres_release(&r);

    /* partial_execution_targets. */
    char *t = jq("{" BASE1 ", " INV2 ", " SAVE9 ", '11': {'class_type': 'PreviewImage', 'inputs': {'images': ['2', 0]}}}");
    cJSON *prompt = cJSON_Parse(t);
    free(t);
    cJSON *targets = cJSON_Parse("[\"11\"]");
    struct graph_validation v;
    graph_validate_targets(g, prompt, targets, &v);
    s = cJSON_PrintUnformatted(v.outputs);
    EXPECT_STR(s, "[\"11\"]");
    free(s);
    graph_validation_release(&v);
    cJSON_Delete(targets);
    targets = cJSON_Parse("[\"1\"]");
    graph_validate_targets(g, prompt, targets, &v);
    EXPECT_STR(cJSON_GetObjectItem(v.error, "type")->valuestring, "prompt_no_outputs");
    graph_validation_release(&v);
    cJSON_Delete(targets);
    cJSON_Delete(prompt);

    /* Big integers survive parse -> validate -> print exactly. */
    r = validate_text(g, "{'1': {'class_type': 'TSeed', 'inputs': {'seed': 18446744073709551615}}, '9': {'class_type': 'TOut', 'inputs': {'v': ['1', 0]}}}");
    s = cJSON_PrintUnformatted(r.prompt);
    ok(strstr(s, "\"seed\":18446744073709551615}") != NULL, "seed 2^64-1 printed exactly (%s)", s);
    free(s);
    vres_release(&r);
}

/* Deeply nested values: cJSON's depth limit rejects absurd nesting at parse time;
 * what parses is validated without trouble. Bare NaN is not JSON. */
static void test_nesting(struct graph_ctx *g)
{
    struct buf b;
    buf_init(&b);
    for (int depth = 500; depth <= 5000; depth += 4500) {
        buf_reset(&b);
        buf_adds(&b, "{\"1\": {\"class_type\": \"PrimitiveString\", \"inputs\": {\"value\": {\"__value__\": ");
        for (int i = 0; i < depth; i++)
            buf_addc(&b, '[');
        for (int i = 0; i < depth; i++)
            buf_addc(&b, ']');
        buf_adds(&b, "}}}, \"9\": {\"class_type\": \"TOut\", \"inputs\": {\"v\": 1}}}");
        cJSON *p = graph_json_parse(b.ptr, b.len);
        if (depth == 500) {
            struct graph_validation v;
            ok(p != NULL, "500-deep value parses");
            graph_validate(g, p, &v);
            ok(v.ok, "500-deep value validates (str() of it)");
            graph_validation_release(&v);
        } else {
            ok(p == NULL, "5000-deep value is a parse error, not a crash");
        }
        cJSON_Delete(p);
    }
    buf_release(&b);
    const char *nan = "{\"1\": {\"class_type\": \"PrimitiveFloat\", \"inputs\": {\"value\": NaN}}}";
    ok(graph_json_parse(nan, strlen(nan)) == NULL, "bare NaN literal is a JSON error");
}

/* Huge and deep graphs validate without recursion and without crashing. */
static void test_huge(struct graph_ctx *g)
{
    int N = 100000;
    cJSON *p = cJSON_CreateObject();
    char id[32], src[32];
    cJSON *n0 = cJSON_AddObjectToObject(p, "0");
    cJSON_AddStringToObject(n0, "class_type", "TCount");
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(n0, "inputs"), "x", 1);
    for (int i = 1; i < N; i++) {
        snprintf(id, sizeof(id), "%d", i);
        snprintf(src, sizeof(src), "%d", i - 1);
        cJSON *n = cJSON_AddObjectToObject(p, id);
        cJSON_AddStringToObject(n, "class_type", "TCount");
        cJSON *in = cJSON_AddObjectToObject(n, "inputs");
        cJSON_AddNumberToObject(in, "x", 1);
        cJSON *l = cJSON_AddArrayToObject(in, "a");
        cJSON_AddItemToArray(l, cJSON_CreateString(src));
        cJSON_AddItemToArray(l, cJSON_CreateNumber(0));
    }
    cJSON *o = cJSON_AddObjectToObject(p, "out");
    cJSON_AddStringToObject(o, "class_type", "TOut");
    snprintf(src, sizeof(src), "%d", N - 1);
    cJSON *l = cJSON_AddArrayToObject(cJSON_AddObjectToObject(o, "inputs"), "v");
    cJSON_AddItemToArray(l, cJSON_CreateString(src));
    cJSON_AddItemToArray(l, cJSON_CreateNumber(0));
    struct graph_validation v;
    graph_validate(g, p, &v);
    ok(v.ok, "100k-node chain validates");
    graph_validation_release(&v);
    /* Close the chain into a cycle: 0 <- N-1. */
    l = cJSON_AddArrayToObject(cJSON_GetObjectItem(cJSON_GetObjectItem(p, "0"), "inputs"), "a");
    cJSON_AddItemToArray(l, cJSON_CreateString(src));
    cJSON_AddItemToArray(l, cJSON_CreateNumber(0));
    graph_validate(g, p, &v);
    ok(!v.ok && cJSON_GetArraySize(v.node_errors) == 1, "100k-node cycle is reported, not overflowed");
    graph_validation_release(&v);
    /* Execute the 100k chain (after removing the cycle). */
    cJSON_DeleteItemFromObject(cJSON_GetObjectItem(cJSON_GetObjectItem(p, "0"), "inputs"), "a");
    graph_validate(g, p, &v);
    struct sink s = {0};
    struct graph_job job = {.prompt_id = "huge", .prompt = p, .outputs_to_execute = v.outputs};
    struct graph_result r;
    log_reset();
    graph_execute(g, &job, NULL, &r);
    ok(r.status == GRAPH_STATUS_SUCCESS && run_count == N + 1, "100k-node chain runs every node once (%d)", run_count);
    graph_result_release(&r);
    graph_validation_release(&v);
    sink_clear(&s);
    cJSON_Delete(p);
    graph_free_memory(g, 0, 1);

    /* Many failing outputs over one long failing chain: bounded work. */
    p = cJSON_CreateObject();
    n0 = cJSON_AddObjectToObject(p, "0");
    cJSON_AddStringToObject(n0, "class_type", "TCount");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(n0, "inputs"), "x", "not a number");
    int M = 5000;
    for (int i = 1; i < M; i++) {
        snprintf(id, sizeof(id), "%d", i);
        snprintf(src, sizeof(src), "%d", i - 1);
        cJSON *n = cJSON_AddObjectToObject(p, id);
        cJSON_AddStringToObject(n, "class_type", "TCount");
        cJSON *in = cJSON_AddObjectToObject(n, "inputs");
        cJSON_AddNumberToObject(in, "x", 1);
        cJSON *ln = cJSON_AddArrayToObject(in, "a");
        cJSON_AddItemToArray(ln, cJSON_CreateString(src));
        cJSON_AddItemToArray(ln, cJSON_CreateNumber(0));
    }
    snprintf(src, sizeof(src), "%d", M - 1);
    for (int i = 0; i < M; i++) {
        snprintf(id, sizeof(id), "o%d", i);
        cJSON *n = cJSON_AddObjectToObject(p, id);
        cJSON_AddStringToObject(n, "class_type", "TOut");
        cJSON *ln = cJSON_AddArrayToObject(cJSON_AddObjectToObject(n, "inputs"), "v");
        cJSON_AddItemToArray(ln, cJSON_CreateString(src));
        cJSON_AddItemToArray(ln, cJSON_CreateNumber(0));
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    graph_validate(g, p, &v);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const cJSON *deps = cJSON_GetObjectItem(cJSON_GetObjectItem(v.node_errors, "0"), "dependent_outputs");
    ok(!v.ok && cJSON_GetArraySize(v.node_errors) == 1 && cJSON_GetArraySize(deps) > 0,
       "5000 failing outputs over a 5000-node failing chain: one node error, %d dependents listed, %.2f s",
       cJSON_GetArraySize(deps), (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
    graph_validation_release(&v);
    cJSON_Delete(p);
}

/* ---- random prompts: validation and execution never crash -------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static unsigned rnd(unsigned n)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (unsigned)(rng_state >> 33) % n;
}

static const char *const fuzz_classes[] = {
    "EmptyImage", "ImageInvert", "ImageScale", "ImageScaleBy", "ImageCrop", "ImagePadForOutpaint",
    "ImageBatch", "SaveImage", "PreviewImage", "PrimitiveInt", "PrimitiveFloat", "PrimitiveString",
    "TCount", "TOut", "LoadImage", "LoadImageMask"};
static const char *const fuzz_values[] = {
    "0", "1", "2", "3", "7", "64", "-1", "20000", "9223372036854775808", "18446744073709551615",
    "1e20", "0.5", "8.0", "9.5", "-0.0", "\"nan\"", "\"inf\"", "\"abc\"", "\" 3 \"", "\"2\"",
    "null", "true", "false", "{}", "{\"__value__\": 5}", "{\"__value__\": [1, 2]}", "[]", "[1]",
    "[1, 2, 3]", "\"nearest-exact\"", "\"lanczos\"", "\"center\"", "\"disabled\"", "\"alpha\"",
    "\"in.png\"", "\"missing.png\"", "\"../x.png\"", "\"sub/%width%/p\""};
static const char *const fuzz_slots[] = {"0", "1", "2", "-1", "\"0\"", "0.5", "true", "null", "[0]"};

static void test_random_prompts(const struct tdirs *d)
{
    struct graph_ctx *g = tgraph_new(d, GRAPH_CACHE_CLASSIC, 0);
    register_test_nodes(g);
    G = g;
    /* LoadImage needs one real file. */
    char path[512];
    snprintf(path, sizeof(path), "%s/in.png", d->input);
    FILE *f = fopen(path, "wb");
    static const unsigned char png1x1[] = {
        0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
        0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
        0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0xf0,
        0x1f, 0x00, 0x05, 0x00, 0x01, 0xff, 0x89, 0x99, 0x3d, 0x1d, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45,
        0x4e, 0x44, 0xae, 0x42, 0x60, 0x82};
    fwrite(png1x1, 1, sizeof(png1x1), f);
    fclose(f);
    int n_valid = 0, n_ok = 0, n_err = 0, bad_rc = 0, n_linked_missing = 0;
    struct buf b;
    buf_init(&b);
    for (int it = 0; it < 1500; it++) {
        int nn = 2 + (int)rnd(7);
        buf_reset(&b);
        buf_addc(&b, '{');
        for (int i = 0; i < nn; i++) {
            const char *cls = fuzz_classes[rnd(sizeof(fuzz_classes) / sizeof(fuzz_classes[0]))];
            buf_printf(&b, "%s\"%d\": ", i ? ", " : "", i);
            if (rnd(60) == 0) {
                buf_adds(&b, "{\"inputs\": {}}");
                continue;
            }
            buf_printf(&b, "{\"class_type\": \"%s\", \"inputs\": ", cls);
            if (rnd(40) == 0) {
                buf_adds(&b, "7}");
                continue;
            }
            buf_addc(&b, '{');
            const struct node_class *k = node_registry_find(graph_registry(g), cls);
            int first = 1;
            for (int j = 0; k->inputs && k->inputs[j].name; j++) {
                if (k->inputs[j].group == NODE_INPUT_HIDDEN || rnd(12) == 0)
                    continue;
                buf_printf(&b, "%s\"%s\": ", first ? "" : ", ", k->inputs[j].name);
                first = 0;
                if (rnd(2) == 0)
                    buf_printf(&b, "[\"%u\", %s]", rnd((unsigned)nn + 2),
                               fuzz_slots[rnd(sizeof(fuzz_slots) / sizeof(fuzz_slots[0]))]);
                else
                    buf_adds(&b, fuzz_values[rnd(sizeof(fuzz_values) / sizeof(fuzz_values[0]))]);
            }
            buf_adds(&b, "}}");
        }
        buf_addc(&b, '}');
        cJSON *p = graph_json_parse(b.ptr, b.len);
        if (!p) {
            bad_rc++;
            continue;
        }
        struct graph_validation v;
        if (graph_validate(g, p, &v) < 0 || !v.node_errors || !v.outputs)
            bad_rc++;
        if (v.ok) {
            n_valid++;
            struct graph_job job = {.prompt_id = "fuzz", .prompt = p, .outputs_to_execute = v.outputs};
            struct graph_result r;
            if (graph_execute(g, &job, NULL, &r) < 0)
                bad_rc++;
            if (r.status == GRAPH_STATUS_ERROR) {
                const cJSON *dd = cJSON_GetArrayItem(cJSON_GetArrayItem(r.messages, 2), 1);
                n_linked_missing += strstr(estr(dd, "exception_message"), "missing output") != NULL;
                if (getenv("FUZZ_DEBUG"))
                    fprintf(stderr, "ERR %s %s\n", estr(dd, "node_type"), estr(dd, "exception_message"));
            }
            n_ok += r.status == GRAPH_STATUS_SUCCESS;
            n_err += r.status == GRAPH_STATUS_ERROR;
            graph_result_release(&r);
        } else if (!v.error) {
            bad_rc++;
        }
        graph_validation_release(&v);
        /* The same prompt executed without validation must not crash either. */
        if (it % 3 == 0) {
            cJSON *outs = cJSON_CreateArray();
            for (int i = 0; i < nn; i++) {
                char id[16];
                snprintf(id, sizeof(id), "%d", i);
                cJSON_AddItemToArray(outs, cJSON_CreateString(id));
            }
            struct graph_job job = {.prompt_id = "raw", .prompt = p, .outputs_to_execute = outs};
            struct graph_result r;
            if (graph_execute(g, &job, NULL, &r) < 0)
                bad_rc++;
            graph_result_release(&r);
            cJSON_Delete(outs);
        }
        cJSON_Delete(p);
    }
    buf_release(&b);
    ok(n_linked_missing == 0, "validated prompts never reach a node with a dangling link");
    ok(bad_rc == 0, "1500 random prompts: no internal errors (%d valid, %d ran, %d failed cleanly)", n_valid, n_ok,
       n_err);
    ok(n_valid > 20 && n_ok > 10, "the random corpus reaches execution (%d valid, %d ran)", n_valid, n_ok);
    graph_free(g);
}

/* ---- execution ---------------------------------------------------------------------- */

static int cmp_str_items(const void *a, const void *b)
{
    return strcmp((*(cJSON *const *)a)->string, (*(cJSON *const *)b)->string);
}

/* The default workflow with stand-in classes: ComfyUI's documented order. */
static void test_default_order(struct graph_ctx *g, const char *path)
{
    struct buf file;
    buf_init(&file);
    if (buf_read_file(&file, path) < 0) {
        ok(0, "cannot read %s", path);
        buf_release(&file);
        return;
    }
    const char *text = file.ptr;
    for (int variant = 0; variant < 2; variant++) {
        cJSON *p = cJSON_Parse(text);
        for (cJSON *n = p->child; n; n = n->next) {
            cJSON *ct = cJSON_GetObjectItem(n, "class_type");
            char name[128];
            snprintf(name, sizeof(name), "T_%s", ct->valuestring);
            cJSON_SetValuestring(ct, name);
            if (variant == 1) { /* script_examples: inputs sorted alphabetically */
                cJSON *in = cJSON_GetObjectItem(n, "inputs");
                int cnt = cJSON_GetArraySize(in);
                cJSON **items = malloc(sizeof(cJSON *) * (size_t)cnt);
                int k = 0;
                while (in->child)
                    items[k++] = cJSON_DetachItemViaPointer(in, in->child);
                qsort(items, (size_t)cnt, sizeof(*items), cmp_str_items);
                for (k = 0; k < cnt; k++)
                    cJSON_AddItemToObject(in, items[k]->string, items[k]);
                free(items);
            }
        }
        char *t = cJSON_PrintUnformatted(p);
        struct sink s = {0};
        log_reset();
        graph_free_memory(g, 0, 1);
        ok(trun(g, &s, "order", t, NULL, NULL) == GRAPH_STATUS_SUCCESS, "default workflow (stand-ins) runs");
        EXPECT_STR(run_log, variant ? "4,6,7,5,3,8,9" : "4,5,7,6,3,8,9");
        free(t);
        sink_clear(&s);
        cJSON_Delete(p);
    }
    buf_release(&file);
    graph_free_memory(g, 0, 1);
}

#define CHAIN "{'1': {'class_type': 'TCount', 'inputs': {'x': %d}}, " \
              "'2': {'class_type': 'TCount', 'inputs': {'x': %d, 'a': ['1', 0]}}, " \
              "'3': {'class_type': 'TCount', 'inputs': {'x': 100, 'a': ['2', 0]}}, " \
              "'4': {'class_type': 'TCount', 'inputs': {'x': 7}}, " \
              "'9': {'class_type': 'TOut', 'inputs': {'v': ['3', 0]}}}"

static enum graph_status run_chain(struct graph_ctx *g, struct sink *s, int x1, int x2)
{
    char buf[1024];
    snprintf(buf, sizeof(buf), CHAIN, x1, x2);
    char *t = jq(buf);
    log_reset();
    sink_clear(s);
    enum graph_status st = trun(g, s, "p", t, NULL, NULL);
    free(t);
    return st;
}

static void test_events_and_cache(const struct tdirs *d)
{
    struct graph_ctx *g = tgraph_new(d, GRAPH_CACHE_CLASSIC, 0);
    register_test_nodes(g);
    struct sink s = {0};
    char tr[4096];

    ok(run_chain(g, &s, 1, 2) == GRAPH_STATUS_SUCCESS, "chain runs");
    EXPECT_STR(run_log, "1,2,3,9");
    sink_trace(&s, tr, sizeof(tr));
    EXPECT_STR(tr, "execution_start execution_cached executing:1 executing:2 executing:3 executing:9 executed:9");
    const cJSON *ex = sink_find(&s, "executed");
    char *j = cJSON_PrintUnformatted(ex);
    EXPECT_STR(j, "{\"node\":\"9\",\"display_node\":\"9\",\"output\":{\"images\":[{\"filename\":\"v=103\","
                  "\"subfolder\":\"\",\"type\":\"output\"}]},\"prompt_id\":\"p\"}");
    free(j);
    /* progress_state precedes executing for each node, and finishes it after. */
    ok(!strcmp(s.type[2], "progress_state") && !strcmp(s.type[3], "executing"), "progress_state(running) before executing");
    j = cJSON_PrintUnformatted(s.data[2]);
    EXPECT_STR(j, "{\"prompt_id\":\"p\",\"nodes\":{\"1\":{\"value\":0,\"max\":1,\"state\":\"running\",\"node_id\":\"1\","
                  "\"prompt_id\":\"p\",\"display_node_id\":\"1\",\"parent_node_id\":null,\"real_node_id\":\"1\"}}}");
    free(j);

    /* Identical resubmission: nothing runs, all cached, executed still sent. */
    ok(run_chain(g, &s, 1, 2) == GRAPH_STATUS_SUCCESS, "identical resubmission succeeds");
    EXPECT_EQ(run_count, 0);
    sink_trace(&s, tr, sizeof(tr));
    EXPECT_STR(tr, "execution_start execution_cached executed:9");
    j = cJSON_PrintUnformatted(cJSON_GetObjectItem(sink_find(&s, "execution_cached"), "nodes"));
    EXPECT_STR(j, "[\"1\",\"2\",\"3\",\"9\"]"); /* 4 is unreachable: never ran */
    free(j);
    j = cJSON_PrintUnformatted(cJSON_GetObjectItem(sink_find(&s, "executed"), "output"));
    EXPECT_STR(j, "{\"images\":[{\"filename\":\"v=103\",\"subfolder\":\"\",\"type\":\"output\"}]}");
    free(j);

    /* Change node 2's constant: 2 and its descendants re-run, 1 does not. */
    run_chain(g, &s, 1, 5);
    EXPECT_STR(run_log, "2,3,9");
    j = cJSON_PrintUnformatted(cJSON_GetObjectItem(sink_find(&s, "execution_cached"), "nodes"));
    EXPECT_STR(j, "[\"1\"]");
    free(j);
    /* Classic: switching back recomputes (A -> B -> A). */
    run_chain(g, &s, 1, 2);
    EXPECT_STR(run_log, "2,3,9");

    /* A failing node: execution_error with ComfyUI's fields; the next job runs. */
    char *t = jq("{'1': {'class_type': 'TCount', 'inputs': {'x': 1}}, '2': {'class_type': 'TFail', 'inputs': {'x': 42, 'a': ['1', 0]}},"
                 " '9': {'class_type': 'TOut', 'inputs': {'v': ['2', 0]}}}");
    sink_clear(&s);
    log_reset();
    ok(trun(g, &s, "f", t, NULL, NULL) == GRAPH_STATUS_ERROR, "failing node -> error status");
    free(t);
    sink_trace(&s, tr, sizeof(tr));
    EXPECT_STR(tr, "execution_start execution_cached executing:2 execution_error");
    const cJSON *ee = sink_find(&s, "execution_error");
    EXPECT_STR(estr(ee, "node_id"), "2");
    EXPECT_STR(estr(ee, "node_type"), "TFail");
    EXPECT_STR(estr(ee, "exception_message"), "boom 42\n");
    EXPECT_STR(estr(ee, "exception_type"), "ValueError");
    j = cJSON_PrintUnformatted(cJSON_GetObjectItem(ee, "current_inputs"));
    EXPECT_STR(j, "{\"x\":[42],\"a\":[1]}");
    free(j);
    j = cJSON_PrintUnformatted(cJSON_GetObjectItem(ee, "executed"));
    EXPECT_STR(j, "[]"); /* node 1 was a cache hit */
    free(j);
    ok(cJSON_IsArray(cJSON_GetObjectItem(ee, "traceback")) && cJSON_IsArray(cJSON_GetObjectItem(ee, "current_outputs")) &&
           cJSON_IsNumber(cJSON_GetObjectItem(ee, "timestamp")),
       "execution_error has traceback, current_outputs, timestamp");
    ok(run_chain(g, &s, 3, 3) == GRAPH_STATUS_SUCCESS, "next job after a failure runs");

    /* Duplicate identical subgraphs inside one prompt run once. */
    t = jq("{'1': {'class_type': 'TCount', 'inputs': {'x': 11}}, '2': {'class_type': 'TCount', 'inputs': {'x': 11}},"
           " '8': {'class_type': 'TOut', 'inputs': {'v': ['1', 0]}}, '9': {'class_type': 'TOut', 'inputs': {'v': ['2', 0]}}}");
    sink_clear(&s);
    log_reset();
    trun(g, &s, "dup", t, NULL, NULL);
    free(t);
    EXPECT_STR(run_log, "1,8");
    sink_trace(&s, tr, sizeof(tr));
    EXPECT_STR(tr, "execution_start execution_cached executing:1 executing:8 executed:8 executed:2 executed:9");
    int nexec = 0, null_out = 0;
    for (int i = 0; i < s.n; i++)
        if (!strcmp(s.type[i], "executed") && ++nexec == 2)
            null_out = cJSON_IsNull(cJSON_GetObjectItem(s.data[i], "output"));
    ok(null_out,
       "the duplicate served from cache gets executed with output null");

    /* Interrupt mid-graph (the slow node interrupts itself at step 3). */
    G = g;
    t = jq("{'1': {'class_type': 'TCount', 'inputs': {'x': 50}}, '2': {'class_type': 'TSlow', 'inputs': {'steps': 6, 'interrupt_at': 3, 'a': ['1', 0]}},"
           " '3': {'class_type': 'TCount', 'inputs': {'x': 1, 'a': ['2', 0]}}, '9': {'class_type': 'TOut', 'inputs': {'v': ['3', 0]}}}");
    sink_clear(&s);
    log_reset();
    ok(trun(g, &s, "int", t, NULL, NULL) == GRAPH_STATUS_INTERRUPTED, "interrupt -> interrupted status");
    free(t);
    EXPECT_STR(run_log, "1,2");
    sink_trace(&s, tr, sizeof(tr));
    EXPECT_STR(tr, "execution_start execution_cached executing:1 executing:2 progress:2 progress:2 execution_interrupted");
    const cJSON *ei = sink_find(&s, "execution_interrupted");
    j = cJSON_PrintUnformatted(ei);
    ok(strstr(j, "\"node_id\":\"2\",\"node_type\":\"TSlow\",\"executed\":[\"1\"]") && !strstr(j, "exception"),
       "execution_interrupted fields (%s)", j);
    free(j);
    /* An interrupt while idle is discarded; the next prompt runs. */
    graph_interrupt(g);
    ok(run_chain(g, &s, 8, 8) == GRAPH_STATUS_SUCCESS, "prompt after an interrupt runs");
    /* Progress throttling: short loops report every step, long ones are thinned. */
    for (int pass = 0; pass < 2; pass++) {
        int steps = pass ? 200000 : 50;
        char buf[256];
        snprintf(buf, sizeof(buf), "{'1': {'class_type': 'TFast', 'inputs': {'x': %d}}, '9': {'class_type': 'TOut', 'inputs': {'v': ['1', 0]}}}", steps);
        t = jq(buf);
        sink_clear(&s);
        trun(g, &s, "fast", t, NULL, NULL);
        free(t);
        int np = sink_count(&s, "progress");
        const cJSON *lastp = NULL;
        for (int i = 0; i < s.n; i++)
            if (!strcmp(s.type[i], "progress"))
                lastp = s.data[i];
        if (pass == 0)
            EXPECT_EQ(np, 50);
        else
            ok(np >= 2 && np < 2000, "200000 fast steps thinned to %d progress events", np);
        ok(lastp && cJSON_GetObjectItem(lastp, "value")->valuedouble == steps, "the last step is always sent");
    }

    /* An interrupt raised by a node without progress calls stops the next node. */
    t = jq("{'1': {'class_type': 'TIntr', 'inputs': {'x': 60}}, '2': {'class_type': 'TCount', 'inputs': {'x': 1, 'a': ['1', 0]}},"
           " '9': {'class_type': 'TOut', 'inputs': {'v': ['2', 0]}}}");
    sink_clear(&s);
    log_reset();
    ok(trun(g, &s, "int2", t, NULL, NULL) == GRAPH_STATUS_INTERRUPTED, "interrupt between nodes");
    free(t);
    EXPECT_STR(run_log, "1");
    j = cJSON_PrintUnformatted(sink_find(&s, "execution_interrupted"));
    ok(strstr(j, "\"node_id\":\"2\",\"node_type\":\"TCount\",\"executed\":[\"1\"]") != NULL, "interrupted at node 2 (%s)", j);
    free(j);

    /* History data of a run: messages and outputs (cached outputs included). */
    t = jq("{'1': {'class_type': 'TCount', 'inputs': {'x': 1}}, '2': {'class_type': 'TFail', 'inputs': {'x': 2, 'a': ['1', 0]}},"
           " '8': {'class_type': 'TOut', 'inputs': {'v': ['1', 0]}}, '9': {'class_type': 'TOut', 'inputs': {'v': ['2', 0]}}}");
    cJSON *prompt = cJSON_Parse(t);
    free(t);
    struct graph_validation v;
    graph_validate(g, prompt, &v);
    struct graph_job job = {.prompt_id = "h", .prompt = prompt, .outputs_to_execute = v.outputs};
    struct graph_result res;
    graph_execute(g, &job, NULL, &res);
    ok(res.status == GRAPH_STATUS_ERROR, "error run without an event sink");
    j = cJSON_PrintUnformatted(res.messages);
    ok(strstr(j, "[[\"execution_start\",{\"prompt_id\":\"h\",\"timestamp\":") == j &&
           strstr(j, "],[\"execution_cached\",{\"nodes\":") && strstr(j, "],[\"execution_error\",{\"prompt_id\":\"h\""),
       "history messages: start, cached, error (%.80s...)", j);
    free(j);
    j = cJSON_PrintUnformatted(res.outputs);
    EXPECT_STR(j, "{\"8\":{\"images\":[{\"filename\":\"v=1\",\"subfolder\":\"\",\"type\":\"output\"}]}}");
    free(j);
    j = cJSON_PrintUnformatted(res.meta);
    EXPECT_STR(j, "{\"8\":{\"node_id\":\"8\",\"display_node\":\"8\",\"parent_node\":null,\"real_node_id\":\"8\"}}");
    free(j);
    graph_result_release(&res);
    graph_execute(g, &job, NULL, &res); /* 1 and 8 are cached now; 2 fails again */
    j = cJSON_PrintUnformatted(res.outputs);
    EXPECT_STR(j, "{\"8\":{\"images\":[{\"filename\":\"v=1\",\"subfolder\":\"\",\"type\":\"output\"}]}}");
    free(j);
    graph_result_release(&res);
    graph_validation_release(&v);
    cJSON_Delete(prompt);

    /* An unvalidated prompt with a cycle fails instead of hanging or succeeding. */
    t = jq("{'1': {'class_type': 'TCount', 'inputs': {'x': 1, 'a': ['2', 0]}}, '2': {'class_type': 'TCount', 'inputs': {'x': 1, 'a': ['1', 0]}},"
           " '9': {'class_type': 'TOut', 'inputs': {'v': ['2', 0]}}}");
    prompt = cJSON_Parse(t);
    free(t);
    cJSON *outs = cJSON_Parse("[\"9\"]");
    job = (struct graph_job){.prompt_id = "cyc", .prompt = prompt, .outputs_to_execute = outs};
    graph_execute(g, &job, NULL, &res);
    ok(res.status == GRAPH_STATUS_ERROR, "cycle at execution is an error");
    graph_result_release(&res);
    cJSON_Delete(outs);
    cJSON_Delete(prompt);
    sink_clear(&s);
    sink_clear(&s);
    graph_free(g);
}

static void test_device_stats(const struct tdirs *d)
{
    struct graph_config cfg = {0};
    cfg.models_dir = d->models;
    cfg.input_dir = d->input;
    cfg.output_dir = d->output;
    cfg.temp_dir = d->temp;
    struct mm_config mc;
    mm_config_init(&mc);
    mc.device_spec = "sim:256M";
    cfg.mm = &mc;
    struct err e = {0};
    struct graph_ctx *g = graph_new(&cfg, &e);
    ok(g != NULL, "graph on a simulated device (%s)", e.msg);
    if (g) {
        cJSON *ds = graph_device_stats(g);
        ok(!strcmp(cJSON_GetObjectItem(ds, "type")->valuestring, "sim") &&
               cJSON_GetObjectItem(ds, "vram_total")->valuedouble == 256.0 * 1024 * 1024 &&
               cJSON_IsNumber(cJSON_GetObjectItem(ds, "torch_vram_free")),
           "sim device stats: 256 MiB budget");
        cJSON_Delete(ds);
        graph_free(g);
    }
    mc.device_spec = "bogus:1";
    e.msg[0] = 0;
    ok(graph_new(&cfg, &e) == NULL && e.msg[0], "bad device spec is a clear error: %s", e.msg);
}

/* Signature test classes: TUid sees its node id (a hidden UNIQUE_ID input), TChg
 * fingerprints outside state (chg_state) through IS_CHANGED, or fails to (< 0). */
static char chg_state[32] = "a";
static int tchg_is_changed(struct node_ctx *c, struct buf *out)
{
    (void)c;
    if (!strcmp(chg_state, "fail"))
        return -1;
    buf_adds(out, chg_state);
    return 0;
}
static const struct node_input_def tuid_in[] = {{.name = "x", .type = "INT", .def = NODE_I(0)},
                                                {.name = "unique_id", .type = "UNIQUE_ID",
                                                 .group = NODE_INPUT_HIDDEN},
                                                NODE_INPUTS_END};
static const struct node_class tuid = {.name = "TUid", .category = "test", .inputs = tuid_in,
                                       .outputs = int_out, .run = tcount_run};
static const struct node_class tchg = {.name = "TChg", .category = "test", .inputs = tcount_in,
                                       .outputs = int_out, .run = tcount_run,
                                       .is_changed = tchg_is_changed};

/* Run JSON text (' for ") with a fresh log; `raw`: as a test or fuzzer would, without
 * validation's native prompt (the executor parses the JSON itself). */
static void sig_run(struct graph_ctx *g, struct sink *s, const char *text, int raw)
{
    char *t = jq(text);
    log_reset();
    sink_clear(s);
    if (!raw) {
        trun(g, s, "sig", t, NULL, NULL);
    } else {
        cJSON *prompt = graph_json_parse(t, strlen(t)), *outs = cJSON_CreateArray();
        for (cJSON *n = prompt->child; n; n = n->next)
            if (!strcmp(cJSON_GetObjectItem(n, "class_type")->valuestring, "TOut"))
                cJSON_AddItemToArray(outs, cJSON_CreateString(n->string));
        struct graph_job job = {.prompt_id = "sig", .prompt = prompt, .outputs_to_execute = outs};
        struct graph_result r;
        graph_execute(g, &job, NULL, &r);
        graph_result_release(&r);
        cJSON_Delete(outs);
        cJSON_Delete(prompt);
    }
    free(t);
}

/* The cache key (§6.5): class, constants, which inputs are linked to what (and which
 * optional inputs are absent), IS_CHANGED, and the node id only for classes that see
 * it; not the ids, nor the order of keys in the JSON. Raw and validated prompts of
 * the same graph share keys. */
static void test_signatures(const struct tdirs *d)
{
    struct graph_ctx *g = tgraph_new(d, GRAPH_CACHE_LRU, 100);
    register_test_nodes(g);
    const struct node_class *more[] = {&tuid, &tchg};
    node_registry_add_all(graph_registry(g), more, 2);
    G = g;
    struct sink s = {0};
    sig_run(g, &s, "{'1': {'class_type': 'TCount', 'inputs': {'x': 1}}, '2': {'class_type': 'TCount', "
                   "'inputs': {'x': 2, 'a': ['1', 0]}}, '9': {'class_type': 'TOut', 'inputs': {'v': ['2', 0]}}}", 0);
    EXPECT_STR(run_log, "1,2,9");
    /* Renumbered, inputs in another key order: every node is a cache hit. */
    sig_run(g, &s, "{'5': {'class_type': 'TCount', 'inputs': {'x': 1}}, '6': {'class_type': 'TCount', "
                   "'inputs': {'a': ['5', 0], 'x': 2}}, '7': {'class_type': 'TOut', 'inputs': {'v': ['6', 0]}}}", 0);
    EXPECT_STR(run_log, "");
    /* The same graph given raw: the executor's own parse hashes to the same keys. */
    sig_run(g, &s, "{'1': {'class_type': 'TCount', 'inputs': {'x': 1}}, '2': {'class_type': 'TCount', "
                   "'inputs': {'x': 2, 'a': ['1', 0]}}, '9': {'class_type': 'TOut', 'inputs': {'v': ['2', 0]}}}", 1);
    EXPECT_STR(run_log, "");
    /* The optional input absent: a different key for 2 (and so for 9). */
    sig_run(g, &s, "{'1': {'class_type': 'TCount', 'inputs': {'x': 1}}, '2': {'class_type': 'TCount', "
                   "'inputs': {'x': 2}}, '9': {'class_type': 'TOut', 'inputs': {'v': ['2', 0]}}}", 0);
    EXPECT_STR(run_log, "2,9");
    /* Linked to another source with the same constant as before: 3 is new, so is 2. */
    sig_run(g, &s, "{'1': {'class_type': 'TCount', 'inputs': {'x': 1}}, '3': {'class_type': 'TCount', "
                   "'inputs': {'x': 1, 'a': ['1', 0]}}, '2': {'class_type': 'TCount', 'inputs': {'x': 2, "
                   "'a': ['3', 0]}}, '9': {'class_type': 'TOut', 'inputs': {'v': ['2', 0]}}}", 0);
    EXPECT_STR(run_log, "3,2,9");
    /* Back to the first graph: its keys are still in the (LRU) cache. */
    sig_run(g, &s, "{'1': {'class_type': 'TCount', 'inputs': {'x': 1}}, '2': {'class_type': 'TCount', "
                   "'inputs': {'x': 2, 'a': ['1', 0]}}, '9': {'class_type': 'TOut', 'inputs': {'v': ['2', 0]}}}", 0);
    EXPECT_STR(run_log, "");
    /* A class that sees its id: renumbering it re-runs it and what it feeds. */
    sig_run(g, &s, "{'1': {'class_type': 'TUid', 'inputs': {'x': 4}}, '9': {'class_type': 'TOut', "
                   "'inputs': {'v': ['1', 0]}}}", 0);
    EXPECT_STR(run_log, "1,9");
    sig_run(g, &s, "{'1': {'class_type': 'TUid', 'inputs': {'x': 4}}, '8': {'class_type': 'TOut', "
                   "'inputs': {'v': ['1', 0]}}}", 0);
    EXPECT_STR(run_log, "");
    sig_run(g, &s, "{'4': {'class_type': 'TUid', 'inputs': {'x': 4}}, '9': {'class_type': 'TOut', "
                   "'inputs': {'v': ['4', 0]}}}", 0);
    EXPECT_STR(run_log, "4,9");
    /* IS_CHANGED: the same fingerprint hits, a new one re-runs, a failed one always. */
    const char *chg = "{'1': {'class_type': 'TChg', 'inputs': {'x': 3}}, '9': {'class_type': 'TOut', "
                      "'inputs': {'v': ['1', 0]}}}";
    sig_run(g, &s, chg, 0);
    EXPECT_STR(run_log, "1,9");
    sig_run(g, &s, chg, 1);
    EXPECT_STR(run_log, "");
    snprintf(chg_state, sizeof(chg_state), "b");
    sig_run(g, &s, chg, 0);
    EXPECT_STR(run_log, "1,9");
    snprintf(chg_state, sizeof(chg_state), "fail");
    sig_run(g, &s, chg, 0);
    EXPECT_STR(run_log, "1,9");
    sig_run(g, &s, chg, 0);
    EXPECT_STR(run_log, "1,9");
    sink_clear(&s);
    graph_free(g);
}

static void test_cache_modes(const struct tdirs *d)
{
    struct sink s = {0};
    struct graph_ctx *g = tgraph_new(d, GRAPH_CACHE_NONE, 0);
    register_test_nodes(g);
    run_chain(g, &s, 1, 2);
    run_chain(g, &s, 1, 2);
    EXPECT_STR(run_log, "1,2,3,9");
    char *j = cJSON_PrintUnformatted(cJSON_GetObjectItem(sink_find(&s, "execution_cached"), "nodes"));
    EXPECT_STR(j, "[]");
    free(j);
    EXPECT_EQ(graph_cache_count(g), 0);
    /* --cache-none frees a result once its consumers ran: when node 3 runs, node 1's
     * output is gone and only node 2's is held. */
    G = g;
    char *t = jq("{'1': {'class_type': 'TCount', 'inputs': {'x': 1}}, '2': {'class_type': 'TCount', 'inputs': {'x': 1, 'a': ['1', 0]}},"
                 " '3': {'class_type': 'TCacheCount', 'inputs': {'x': 0, 'a': ['2', 0]}}, '9': {'class_type': 'TOut', 'inputs': {'v': ['3', 0]}}}");
    cJSON *outs = NULL;
    trun(g, &s, "none", t, NULL, &outs);
    free(t);
    j = cJSON_PrintUnformatted(outs);
    EXPECT_STR(j, "{\"9\":{\"images\":[{\"filename\":\"v=1\",\"subfolder\":\"\",\"type\":\"output\"}]}}");
    free(j);
    cJSON_Delete(outs);
    graph_free(g);

    /* LRU: A, B, A reuses A while it fits; a small cache evicts it. */
    g = tgraph_new(d, GRAPH_CACHE_LRU, 10);
    register_test_nodes(g);
    run_chain(g, &s, 1, 2);
    run_chain(g, &s, 5, 6);
    run_chain(g, &s, 1, 2);
    EXPECT_STR(run_log, ""); /* A -> B -> A: all from cache */
    graph_free(g);
    g = tgraph_new(d, GRAPH_CACHE_LRU, 4);
    register_test_nodes(g);
    run_chain(g, &s, 1, 2);
    run_chain(g, &s, 5, 6);
    ok(graph_cache_count(g) <= 5, "LRU keeps the newest generation (%zu entries)", graph_cache_count(g));
    run_chain(g, &s, 1, 2);
    EXPECT_STR(run_log, "1,2,3,9"); /* A was evicted */
    sink_clear(&s);
    graph_free(g);
}

static void test_object_info(struct graph_ctx *g)
{
    char *s = graph_object_info_json(g, "SaveImage");
    cJSON *j = cJSON_Parse(s);
    const cJSON *si = cJSON_GetObjectItem(j, "SaveImage");
    char *in = cJSON_PrintUnformatted(cJSON_GetObjectItem(si, "input"));
    EXPECT_STR(in, "{\"required\":{\"images\":[\"IMAGE\",{\"tooltip\":\"The images to save.\"}],\"filename_prefix\":"
                   "[\"STRING\",{\"default\":\"ComfyUI\",\"tooltip\":\"The prefix for the file to save. This may include "
                   "formatting information such as %date:yyyy-MM-dd% or %Empty Latent Image.width% to include values from "
                   "nodes.\"}]},\"hidden\":{\"prompt\":\"PROMPT\",\"extra_pnginfo\":\"EXTRA_PNGINFO\"}}");
    free(in);
    in = cJSON_PrintUnformatted(cJSON_GetObjectItem(si, "input_order"));
    EXPECT_STR(in, "{\"required\":[\"images\",\"filename_prefix\"],\"hidden\":[\"prompt\",\"extra_pnginfo\"]}");
    free(in);
    const char *keys[] = {"input", "input_order", "output", "output_is_list", "output_name", "name",
                          "display_name", "description", "python_module", "category", "output_node"};
    const cJSON *k = si->child;
    int order_ok = 1;
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++, k = k ? k->next : NULL)
        order_ok &= k && !strcmp(k->string, keys[i]);
    ok(order_ok && !k, "node_info keys in ComfyUI's order");
    ok(cJSON_IsTrue(cJSON_GetObjectItem(si, "output_node")), "SaveImage is an output node");
    cJSON_Delete(j);
    xfree(s);

    s = graph_object_info_json(g, "TSeed");
    ok(strstr(s, "\"seed\":[\"INT\",{\"default\":0,\"min\":0,\"max\":18446744073709551615,\"control_after_generate\":true,"
                 "\"tooltip\":\"The random seed.\"}]") != NULL, "seed max printed exactly: %s", s);
    xfree(s);
    s = graph_object_info_json(g, "ImageScale");
    ok(strstr(s, "\"upscale_method\":[[\"nearest-exact\",\"bilinear\",\"area\",\"bicubic\",\"lanczos\"]]") != NULL,
       "combo in V1 form");
    ok(strstr(s, "\"output\":[\"IMAGE\"],\"output_is_list\":[false],\"output_name\":[\"IMAGE\"]") != NULL, "outputs");
    xfree(s);
    s = graph_object_info_json(g, "ImageScaleBy");
    ok(strstr(s, "\"scale_by\":[\"FLOAT\",{\"default\":1.0,\"min\":0.01,\"max\":8.0,\"step\":0.01}]") != NULL,
       "FLOAT options print like Python: %s", s);
    xfree(s);
    s = graph_object_info_json(g, "NoSuchNode");
    EXPECT_STR(s, "{}");
    xfree(s);
    s = graph_object_info_json(g, NULL);
    j = cJSON_Parse(s);
    ok(j && cJSON_GetObjectItem(j, "LoadImage") && cJSON_GetObjectItem(j, "PrimitiveBoolean"), "full object_info parses");
    /* What the frontend type-checks on every node definition (comfy-api.md §3.6),
     * for every registered class (the SD family's too, once registered). */
    int good = 1;
    const char *bad = "";
    for (const cJSON *nd = j ? j->child : NULL; nd; nd = nd->next) {
        const char *strs[] = {"name", "display_name", "description", "category", "python_module"};
        /* ComfyUI's V3 nodes (marked by api_node) carry display_name null when unset. */
        int v3_null_title = cJSON_GetObjectItem(nd, "api_node") &&
                            cJSON_IsNull(cJSON_GetObjectItem(nd, "display_name"));
        for (size_t i = 0; i < 5; i++)
            if (!cJSON_IsString(cJSON_GetObjectItem(nd, strs[i])) && !(i == 1 && v3_null_title))
                good = 0, bad = nd->string;
        if (!cJSON_IsBool(cJSON_GetObjectItem(nd, "output_node")) || !cJSON_IsObject(cJSON_GetObjectItem(nd, "input")) ||
            !cJSON_IsObject(cJSON_GetObjectItem(nd, "input_order")))
            good = 0, bad = nd->string;
        int no = cJSON_GetArraySize(cJSON_GetObjectItem(nd, "output"));
        if (cJSON_GetArraySize(cJSON_GetObjectItem(nd, "output_is_list")) != no ||
            cJSON_GetArraySize(cJSON_GetObjectItem(nd, "output_name")) != no)
            good = 0, bad = nd->string;
        /* input_order mirrors input */
        const cJSON *inp = cJSON_GetObjectItem(nd, "input"), *ord = cJSON_GetObjectItem(nd, "input_order");
        for (const cJSON *grp = inp ? inp->child : NULL; grp; grp = grp->next) {
            const cJSON *o = cJSON_GetObjectItem(ord, grp->string);
            const cJSON *a = grp->child, *b2 = o ? o->child : NULL;
            for (; a && b2; a = a->next, b2 = b2->next)
                if (strcmp(a->string, b2->valuestring))
                    good = 0, bad = nd->string;
            if (a || b2)
                good = 0, bad = nd->string;
        }
    }
    ok(good, "every node definition has the fields the frontend checks (bad: %s)", bad);
    cJSON_Delete(j);
    xfree(s);
    cJSON *ds = graph_device_stats(g);
    ok(ds && !strcmp(cJSON_GetObjectItem(ds, "type")->valuestring, "cpu") &&
           cJSON_IsNull(cJSON_GetObjectItem(ds, "index")) &&
           cJSON_GetObjectItem(ds, "vram_total")->valuedouble > 0,
       "device stats report the CPU");
    cJSON_Delete(ds);
}

/* The memory reports become JSON only here (graph_mmjson.c); the history must read as
 * it did when memory/ wrote the text by hand and the executor parsed it back. */
static void test_mm_reports_json(void)
{
    struct mm_report r;
    memset(&r, 0, sizeof(r));
    snprintf(r.device, sizeof(r.device), "sim \"0\"");
    r.budget = 16777216, r.activation_bytes = 1048576, r.workspace_bytes = 4096;
    r.bytes_unloaded = 123, r.models_unloaded = 1, r.n_models = 2;
    struct mm_model_plan *m = &r.models[0];
    snprintf(m->name, sizeof(m->name), "unet\t1");
    m->layers = 12, m->layers_resident = 8, m->layers_streamed = 4;
    m->bytes_resident = 8388608, m->bytes_streamed = 4194304;
    m->ring_slots = 3, m->ring_bytes = 3145728, m->prefetch = 2;
    snprintf(r.models[1].name, sizeof(r.models[1].name), "E");
    r.bytes_resident = 8388608, r.bytes_streamed = 4194304, r.bytes_loaded = 8388608;
    r.bytes_copied = 12582912, r.peak_bytes = 15000000;
    r.predicted_ms = 12.34567, r.load_ms = 0.0004, r.measured_ms = 100.5;
    r.passes = 20, r.measured_pass_ms = 5.025, r.retried = 1;
    /* What the old mm_report_json wrote for this report. */
    const char *old_text =
        "{\"device\":\"sim \\\"0\\\"\",\"budget\":16777216,\"activation_bytes\":1048576,"
        "\"workspace_bytes\":4096,\"patch_workspace_bytes\":0,\"bytes_unloaded\":123,"
        "\"models_unloaded\":1,\"bytes_resident\":8388608,\"bytes_streamed\":4194304,"
        "\"bytes_loaded\":8388608,\"bytes_copied\":12582912,\"peak_bytes\":15000000,"
        "\"predicted_ms\":12.346,\"load_ms\":0.000,\"measured_ms\":100.500,\"passes\":20,"
        "\"measured_pass_ms\":5.025,\"retried\":true,\"models\":[{\"name\":\"unet\\u00091\","
        "\"layers\":12,\"layers_resident\":8,\"layers_streamed\":4,"
        "\"bytes_resident\":8388608,\"bytes_streamed\":4194304,\"ring_slots\":3,"
        "\"ring_bytes\":3145728,\"prefetch\":2},{\"name\":\"E\",\"layers\":0,"
        "\"layers_resident\":0,\"layers_streamed\":0,\"bytes_resident\":0,"
        "\"bytes_streamed\":0,\"ring_slots\":0,\"ring_bytes\":0,\"prefetch\":0}]}";
    cJSON *want = cJSON_Parse(old_text);
    cJSON *got = graph__mm_reports_json(&r, 1);
    char *w = cJSON_PrintUnformatted(want), *g = cJSON_PrintUnformatted(cJSON_GetArrayItem(got, 0));
    ok(w && g && !strcmp(w, g), "memory report JSON as before:\n# %s\n# %s", w, g);
    cJSON_free(w);
    cJSON_free(g);
    cJSON_Delete(want);
    cJSON_Delete(got);
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    struct tdirs d;
    tdirs_make(&d);
    long live0 = alloc_live_count();
    struct graph_ctx *g = tgraph_new(&d, GRAPH_CACHE_CLASSIC, 0);
    register_test_nodes(g);
    test_mm_reports_json();
    test_corpus(g);
    test_validation_details(g);
    test_object_info(g);
    test_default_order(g, LATENTD_FIXTURES_DIR "/default_workflow_api.json");
    test_nesting(g);
    test_huge(g);
    graph_free(g);
    test_events_and_cache(&d);
    test_cache_modes(&d);
    test_signatures(&d);
    test_device_stats(&d);
    test_random_prompts(&d);
    EXPECT_EQ(alloc_live_count(), live0);
    tdirs_remove(&d);
    return harness_done();
}

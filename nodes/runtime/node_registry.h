/*
 * node_registry — node classes (ComfyUI's NODE_CLASS_MAPPINGS) and how to add one.
 *
 * A node class is a static, constant declaration: its inputs, outputs, category,
 * titles, output-node flag, and the C function that runs it. graph/ builds
 * /object_info, validation and execution from these declarations alone, so a
 * declaration is the single source of truth for a node's wire shape.
 *
 * ADDING A NODE FAMILY (e.g. nodes/nodes_sd.c):
 *
 *     static const char *const methods[] = {"nearest-exact", "bilinear", NULL};
 *
 *     // The input indices, beside the declaration they index: keep the orders equal.
 *     enum { SCALE_IMAGE, SCALE_METHOD, SCALE_WIDTH, SCALE_CKPT, SCALE_N };
 *     static const struct node_input_def scale_inputs[] = {
 *         {.name = "image", .type = "IMAGE"},
 *         {.name = "upscale_method", .type = NODE_COMBO, .options = methods},
 *         {.name = "width", .type = "INT", .def = NODE_I(512), .min = NODE_I(0),
 *          .max = NODE_I(16384), .step = NODE_I(1)},
 *         {.name = "ckpt_name", .type = NODE_COMBO, .options_folder = "checkpoints",
 *          .tooltip = "The name of the checkpoint (model) to load."},
 *         NODE_INPUTS_END};
 *     static const struct node_output_def scale_outputs[] = {{.type = "IMAGE"}, NODE_OUTPUTS_END};
 *
 *     static int scale_run(struct node_ctx *c) {
 *         const struct value *img = node_in_at(c, SCALE_IMAGE); // borrowed
 *         int64_t w = node_in_int_at(c, SCALE_WIDTH);            // widgets: typed readers
 *         struct value *out = node_new_image(c, b, h, w, 3);   // size-checked; NULL = failed
 *         if (!out)
 *             return ERR_TOO_LARGE;
 *         ... on failure: return node_fail(c, "RuntimeError", "bad size %lld", w);
 *         ... in loops:   if ((rc = node_progress(c, i + 1, n, rgb, pw, ph)) < 0) return rc;
 *         node_set_output(c, 0, out);                          // transfers the reference
 *         return 0;
 *     }
 *
 * Model-backed types are opaque values: value_new_object("MODEL", m, my_model_free)
 * on the producing side, and `v->obj` after checking `v->type` on the consuming
 * side (node_value.h). The cache holds references, so a cached MODEL stays alive
 * as long as its entry does; free device memory through the memory manager
 * (node_env.mm), not in obj_free, unless the object owns it.
 *
 *     static const struct node_class image_scale = {
 *         .name = "ImageScale", .display_name = "Upscale Image",
 *         .category = "image/upscaling", .inputs = scale_inputs, .n_inputs = SCALE_N,
 *         .outputs = scale_outputs, .run = scale_run};
 *
 *     static const struct node_class *const sd_classes[] = {&image_scale, ...};
 *     void nodes_sd_register(struct node_registry *r)
 *     {
 *         node_registry_add_all(r, sd_classes, sizeof(sd_classes) / sizeof(sd_classes[0]));
 *     }
 *
 * then add one line `nodes_sd_register(r);` to node_registry_add_builtins() in
 * nodes/node_builtin.c (and the prototype to node_builtin.h). Static libraries drop
 * unreferenced objects, so there is no constructor magic: the builtin list is the
 * one place that names every family.
 *
 * Conventions the graph relies on:
 *   - Inputs are declared in ComfyUI's order (it is /object_info's input_order).
 *     `group` says required (default), optional or hidden. Hidden inputs carry a
 *     marker type: "PROMPT", "EXTRA_PNGINFO", "UNIQUE_ID".
 *   - Widget types are "INT", "FLOAT", "STRING", "BOOLEAN" and NODE_COMBO; any
 *     other type string is a socket type ("IMAGE", "MODEL", "*", "INT,FLOAT").
 *   - Numbers: NODE_I(v) for INT options, NODE_F(v) for FLOAT, NODE_U64_MAX for the
 *     seed maximum 18446744073709551615. An unset option is absent from
 *     /object_info and not checked.
 *   - Combo lists come from `options` (static, NULL-terminated), `options_folder`
 *     (files under models/<folder>, listed when asked: new files show up without a
 *     restart), or `options_fn` (anything else, e.g. LoadImage's input images).
 *   - `validate` replaces the combo membership check for an input (LoadImage's
 *     `image` accepts any existing file, not only the listed ones).
 *
 * Threads: a registry is filled once (graph_new, or a test before it executes)
 * and is then read-only, so HTTP threads may read it concurrently.
 */
#ifndef LATENTD_NODES_NODE_REGISTRY_H
#define LATENTD_NODES_NODE_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "node_run.h"

#define NODE_COMBO "COMBO"

/* A number option (default/min/max/step/round). `set` = present. */
struct node_num {
    unsigned char set;
    unsigned char big; /* i holds a uint64 above INT64_MAX (the seed maximum) */
    int64_t i;         /* for INT inputs */
    double f;          /* for FLOAT inputs (and INT ones, as a double) */
};
#define NODE_I(v) {.set = 1, .i = (v), .f = (double)(v)}
#define NODE_F(v) {.set = 1, .i = (int64_t)(v), .f = (v)}
#define NODE_U64_MAX {.set = 1, .big = 1, .i = -1, .f = 18446744073709551615.0}

enum node_input_group {
    NODE_INPUT_REQUIRED = 0,
    NODE_INPUT_OPTIONAL,
    NODE_INPUT_HIDDEN,
};

/* A growable list of strings (combo options). */
struct node_strlist {
    char **items; /* owned, each owned */
    size_t n, cap;
};
void node_strlist_init(struct node_strlist *l);
void node_strlist_release(struct node_strlist *l);
void node_strlist_add(struct node_strlist *l, const char *s);
void node_strlist_sort(struct node_strlist *l); /* byte-wise strcmp order */

struct node_input_def {
    const char *name;  /* NULL ends the array (NODE_INPUTS_END) */
    const char *type;  /* "INT", "FLOAT", "STRING", "BOOLEAN", NODE_COMBO, or a socket type */
    enum node_input_group group;
    struct node_num def, min, max, step, round;
    const char *def_str;   /* STRING default, or COMBO default; NULL = none */
    int def_bool;          /* BOOLEAN default, used when has_def_bool */
    unsigned char has_def_bool;
    unsigned char round_false;            /* FLOAT: {"round": false} (no rounding; round unset) */
    unsigned char empty_opts;             /* /object_info shows {} when no option is set
                                             (ComfyUI's ("MODEL", {})) */
    unsigned char multiline;              /* STRING: {"multiline": true} */
    unsigned char dynamic_prompts;        /* STRING: {"dynamicPrompts": true} */
    unsigned char control_after_generate; /* INT: seed widget */
    unsigned char image_upload;           /* COMBO: LoadImage's upload button */
    const char *image_folder;             /* COMBO: {"image_folder": "output"}; NULL = none */
    /*
     * COMBO whose choices the client fetches from this route (LoadImageOutput's
     * /internal/files/output): /object_info shows the type "COMBO" with {"remote":
     * {"route", "refresh_button": true, "control_after_refresh": "first"}} instead of a
     * list, so such an input needs `validate`. NULL = a listed combo.
     */
    const char *remote_route;
    unsigned char force_input;            /* widget type shown as a socket */
    unsigned char advanced;               /* {"advanced": true}: folded away in the UI */
    const char *display;                  /* widget display hint ("color"); NULL = none */
    const char *tooltip;                  /* NULL = none */

    /* COMBO choices: exactly one of these. */
    const char *const *options; /* static, NULL-terminated */
    const char *options_folder; /* models/<folder>, recursive, '/' separated, sorted */
    const char *const *options_exts; /* with options_folder: allowed extensions
                                        (".safetensors" ...); NULL = the model set */
    /* Fill `out` (already initialised) with the current choices. */
    void (*options_fn)(const struct node_env *env, struct node_strlist *out);

    /*
     * Optional custom validation of a constant (LoadImage's `image`). Returns 0
     * when valid, else appends the reason ("Invalid image file: x.png") to
     * `reason` and returns <0. When set, min/max/combo checks are skipped, as
     * in ComfyUI's VALIDATE_INPUTS.
     */
    int (*validate)(const struct node_env *env, const char *value, struct buf *reason);
};
#define NODE_INPUTS_END {.name = NULL}

struct node_output_def {
    const char *type;    /* NULL ends the array (NODE_OUTPUTS_END) */
    const char *name;    /* display name; NULL = type */
    unsigned char is_list;
    const char *tooltip; /* NULL = none (if any output has one, all are listed) */
};
#define NODE_OUTPUTS_END {.type = NULL}

enum node_class_flags {
    NODE_CLASS_OUTPUT = 1 << 0,       /* OUTPUT_NODE: SaveImage, PreviewImage */
    NODE_CLASS_DEPRECATED = 1 << 1,
    NODE_CLASS_EXPERIMENTAL = 1 << 2,
    NODE_CLASS_NOT_IDEMPOTENT = 1 << 3, /* node id joins the cache key */
    /* A V3 node (io.ComfyNode, e.g. nodes_latent.py): /object_info shows it as ComfyUI's
     * asdict(Schema.get_v1_info()): every input with an options object, combos as
     * ["COMBO", {"multiselect": false, "options": [...]}], output_tooltips always (null
     * for none), display_name null when unset, deprecated/experimental/api_node always. */
    NODE_CLASS_V3 = 1 << 4,
    /* INPUT_IS_LIST (is_input_list): run once with every input as a list
     * (value_list_len / value_list_at), instead of once per item (graph_node.c). */
    NODE_CLASS_INPUT_IS_LIST = 1 << 5,
};

struct node_class {
    const char *name;         /* class_type */
    const char *display_name; /* NULL = name */
    const char *description;  /* NULL = "" */
    const char *category;
    const char *python_module; /* NULL = "nodes" */
    unsigned flags;            /* enum node_class_flags */
    const struct node_input_def *inputs;   /* NODE_INPUTS_END-terminated; NULL = none */
    /*
     * The count (the _N member) of the index enum that run() reads these inputs with,
     * stated here so that registration can hold it against the declaration: an input
     * added to or dropped from one but not the other stops the server at startup (and
     * fails every unit test that registers the class) instead of making run() read a
     * neighbour. 0 = not stated (a class that has no inputs or reads them by name).
     */
    int n_inputs;
    const struct node_output_def *outputs; /* NODE_OUTPUTS_END-terminated; NULL = none */

    /* Run the node (executor thread). Returns 0, or <0 after node_fail(). */
    int (*run)(struct node_ctx *c);

    /*
     * Optional IS_CHANGED: append a fingerprint of external state (LoadImage: the
     * SHA-256 of the file) to `out`. It joins the cache key, so the node re-runs
     * when the fingerprint changes. Return <0 when it cannot be computed: the node
     * then always re-runs (ComfyUI's NaN).
     */
    int (*is_changed)(struct node_ctx *c, struct buf *out);

    /* Optional per-node-instance state (PreviewImage's random suffix): created
     * lazily by the node through node_instance(); freed with this. */
    void (*instance_free)(void *state);
};

struct node_registry; /* opaque */

struct node_registry *node_registry_new(void);
void node_registry_free(struct node_registry *r);

/*
 * Register classes (borrowed: they must outlive the registry, i.e. be static).
 * A name registered twice is an invariant failure. Not thread-safe: call before
 * the registry is shared.
 */
void node_registry_add(struct node_registry *r, const struct node_class *cls);
void node_registry_add_all(struct node_registry *r, const struct node_class *const *cls,
                           size_t n);

/* Look a class up by name; NULL when unknown. Any thread. */
const struct node_class *node_registry_find(const struct node_registry *r, const char *name);

/* Classes in registration order (for /object_info). */
size_t node_registry_count(const struct node_registry *r);
const struct node_class *node_registry_at(const struct node_registry *r, size_t i);

/*
 * Check a class's declaration for mistakes registration must not accept: today, a
 * stated n_inputs that differs from the number of declared inputs. Returns 0, or
 * ERR_INVALID with the reason in `e`. node_registry_add panics when this fails.
 */
int node_class_check(const struct node_class *cls, struct err *e);

/* Counts of a class's declared inputs and outputs. */
int node_class_n_inputs(const struct node_class *cls);
int node_class_n_outputs(const struct node_class *cls);
/* Index of input `name` or -1. */
int node_class_input_index(const struct node_class *cls, const char *name);
static inline int node_class_is_output(const struct node_class *cls)
{
    return (cls->flags & NODE_CLASS_OUTPUT) != 0;
}

/* Whether `type` is a widget type (INT/FLOAT/STRING/BOOLEAN/COMBO). */
int node_type_is_widget(const char *type);

/*
 * The choices of a COMBO input right now (static list, models folder or
 * options_fn). `out` must be initialised; it is appended to.
 */
void node_input_options(const struct node_env *env, const struct node_input_def *in,
                        struct node_strlist *out);

#endif

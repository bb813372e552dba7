/*
 * node_run — what a node sees while it runs: its inputs, outputs, folders, the
 * progress/preview channel, the interrupt flag and error reporting.
 *
 * graph/ fills a struct node_ctx for each node it executes and calls the class's
 * run(c). Inputs are indexed like the class's declared inputs: a family names the
 * indices in an enum beside its declaration (ending in an _N member that the class
 * states as .n_inputs, checked at registration) and reads node_in_at / node_in_*_at;
 * there are no by-name readers. A node:
 *   - reads inputs (borrowed; never writes into them: make a new value instead),
 *   - sets each output with node_set_output (transfers one reference),
 *   - output nodes add UI results (saved images) with node_ui_add_image,
 *   - long loops call node_progress(c, i + 1, n, preview) each step: it returns
 *     ERR_INTERRUPTED when the user interrupted, and the node must then return
 *     that code at once (after freeing what it holds),
 *   - failures return node_fail(c, "RuntimeError", "message ...") whose result is
 *     the negative code to return; the text becomes execution_error's
 *     exception_message and the type its exception_type. Use ComfyUI's types so
 *     users' tooling recognises them: "RuntimeError", "ValueError",
 *     "FileNotFoundError", "torch.OutOfMemoryError".
 *
 * Threads: everything here is called on the executor thread, inside run().
 */
#ifndef LATENTD_NODES_NODE_RUN_H
#define LATENTD_NODES_NODE_RUN_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "err.h"
#include "node_value.h"

struct node_class;
struct mm; /* memory/memmgr.h */

/* Folders and settings (borrowed from the server's config). */
struct node_env {
    const char *models_dir; /* <base>/models */
    const char *input_dir;
    const char *output_dir;
    const char *temp_dir;
    int disable_metadata;   /* no PNG text chunks */
    int preview_size;       /* px */
    struct mm *mm;          /* borrowed: the executor's memory manager; NULL = no model
                               may run (model nodes then fail with a clear error) */
};

/* A PNG/tEXt key-value pair handed to SaveImage (hidden inputs). */
struct node_text_chunk {
    const char *key;   /* borrowed */
    const char *value; /* borrowed; ASCII JSON text */
};

/* One UI image result ({"filename", "subfolder", "type"}). */
struct node_ui_image {
    char *filename;  /* owned */
    char *subfolder; /* owned, '/' separated, "" for none */
    const char *type; /* static: "output", "temp", "input" */
};

/* Callbacks graph/ provides for the running node. */
struct node_hooks {
    void *user;
    /* Progress; `rgb` (3 bytes per pixel, w*h, may be NULL) is a preview image.
     * Returns ERR_INTERRUPTED when the run must stop. */
    int (*progress)(void *user, double value, double max, const uint8_t *rgb, int w, int h);
    int (*interrupted)(void *user); /* non-zero when interrupted */
    /* Optional (NULL: the image is dropped): progress carrying a full-size image sent
     * to the client as a PNG whatever --preview-method says (SaveImageWebsocket).
     * `px` is 8-bit, c = 3 or 4 channels. Returns ERR_INTERRUPTED when the run must stop. */
    int (*image)(void *user, double value, double max, const uint8_t *px, int w, int h, int c);
};

struct node_ctx {
    const struct node_class *cls;   /* borrowed */
    const char *node_id;            /* borrowed */
    const char *prompt_id;          /* borrowed */
    const struct node_env *env;     /* borrowed */
    struct value **inputs;          /* borrowed; [n_inputs], NULL when absent */
    struct value **outputs;         /* [n_outputs]; set with node_set_output */

    /* Hidden inputs (NULL when not declared or unavailable). */
    const char *prompt_json;                 /* PROMPT: the whole prompt, ASCII JSON */
    const struct node_text_chunk *pnginfo;   /* EXTRA_PNGINFO: key -> JSON text */
    int n_pnginfo;
    void **instance;                 /* per-node-instance state slot (see node_instance) */

    /* Results other than outputs. */
    struct node_ui_image *ui_images; /* owned by the ctx */
    int n_ui_images, cap_ui_images;
    int has_ui;                      /* the node produced a UI result (possibly empty) */
    const char *ui_key;              /* static; the UI list's key, NULL = "images" */
    unsigned char ui_animated;       /* add "animated": [true] to the UI (SaveAnimatedPNG) */

    /* Error (set by node_fail). */
    char exc_type[64];
    struct buf exc_message; /* ptr is NULL until the first node_fail */

    const struct node_hooks *hooks; /* borrowed */
};

/* The value of input `index` (the class's declared order); NULL when absent
 * (optional) or out of range. */
struct value *node_in_at(const struct node_ctx *c, int index);
/* Typed readers for widget inputs by declared index; the graph guarantees presence
 * and type after validation for required inputs. For an absent optional input they
 * return the declared default, or 0 / "" when none is declared. */
int64_t node_in_int_at(const struct node_ctx *c, int index);
double node_in_float_at(const struct node_ctx *c, int index);
const char *node_in_str_at(const struct node_ctx *c, int index);
int node_in_bool_at(const struct node_ctx *c, int index);

/* The declared name of input `index`, for messages about it (static). An index
 * outside the declaration is a bug in the node (ASSERT). */
const char *node_in_name(const struct node_ctx *c, int index);

/*
 * Fail the node with the error a model or tensor call returned: rc ERR_DEVICE_OOM is
 * ComfyUI's torch.OutOfMemoryError, anything else a RuntimeError; the message is e's
 * (err_str(rc) when e has none). Returns the node_fail code.
 */
int node_fail_err(struct node_ctx *c, int rc, const struct err *e);

/*
 * A zero-filled host tensor for this node (node_value.h shapes), or NULL after
 * node_fail() when a dimension is not positive (RuntimeError) or the tensor would
 * not fit in the host memory available now (torch.OutOfMemoryError, with the size
 * asked for: value_try_new_tensor).
 * Use these for every allocation whose size comes from user input, so a huge
 * EmptyImage is an execution_error rather than an aborted server.
 */
struct value *node_new_tensor(struct node_ctx *c, const char *type, int ndim, const int64_t *shape);
struct value *node_new_image(struct node_ctx *c, int64_t b, int64_t h, int64_t w, int64_t ch);
struct value *node_new_mask(struct node_ctx *c, int64_t b, int64_t h, int64_t w);

/* Set output `index`, taking over the caller's reference to v. */
void node_set_output(struct node_ctx *c, int index, struct value *v);

/* Record a UI image (strings copied); marks the node as having a UI result. */
void node_ui_add_image(struct node_ctx *c, const char *filename, const char *subfolder,
                       const char *type);

/* Report progress (value out of max), optionally with an RGB preview. Returns 0 or
 * ERR_INTERRUPTED. */
int node_progress(struct node_ctx *c, double value, double max, const uint8_t *rgb, int w,
                  int h);
/* Report progress with a full-size image for the client, sent as a PNG binary frame
 * between this node's `executing` and the next one (ComfyUI's
 * ProgressBar.update_absolute with a ("PNG", image, None) preview). Returns 0 or
 * ERR_INTERRUPTED. */
int node_progress_image(struct node_ctx *c, double value, double max, const uint8_t *px, int w,
                        int h, int ch);
/* Non-zero when the user asked to stop; check it in long loops without progress. */
int node_interrupted(struct node_ctx *c);

/* Record the failure (printf-style message) and return ERR_INVALID (or use
 * node_fail_code for another code). `exc_type` like "RuntimeError". */
int node_fail(struct node_ctx *c, const char *exc_type, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int node_fail_code(struct node_ctx *c, int code, const char *exc_type, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Per-node-instance state: *node_instance(c) is NULL the first time a given (node
 * id, class) runs, and keeps whatever the node stored there while that pair keeps
 * appearing in consecutive prompts; it is freed with the class's instance_free. */
static inline void **node_instance(struct node_ctx *c)
{
    return c->instance;
}

/* ctx lifecycle, for graph/ (and tests that run a node directly). */
void node_ctx_init(struct node_ctx *c, const struct node_class *cls, const char *node_id,
                   const struct node_env *env, struct value **inputs, struct value **outputs);
/* Frees UI records and the error text; does not touch inputs/outputs. */
void node_ctx_release(struct node_ctx *c);

#endif

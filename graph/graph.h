/*
 * graph — the contract between server/ and everything below it.
 *
 * The server hands prompts to this layer as cJSON (the API-format graph, exactly
 * as POSTed) and gets back ComfyUI-shaped validation results, /object_info JSON,
 * and a stream of execution events. Nothing below graph/ sees JSON: graph/
 * parses the prompt into native structs first.
 *
 * Threads:
 *   - graph_validate, graph_object_info_json: HTTP handler threads, concurrently
 *     (they only read the node registry and the model folders).
 *   - graph_execute, graph_free_memory: the executor thread only (one per
 *     context). graph_execute blocks until the prompt is done.
 *   - graph_interrupt: any thread (sets an atomic flag).
 *
 * Event order (comfy-api.md §4.5): graph_execute emits execution_start,
 * execution_cached, progress_state, executing{node}, progress, previews,
 * executed, and on failure execution_error / execution_interrupted. The server
 * then writes history, removes the running item and itself emits
 * execution_success (on success), status, and the final executing{node:null}.
 */
#ifndef LATENTD_GRAPH_GRAPH_H
#define LATENTD_GRAPH_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "err.h"

struct node_registry;

enum graph_cache_mode {
    GRAPH_CACHE_CLASSIC, /* --cache-classic (default): keep the last run's outputs */
    GRAPH_CACHE_LRU,     /* --cache-lru N */
    GRAPH_CACHE_NONE,    /* --cache-none */
};

enum graph_preview_method {
    GRAPH_PREVIEW_NONE,      /* ComfyUI's default: no binary frames at all */
    GRAPH_PREVIEW_AUTO,      /* = latent2rgb */
    GRAPH_PREVIEW_LATENT2RGB,
};

struct mm_config; /* memory/memmgr.h */

/* Everything below the server needs from the command line. Strings are borrowed
 * for the context's lifetime (owned by the server's config). */
struct graph_config {
    const char *base_dir;     /* --base-directory */
    const char *models_dir;   /* <base>/models: checkpoints/, loras/, vae/, embeddings/ ... */
    const char *input_dir;    /* --input-directory */
    const char *output_dir;   /* --output-directory */
    const char *temp_dir;     /* --temp-directory */
    enum graph_cache_mode cache_mode;
    int cache_lru_size;       /* entries, for GRAPH_CACHE_LRU */
    enum graph_preview_method preview_method;
    int preview_size;         /* px, --preview-size (default 512) */
    int disable_metadata;     /* --disable-metadata: no PNG text chunks */
    /* The memory manager's flags as the server parsed them, passed to mm_new as they
     * are; borrowed for the graph_new call. NULL = mm_config_init's defaults. */
    const struct mm_config *mm;
};

struct graph_ctx; /* opaque */

/* Create a context (opens the device, builds the node registry). NULL + message on
 * failure. Free with graph_free. */
struct graph_ctx *graph_new(const struct graph_config *cfg, struct err *e);
void graph_free(struct graph_ctx *g);

/* ---- validation (HTTP threads) ------------------------------------------------- */

/* A prompt in native form: nodes, links resolved to indices, constants typed for
 * their declared inputs. Made by validation (or graph_prompt_parse), run by
 * graph_execute. It borrows the JSON it was made from, which must outlive it. */
struct graph_prompt;

struct graph_validation {
    int ok;            /* 1: queue it (some outputs may still have node_errors) */
    struct graph_prompt *prompt; /* owned; when ok: the coerced prompt in native form,
                                    for graph_job.native (free with graph_prompt_free) */
    cJSON *error;      /* owned; {"type","message","details","extra_info"} or NULL when ok */
    cJSON *node_errors;/* owned; always an object, possibly empty */
    cJSON *outputs;    /* owned; array of output node ids (strings) to execute, valid ones only */
};

/*
 * Validate `prompt` (the "prompt" member of the POST body) exactly as ComfyUI does
 * (comfy-api.md §5). Constants are coerced in place with Python's semantics, so the
 * caller stores the coerced prompt. Fills *out; release with graph_validation_release.
 * Returns 0 (even when the prompt is invalid: see out->ok); <0 only on internal error.
 */
int graph_validate(struct graph_ctx *g, cJSON *prompt, struct graph_validation *out);
/* Frees everything still owned, prompt included (take it first to keep it). */
void graph_validation_release(struct graph_validation *v);

/* A prompt validated earlier (a job restored from the store) in native form, without
 * validating again; NULL when `prompt` is not an object. Borrows `prompt`. Any thread;
 * free with graph_prompt_free (NULL is a no-op). */
struct graph_prompt *graph_prompt_parse(struct graph_ctx *g, cJSON *prompt);
void graph_prompt_free(struct graph_prompt *p);

/*
 * The model files `p` names as constants: each input declared with a models folder,
 * as "folder/name", sorted, unique, joined by '\n' ("" for none). A cluster worker
 * keeps these loaded after running the prompt, so the store's claim can send the next
 * prompt naming them to it (model affinity). Caller frees with xfree. Any thread.
 */
char *graph_prompt_model_files(const struct graph_prompt *p);

/*
 * /object_info: every node class (class_name NULL) or one ("{}" when unknown), as
 * JSON text in ComfyUI's shape, including exact 64-bit integers (the seed maximum
 * 18446744073709551615) that cJSON's doubles cannot print. Model combos list the
 * files on disk now. Caller frees with xfree.
 */
char *graph_object_info_json(struct graph_ctx *g, const char *class_name);

/* ---- execution (executor thread) --------------------------------------------------- */

/* Callbacks the server provides; called on the executor thread. */
struct graph_events {
    void *user;
    /* A text message {"type": type, "data": data}; ownership of `data` passes to the
     * callee. The server routes it per comfy-api.md §4.3 using the job's client id. */
    void (*send)(void *user, const char *type, cJSON *data);
    /* A preview image for the running node: JPEG (image_type 1) or PNG (2). Bytes are
     * borrowed for the call. `node_id` and `prompt_id` fill the metadata variant (§4.6). */
    void (*preview)(void *user, int image_type, const void *bytes, size_t n,
                    const char *node_id, const char *prompt_id);
};

struct graph_job {
    const char *prompt_id;
    cJSON *prompt;             /* borrowed; validated and coerced (the PROMPT hidden input) */
    /* Borrowed: `prompt` in native form, what the executor runs. NULL: the executor
     * parses `prompt` itself (tests and fuzzers that run raw prompts). */
    const struct graph_prompt *native;
    cJSON *extra_data;         /* borrowed; may be NULL (extra_pnginfo goes into PNGs) */
    cJSON *outputs_to_execute; /* borrowed; array of node ids */
};

enum graph_status {
    GRAPH_STATUS_SUCCESS,
    GRAPH_STATUS_ERROR,
    GRAPH_STATUS_INTERRUPTED,
};

struct graph_result {
    enum graph_status status;
    cJSON *outputs;  /* owned; {node_id: ui_output} for history "outputs" */
    cJSON *messages; /* owned; [[event, data], ...] for history status.messages, in order */
    cJSON *meta;     /* owned; {node_id: {"node_id","display_node","parent_node","real_node_id"}} */
};

/* Run one prompt. Emits events through `ev`; fills *out (release with
 * graph_result_release). Returns 0 whatever the prompt's outcome; <0 only when the
 * context itself is broken. Checks the interrupt flag between nodes and at every
 * progress point; the flag is cleared when a new prompt starts. */
int graph_execute(struct graph_ctx *g, const struct graph_job *job, const struct graph_events *ev,
                  struct graph_result *out);
void graph_result_release(struct graph_result *r);

/* Ask the running prompt to stop (any thread). */
void graph_interrupt(struct graph_ctx *g);

/* POST /free: unload models and/or drop the output cache. Executor thread only; the
 * server defers it until the executor is idle. */
void graph_free_memory(struct graph_ctx *g, int unload_models, int free_memory);

/* /system_stats "devices" entry for the active device, as a cJSON object (owned by the
 * caller). Any thread. */
cJSON *graph_device_stats(struct graph_ctx *g);

/* ---- additions (graph owner) ----------------------------------------------------------- */

/*
 * Parse JSON text like cJSON_ParseWithLength, but keep integer literals beyond
 * 2^53 exact: they become cJSON raw items holding the literal (cJSON_IsRaw is true,
 * cJSON_IsNumber false; they print back verbatim). Use it for POST /prompt bodies
 * so seeds up to 18446744073709551615 survive. Returns NULL on a syntax error,
 * including anything but whitespace after the value (Python's json.loads: "Extra data").
 * Any thread.
 */
cJSON *graph_json_parse(const char *text, size_t len);

/*
 * graph_validate with POST /prompt's `partial_execution_targets`: only output
 * nodes listed in `targets` (a JSON array of id strings; NULL = all) are used.
 */
int graph_validate_targets(struct graph_ctx *g, cJSON *prompt, const cJSON *targets,
                           struct graph_validation *out);

/* The context's node registry (nodes/node_registry.h). Tests and embedders may
 * register extra classes before the context is shared; never after. */
struct node_registry *graph_registry(struct graph_ctx *g);

/* Number of node results in the output cache (tests, /free). Executor thread. */
size_t graph_cache_count(struct graph_ctx *g);

#endif

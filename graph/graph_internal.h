/*
 * graph_internal — what graph/'s files share: the parsed prompt, the context, the
 * signature hash, the output cache and the JSON helpers. Not a public header
 * (server/ includes only graph.h).
 *
 * Threads: gprompt_* and the JSON helpers are pure (any thread); the cache and
 * the executor state belong to the executor thread.
 */
#ifndef LATENTD_GRAPH_GRAPH_INTERNAL_H
#define LATENTD_GRAPH_GRAPH_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "buf.h"
#include "graph.h"
#include "node_registry.h"
#include "node_run.h"
#include "node_value.h"

/* ---- the parsed prompt ------------------------------------------------------------- */

/* Streaming hash used for signatures (graph_cache.c). */
struct ghash {
    uint64_t a, b;
};

/*
 * A constant typed for its declared input, held in place: no value is allocated
 * until a node binds it (gconst_value), so a validated prompt costs no heap object
 * per constant (a 10k-node prompt's 10k values were most of the memory a prompt
 * took and gave back, paid again in page faults by the next one). GCONST_NONE: no
 * scalar form; the executor makes the value from the JSON (graph__const_value),
 * which gives none for a constant on a socket input.
 */
enum gconst_kind {
    GCONST_NONE = 0,
    GCONST_INT,    /* i, big (above INT64_MAX) */
    GCONST_FLOAT,  /* f */
    GCONST_BOOL,   /* i: 0 or 1 */
    GCONST_STRING, /* s: borrowed from the prompt's JSON */
};

struct gconst {
    union {
        int64_t i;
        double f;
        const char *s;
    };
    uint8_t kind; /* enum gconst_kind */
    uint8_t big;
};

/* One declared input of one node, as the prompt gives it. */
struct gin {
    cJSON *json;   /* borrowed from the prompt; NULL when the input is absent */
    int32_t src;   /* index of the source node for a link, else -1 */
    int32_t slot;  /* output slot of the link */
    /* The constant typed once from the coerced JSON (by validation's check of the
     * constant, or by gprompt_type_constants). GCONST_NONE for a link, an absent
     * input, a constant without a scalar form, and in a validated prompt for the
     * nodes validation did not reach (none of them can run; the executor types one
     * from its JSON if an IS_CHANGED needs it, as for a raw prompt). */
    struct gconst konst;
};

struct gnode {
    const char *id;                 /* borrowed (the prompt's key) */
    cJSON *json;                    /* borrowed: the node object */
    cJSON *inputs;                  /* borrowed: its "inputs" member (any type), NULL when
                                       absent; set for known classes only */
    const struct node_class *cls;   /* NULL when missing/unknown (validation reports it) */
    int n_in, n_out;
    struct gin *in;                 /* [n_in], declared order; points into gprompt.ins */
    uint16_t *key_order;            /* [n_keys]: declared indices in JSON key order */
    int n_keys;
    /* What of the node's signature the prompt alone decides (class, id where the class
     * sees it, each present input's constant or that it is a link), hashed once by
     * gprompt_hash_inputs, so a run only adds IS_CHANGED and its sources' signatures
     * and never reads the JSON again. sig_open: an input links to no node (the node
     * gets no signature). */
    struct ghash sig_base;
    uint8_t sig_open;
};

struct gprompt {
    struct gnode *nodes;   /* owned, prompt key order; one block with the three below */
    int n;
    struct gin *ins;       /* all nodes' inputs (in nodes' block) */
    uint16_t *keys;        /* (in nodes' block) */
    int32_t *slots;        /* id -> index hash table (in nodes' block) */
    size_t nslots;
};

/*
 * Parse `prompt` (an object of node objects) into native structs. Nodes whose
 * class_type is missing or unknown get cls == NULL (validation reports it).
 * Links are resolved to node indices where possible: an input whose value is a
 * 2-array [string, number] naming an existing node with an integral in-range slot
 * gets src/slot; anything else keeps src = -1 (validation inspects the JSON).
 * Returns 0, or ERR_INVALID when `prompt` is not an object.
 */
int gprompt_parse(struct gprompt *p, const struct node_registry *reg, cJSON *prompt);
void gprompt_release(struct gprompt *p);
/* Type every constant input of every known node (gin.konst) from its JSON, and hash
 * the inputs (gprompt_hash_inputs). Call once the JSON is final (after validation's
 * coercion); any thread. */
void gprompt_type_constants(struct gprompt *p);
/* A validated constant's scalar form for its input: 1 with *c set, 0 when it has
 * none (socket types; a STRING or COMBO given a non-string, which
 * graph__const_value makes from the JSON). c->s borrows from v. Any thread. */
int graph__const_type(const struct node_input_def *in, const cJSON *v, struct gconst *c);
/* A validated constant as a value of the input's type (new reference); NULL for
 * socket types. Any thread. */
struct value *graph__const_value(const struct node_input_def *in, const cJSON *v);
/* Input gi's constant as a value (new reference): from gi->konst when typed, else
 * graph__const_value of its JSON. NULL for socket types. Any thread. */
struct value *gin_const_value(const struct gin *gi, const struct node_input_def *in);
/* gnode.sig_base and sig_open of every known node, from the JSON as it is now
 * (graph_sig.c). Any thread. */
void gprompt_hash_inputs(struct gprompt *p);

/* graph.h's opaque native prompt: the parsed prompt with typed constants, and the
 * JSON it borrows (kept for the PROMPT hidden input). */
struct graph_prompt {
    struct gprompt p;
    cJSON *json; /* borrowed (the job owns it); must outlive this */
};

/* A raw prompt (graph_job.native NULL: tests, fuzzers) in native form with its
 * constants left untyped: the executor types those it binds, as a raw run only needs
 * the nodes it executes (and a fully cached run none). */
struct graph_prompt *graph__prompt_parse_untyped(struct graph_ctx *g, cJSON *prompt);
/* Node index by id, or -1. */
int gprompt_find(const struct gprompt *p, const char *id);

/* Whether `v` is a link at execution time: [string, number]. */
int gjson_is_link(const cJSON *v);

/* ---- JSON helpers (graph_json.c) ---------------------------------------------------- */

/* Python repr()/str() of a JSON value, appended to `out`. `as_str`: str() (strings
 * unquoted at top level) instead of repr(). */
void gjson_py(const cJSON *v, int as_str, struct buf *out);
/* Python repr of a string ('abc', "it's"). */
void gjson_py_repr_str(const char *s, struct buf *out);
/* Print compactly and escape every non-ASCII character as a \\u escape (PNG tEXt).
 * Caller frees with xfree. */
char *gjson_print_ascii(const cJSON *v);
/* A JSON number item for an exact 64-bit integer (raw text beyond 2^53). */
cJSON *gjson_int(int64_t i, int big);
/* A JSON number item printing a double as Python does ("8.0"); NaN/inf as null. */
cJSON *gjson_pyfloat(double d);
/* Read a JSON number or raw number item exactly: returns 1 and sets *i and *big when it
 * is an integer literal (within int64 or uint64), 0 for a non-integral number. */
int gjson_get_int(const cJSON *v, int64_t *i, int *big, double *d);
/* Numeric value of a number or raw number item. */
double gjson_number(const cJSON *v);
int gjson_is_number(const cJSON *v); /* cJSON number, or raw item holding a number */

/* ---- object_info (graph_objinfo.c) ---------------------------------------------------- */

/* The input spec as /object_info shows it (["INT", {...}], [[opts], {...}]).
 * `always_opts`: include the options object even when empty (validation's
 * input_config). */
cJSON *gobj_input_spec(const struct node_env *env, const struct node_input_def *in,
                       int always_opts);
cJSON *gobj_node_info(const struct node_env *env, const struct node_class *cls);

/* ---- signatures and the cache (graph_cache.c) --------------------------------------- */

struct gsig {
    uint64_t a, b;
};

struct gcache_entry {
    struct gsig sig;
    int n_out;
    struct value **out; /* owned refs, [n_out] */
    cJSON *ui;          /* owned; the node's UI output, NULL when none */
    uint64_t gen;       /* prompt generation that last used it (LRU) */
    uint64_t used_now;  /* generation of the last prompt that had this key (classic) */
    struct value *_outv[]; /* out's storage: one allocation per entry keeps a lookup's
                              entry and its outputs together */
};

struct gcache {
    struct gcache_entry **e; /* open addressing, NULL = empty, TOMB = deleted */
    size_t nslots, count, tombs;
};

void gcache_init(struct gcache *c);
void gcache_release(struct gcache *c);
void gcache_clear(struct gcache *c);
struct gcache_entry *gcache_get(struct gcache *c, struct gsig sig);
/* Insert (or replace) an entry for sig; takes ownership of `out`'s refs (and frees
 * the array itself) and of `ui`. */
struct gcache_entry *gcache_put(struct gcache *c, struct gsig sig, int n_out,
                                struct value **out, cJSON *ui);
void gcache_remove(struct gcache *c, struct gsig sig);
/* Call fn on every entry; entries for which it returns non-zero are removed. */
void gcache_filter(struct gcache *c, int (*drop)(struct gcache_entry *e, void *u), void *u);

/* The signature hash (struct ghash is defined with the prompt, above). */
void ghash_init(struct ghash *h);
void ghash_u64(struct ghash *h, uint64_t x);
void ghash_bytes(struct ghash *h, const void *p, size_t n);
void ghash_str(struct ghash *h, const char *s);
struct gsig ghash_final(const struct ghash *h);

/* ---- the context ------------------------------------------------------------------ */

struct ginstance; /* per (node id, class) state, graph_exec.c */
struct mm;
struct xnode;     /* graph_run.h */

struct graph_ctx {
    struct graph_config cfg;      /* strings borrowed */
    struct node_env env;
    struct node_registry *reg;    /* owned */
    atomic_int interrupt;         /* set by graph_interrupt */
    struct gcache cache;          /* executor thread */
    uint64_t gen;                 /* prompt generation counter */
    struct ginstance *inst;       /* executor thread */
    int n_inst, cap_inst;
    struct mm *mm;                /* owned: memory manager + compute device */
    /* Executor thread: the per-node arrays of a run, kept for the next one (see
     * graph_exec.c's run_arrays). Owned; [run_cap] each. */
    struct xnode *run_x;
    int32_t *run_started, *run_executed;
    size_t run_cap;
};

void graph__instances_free(struct graph_ctx *g);
/* Free the run arrays graph_execute keeps (graph_free). */
void graph__run_arrays_free(struct graph_ctx *g);

struct mm_report; /* memory/memmgr.h */
/* The memory manager's reports of one node as history meta's "memory" array (new
 * cJSON array, caller owns it). graph_mmjson.c. */
cJSON *graph__mm_reports_json(const struct mm_report *r, int n);

#endif

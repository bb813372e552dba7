/*
 * node_value — the values that flow on a graph's links (ComfyUI's data types).
 *
 * A value is a refcounted, immutable-once-published object with a type name (the
 * string ComfyUI uses on sockets: "INT", "IMAGE", "MODEL", ...) and a kind that
 * says how its payload is stored:
 *
 *   VALUE_INT      INT: 64-bit. Seeds go up to 2^64-1, so an INT is an int64_t plus
 *                  a flag `big` meaning "the value is (uint64_t)i, above INT64_MAX".
 *                  Use value_u64() for seeds, value_i64() for everything else.
 *   VALUE_FLOAT    FLOAT: a double.
 *   VALUE_STRING   STRING (and combo choices): an owned NUL-terminated string.
 *   VALUE_BOOLEAN  BOOLEAN: i is 0 or 1.
 *   VALUE_TENSOR   IMAGE float32 [B,H,W,C] in 0..1 (channels last, C = 3 or 4) and
 *                  MASK float32 [B,H,W] in 0..1 (1 = masked). Host memory, owned,
 *                  contiguous, row-major.
 *   VALUE_OBJECT   anything else (MODEL, CLIP, VAE, CONDITIONING, LATENT, ...): an
 *                  opaque pointer plus the destructor that runs when the last
 *                  reference goes. This is how model-backed types are added without
 *                  touching this file: value_new_object("MODEL", m, model_release_fn).
 *
 * Ownership: every value_new_* returns one reference owned by the caller. Whoever
 * stores a value elsewhere (the output cache, a node's outputs array, a LATENT dict
 * holding a MASK) takes its own reference with value_ref and drops it with
 * value_unref. The last unref frees the payload (and runs obj_free for objects).
 * So a cached output is handed to every consumer by reference, never copied, and
 * cannot be freed while a consumer still holds it.
 *
 * Immutability: once a value has been stored as a node output, nobody writes its
 * payload again: a node that wants to modify an input makes a new value (e.g.
 * value_new_image + memcpy). This is what makes sharing safe.
 *
 * Threads: refcounts are atomic, so values may be referenced and released from any
 * thread; the payload itself must not be written after publication.
 */
#ifndef LATENTD_NODES_NODE_VALUE_H
#define LATENTD_NODES_NODE_VALUE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#include "buf.h"

enum value_kind {
    VALUE_INT,
    VALUE_FLOAT,
    VALUE_STRING,
    VALUE_BOOLEAN,
    VALUE_TENSOR,
    VALUE_OBJECT,
};

#define VALUE_MAX_DIMS 4

struct value {
    enum value_kind kind;
    const char *type; /* borrowed, static: "INT", "IMAGE", "MODEL" ... */

    int64_t i;  /* INT, BOOLEAN (0/1) */
    int big;    /* INT only: value is (uint64_t)i > INT64_MAX */
    double f;   /* FLOAT */
    char *s;    /* STRING; owned */

    float *data;                    /* TENSOR; owned, numel floats */
    int ndim;                       /* TENSOR: 3 (MASK) or 4 (IMAGE) */
    int64_t shape[VALUE_MAX_DIMS];  /* TENSOR */
    size_t numel;                   /* TENSOR: product of shape */

    void *obj;                      /* OBJECT; owned through obj_free */
    void (*obj_free)(void *obj);    /* OBJECT; may be NULL (nothing to free) */

    int _refs; /* atomic; use value_ref / value_unref */
};

/* Scalars. The string is copied. */
struct value *value_new_int(int64_t v);
struct value *value_new_u64(uint64_t v); /* sets `big` when v > INT64_MAX */
struct value *value_new_float(double v);
struct value *value_new_bool(int v);
struct value *value_new_string(const char *s);

/*
 * A zero-filled float32 host tensor of `type` ("IMAGE", "MASK", or any other
 * tensor-shaped type name) with `ndim` (1..4) dims. Dims must be > 0 and the total
 * must fit in memory; a broken shape is an invariant failure (callers check sizes
 * that come from users first).
 */
struct value *value_new_tensor(const char *type, int ndim, const int64_t *shape);
/*
 * The same for a shape a request controls: 0 and *out set, ERR_INVALID for a dim
 * that is not positive, or ERR_DEVICE_OOM with e in ComfyUI's out-of-memory shape
 * when the tensor does not fit in host memory now (util/alloc.h). Never aborts.
 */
int value_try_new_tensor(const char *type, int ndim, const int64_t *shape, struct value **out,
                         struct err *e);
/* IMAGE [b,h,w,c] and MASK [b,h,w], zero-filled. */
struct value *value_new_image(int64_t b, int64_t h, int64_t w, int64_t c);
struct value *value_new_mask(int64_t b, int64_t h, int64_t w);

/*
 * An opaque object (MODEL, CLIP, VAE, CONDITIONING, LATENT ...). Ownership of
 * `obj` passes to the value; `obj_free(obj)` runs when the last reference is
 * dropped (obj_free may be NULL). `type` must be a static string.
 */
struct value *value_new_object(const char *type, void *obj, void (*obj_free)(void *obj));

/* Take another reference; returns v (NULL-safe). */
struct value *value_ref(struct value *v);
/* Drop a reference; the last one frees the value. value_unref(NULL) is a no-op. */
void value_unref(struct value *v);
/* Current reference count (tests and assertions only). */
int value_refcount(const struct value *v);

/* INT accessors: value_i64 saturates at INT64_MAX for big values; value_u64
 * returns the exact unsigned value (negative values wrap, as numpy's uint64). */
int64_t value_i64(const struct value *v);
uint64_t value_u64(const struct value *v);

/*
 * Append a short human-readable form to `out`, used for execution_error's
 * current_inputs: ints, floats (Python repr style) and strings as they are,
 * tensors as "<IMAGE [1, 64, 64, 3]>", objects as "<MODEL object>".
 */
void value_describe(const struct value *v, struct buf *out);

/*
 * Lists: ComfyUI's OUTPUT_IS_LIST / INPUT_IS_LIST. A list is a VALUE_OBJECT of the
 * items' `type` (static) holding n >= 0 item references; it is immutable like any
 * value. Nodes whose class has NODE_CLASS_INPUT_IS_LIST see each input as a list
 * (node_in_at may return a list or a plain value: read both through the accessors
 * below), and an output declared is_list is set to a list. Every other node sees
 * plain values only: the executor (graph/) runs it once per item.
 *
 * value_new_list takes over the n references in items[] (the array itself is
 * copied; items may be NULL when n is 0).
 */
struct value *value_new_list(const char *type, struct value **items, int n);
/* Whether v is a list (NULL-safe). */
int value_is_list(const struct value *v);
/* Items: a list's count, 1 for a plain value, 0 for NULL. */
int value_list_len(const struct value *v);
/* Item i (borrowed; 0 <= i < value_list_len): a plain value is its own item 0. */
struct value *value_list_at(const struct value *v, int i);

#endif

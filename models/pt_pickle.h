/*
 * pt_pickle — a restricted unpickler for the data.pkl of PyTorch checkpoints, with
 * the guarantees of torch.load(weights_only=True). Private to models/pt_*.c, the loaders
 * that walk a whole document (models/hypernetwork) and tests.
 *
 * Nothing is ever executed: this is a data interpreter, not Python. A GLOBAL only
 * names an entry of a fixed allow-list (pt_globals.c); any other name is refused on
 * the spot, with os/sys/posix/nt refused as blocked modules, as torch does. REDUCE
 * and NEWOBJ apply an allowed global to a tuple by a rule written here for it
 * (rebuild a tensor, make an OrderedDict, or make an inert object that nothing
 * reads); BUILD only on what torch allows it on; SETITEM(S) only on dicts, APPEND(S)
 * only on lists. The opcode set is torch's weights-only set (pickle protocol 2,
 * which torch.save writes): anything else is refused.
 *
 * Hostile input costs bounded memory and time: the VM keeps no recursion (MARK
 * nesting is a stack of positions), lengths are checked against the bytes left
 * before anything is read, memo indices may not run ahead of the memo (pickle
 * assigns them in order), and at most PT_PICKLE_MAX_VALUES objects are made.
 *
 * Storages: a BINPERSID ('storage', <StorageType>, key, location, numel) asks the
 * caller's resolver where storage `key` lies; a tensor rebuilt on it is checked to
 * lie inside it. Values are freed all at once with the document.
 *
 * Pure functions over the caller's buffer (strings borrow from it, so it must
 * outlive the document); any thread.
 */
#ifndef LATENTD_MODELS_PT_PICKLE_H
#define LATENTD_MODELS_PT_PICKLE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "safetensors.h"

#define PT_PICKLE_MAX_VALUES (1u << 22) /* objects per pickle; a state dict makes ~20 each */

enum pt_kind {
    PT_NONE,
    PT_BOOL,
    PT_INT,
    PT_FLOAT,
    PT_STR,     /* text or bytes */
    PT_TUPLE,
    PT_LIST,
    PT_DICT,    /* dict, OrderedDict or Counter */
    PT_GLOBAL,  /* an allowed global itself (a class or function) */
    PT_STORAGE,
    PT_TENSOR,
    PT_OBJECT,  /* made by an allowed global we do not interpret; inert */
};

/* What an allowed global does when applied (REDUCE/NEWOBJ) or used as a type. */
enum pt_global_kind {
    PT_G_ORDERED_DICT,   /* collections.OrderedDict, collections.Counter */
    PT_G_REBUILD_V1,     /* torch._utils._rebuild_tensor */
    PT_G_REBUILD_V2,     /* torch._utils._rebuild_tensor_v2 */
    PT_G_REBUILD_V3,     /* torch._utils._rebuild_tensor_v3 (dtype given apart) */
    PT_G_REBUILD_PARAM,  /* torch._utils._rebuild_parameter(_with_state) */
    PT_G_FROM_TYPE,      /* torch._tensor._rebuild_from_type_v2 */
    PT_G_PARAMETER,      /* torch.nn.parameter.Parameter */
    PT_G_TENSOR_TYPE,    /* torch.Tensor */
    PT_G_SIZE,           /* torch.Size */
    PT_G_STORAGE_TYPE,   /* torch.FloatStorage, ..., torch.UntypedStorage */
    PT_G_DTYPE,          /* torch.float16, ... */
    PT_G_OTHER_TENSOR,   /* sparse, quantized, meta, ... rebuilds: allowed, not loadable */
    PT_G_INERT,          /* everything else allowed: yields a PT_OBJECT */
};

struct pt_global {
    const char *name;         /* "module.qualname" */
    enum pt_global_kind kind;
    int dtype;                /* enum st_dtype, or -1 (none we load, or not a dtype) */
};

struct pt_value;

struct pt_seq {
    struct pt_value **items; /* owned by the document; a dict's are k0, v0, k1, v1, ... */
    size_t n, cap;
    int ordered;             /* PT_DICT made by OrderedDict/Counter (BUILD allowed) */
};

struct pt_storage {
    int dtype;               /* enum st_dtype, or -1 for one we do not load */
    const char *type_name;   /* the storage type's global name */
    uint64_t numel;          /* elements of dtype (bytes for an untyped storage) */
    uint64_t offset;         /* bytes, where the resolver says the data starts */
};

struct pt_tensor {
    const struct pt_value *storage; /* a PT_STORAGE of the same document */
    int dtype;                      /* enum st_dtype, or -1 */
    uint64_t offset;                /* elements into the storage */
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    int64_t stride[ST_MAX_DIMS];    /* elements */
};

struct pt_value {
    enum pt_kind kind;
    const struct pt_global *global; /* PT_GLOBAL: itself; PT_OBJECT: what made it */
    union {
        int64_t i;      /* PT_BOOL, PT_INT */
        double f;       /* PT_FLOAT */
        struct {
            const char *ptr; /* borrowed from the pickle bytes; not NUL-terminated */
            size_t len;
        } str;
        struct pt_seq seq;  /* PT_TUPLE, PT_LIST, PT_DICT */
        struct pt_storage st;
        struct pt_tensor t;
    } u;
};

/*
 * Where storage `key` lies: set *offset (bytes, in the caller's address space of
 * choice) and *nbytes, or return a negative ERR_* with a message in `e`.
 */
struct pt_storage_resolver {
    int (*find)(void *user, const char *key, size_t key_len, uint64_t *offset,
                uint64_t *nbytes, struct err *e);
    void *user;
};

struct pt_doc; /* every value of one pickle */

/*
 * Run the pickle in buf[0, len). Returns 0 and a new document in *out (caller frees
 * with pt_doc_free; its strings borrow from buf), or a negative ERR_* with a message
 * naming `what` and the byte offset in `e`: ERR_DENIED for a global or operation the
 * allow-list refuses, ERR_UNSUPPORTED for an opcode outside torch's set, ERR_INVALID
 * for a malformed stream, ERR_TOO_LARGE past PT_PICKLE_MAX_VALUES.
 */
int pt_pickle_load(const uint8_t *buf, size_t len, const struct pt_storage_resolver *res,
                   const char *what, struct pt_doc **out, struct err *e);
/* The value STOP returned; borrowed from the document. */
const struct pt_value *pt_doc_root(const struct pt_doc *d);
/* Free every value. pt_doc_free(NULL) is a no-op. */
void pt_doc_free(struct pt_doc *d);

/* The last value stored under string key `key` in dict `d` (Python's d[key]), or NULL. */
const struct pt_value *pt_dict_get(const struct pt_value *d, const char *key);

/* "dict", "tensor", ...: a value's Python-ish type name for messages. */
const char *pt_kind_name(const struct pt_value *v);

/* The allow-list entry for "module.name" (name_len bytes), or NULL when not allowed. */
const struct pt_global *pt_global_find(const char *name, size_t name_len);
/* 1 when "module.name" is in a module torch never allows (os, sys, posix, nt). */
int pt_global_blocked(const char *name, size_t name_len);

#endif

/*
 * pt_pickle_impl — internals shared by pt_pickle.c (the opcode loop, values, memo)
 * and pt_reduce.c (what REDUCE, NEWOBJ, BUILD and BINPERSID may do).
 */
#ifndef LATENTD_MODELS_PT_PICKLE_IMPL_H
#define LATENTD_MODELS_PT_PICKLE_IMPL_H

#include "pt_pickle.h"

struct pt_slab;

struct pt_doc {
    struct pt_slab *slabs;        /* owned: every value, newest slab first */
    size_t n_values;
    const struct pt_value *root;  /* borrowed from the slabs */
};

struct pt_vm {
    const uint8_t *buf;           /* borrowed: the pickle */
    size_t len, pos;              /* bytes */
    size_t op_at;                 /* offset of the opcode being run, for messages */
    const char *what;             /* the file, for messages */
    const struct pt_storage_resolver *res;
    struct err *e;
    struct pt_doc *doc;           /* owned until handed out */
    struct pt_value **stack;      /* owned array; values borrowed from doc */
    size_t sp, stack_cap;
    size_t *marks;                /* owned: stack heights at each MARK */
    size_t n_marks, marks_cap;
    struct pt_value **memo;       /* owned array; values borrowed from doc */
    size_t n_memo, memo_cap;
};

/* Record a failure at the current opcode ("'<what>': data.pkl byte N: ..."). */
int pt__fail(struct pt_vm *vm, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A new value of `kind`, or NULL after pt__fail (ERR_TOO_LARGE) past the cap. */
struct pt_value *pt__new(struct pt_vm *vm, enum pt_kind kind);
/* Append to a tuple/list/dict's items. */
void pt__seq_push(struct pt_value *v, struct pt_value *item);

/* REDUCE: apply callable `fn` (any value) to `args`; the result in *out. */
int pt__reduce(struct pt_vm *vm, const struct pt_value *fn, const struct pt_value *args,
               struct pt_value **out);
/* NEWOBJ: cls.__new__(cls, *args). */
int pt__newobj(struct pt_vm *vm, const struct pt_value *cls, const struct pt_value *args,
               struct pt_value **out);
/* BUILD: may `inst` take `state`? Nothing is changed: states we accept are unused. */
int pt__build(struct pt_vm *vm, const struct pt_value *inst, const struct pt_value *state);
/* BINPERSID: resolve a persistent id into a storage. */
int pt__persistent_load(struct pt_vm *vm, const struct pt_value *pid, struct pt_value **out);

#endif

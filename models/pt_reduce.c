/*
 * pt_reduce.c — what REDUCE, NEWOBJ, BUILD and BINPERSID may do in the restricted
 * unpickler (see pt_pickle.h). Each allowed global has one rule here; nothing is
 * looked up by name at run time and nothing outside the allow-list is callable, so
 * a REDUCE whose callable is anything but an allowed global (the result of another
 * REDUCE, a string, ...) is refused.
 */
#include <string.h>

#include "pt_pickle_impl.h"

/* ---- argument helpers ------------------------------------------------------------ */

static int is_tuple(const struct pt_value *v, size_t min, size_t max)
{
    return v->kind == PT_TUPLE && v->u.seq.n >= min && v->u.seq.n <= max;
}

static const struct pt_value *arg(const struct pt_value *args, size_t i)
{
    return args->u.seq.items[i];
}

/* A tuple of at most ST_MAX_DIMS non-negative ints (a shape or a stride). */
static int int_tuple(struct pt_vm *vm, const struct pt_value *v, const char *what,
                     int64_t *out, int *n)
{
    if (v->kind != PT_TUPLE)
        return pt__fail(vm, ERR_INVALID, "tensor %s is a %s, not a tuple", what,
                        pt_kind_name(v));
    if (v->u.seq.n > ST_MAX_DIMS)
        return pt__fail(vm, ERR_UNSUPPORTED, "tensor with %zu dimensions (at most %d)",
                        v->u.seq.n, ST_MAX_DIMS);
    for (size_t i = 0; i < v->u.seq.n; i++) {
        const struct pt_value *x = v->u.seq.items[i];
        if (x->kind != PT_INT || x->u.i < 0)
            return pt__fail(vm, ERR_INVALID, "tensor %s entries must be non-negative ints",
                            what);
        out[i] = x->u.i;
    }
    *n = (int)v->u.seq.n;
    return 0;
}

/* ---- tensors ------------------------------------------------------------------------ */

/* Every element the view can reach lies inside its storage (torch's setStorage check). */
static int check_extent(struct pt_vm *vm, const struct pt_tensor *t)
{
    const struct pt_storage *st = &t->storage->u.st;
    if (t->dtype < 0 || st->dtype < 0)
        return 0; /* not loadable anyway: refused when someone asks for it */
    size_t el = st_dtype_size((enum st_dtype)t->dtype);
    unsigned __int128 avail = (unsigned __int128)st->numel * st_dtype_size(st->dtype) / el;
    unsigned __int128 last = t->offset;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] == 0)
            return 0; /* empty: reaches nothing */
        last += (unsigned __int128)(t->shape[i] - 1) * (uint64_t)t->stride[i];
    }
    if (last >= avail)
        return pt__fail(vm, ERR_INVALID,
                        "tensor view reaches element %llu of a storage of %llu elements",
                        (unsigned long long)(last > UINT64_MAX ? UINT64_MAX : last),
                        (unsigned long long)avail);
    return 0;
}

/*
 * _rebuild_tensor(storage, offset, size, stride)
 * _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata])
 * _rebuild_tensor_v3(storage, offset, size, stride, requires_grad, hooks, dtype[, metadata])
 */
static int rebuild_tensor(struct pt_vm *vm, enum pt_global_kind kind,
                          const struct pt_value *args, struct pt_value **out)
{
    size_t min = kind == PT_G_REBUILD_V1 ? 4 : kind == PT_G_REBUILD_V2 ? 6 : 7;
    if (!is_tuple(args, min, min + (kind != PT_G_REBUILD_V1)))
        return pt__fail(vm, ERR_INVALID, "tensor rebuild with malformed arguments");
    const struct pt_value *st = arg(args, 0), *off = arg(args, 1);
    if (st->kind != PT_STORAGE || off->kind != PT_INT || off->u.i < 0)
        return pt__fail(vm, ERR_INVALID, "tensor rebuild without a storage and offset");
    struct pt_value *v = pt__new(vm, PT_TENSOR);
    if (!v)
        return vm->e->code;
    struct pt_tensor *t = &v->u.t;
    int nd_stride, rc;
    t->storage = st;
    t->offset = (uint64_t)off->u.i;
    t->dtype = st->u.st.dtype;
    if ((rc = int_tuple(vm, arg(args, 2), "size", t->shape, &t->ndim)) < 0 ||
        (rc = int_tuple(vm, arg(args, 3), "stride", t->stride, &nd_stride)) < 0)
        return rc;
    if (nd_stride != t->ndim)
        return pt__fail(vm, ERR_INVALID, "tensor with %d sizes but %d strides", t->ndim,
                        nd_stride);
    if (kind == PT_G_REBUILD_V3) {
        const struct pt_value *dt = arg(args, 6);
        if (dt->kind != PT_GLOBAL || dt->global->kind != PT_G_DTYPE)
            return pt__fail(vm, ERR_INVALID, "_rebuild_tensor_v3 without a dtype");
        t->dtype = dt->global->dtype;
    }
    if ((rc = check_extent(vm, t)) < 0)
        return rc;
    *out = v;
    return 0;
}

/* _rebuild_parameter(data, requires_grad, hooks[, state]) and Parameter(data, ...): the
 * tensor itself (requires_grad and hooks mean nothing for inference). */
static int tensor_arg0(struct pt_vm *vm, const struct pt_value *args, struct pt_value **out)
{
    if (!is_tuple(args, 1, 4) || arg(args, 0)->kind != PT_TENSOR)
        return pt__fail(vm, ERR_INVALID, "Parameter without a tensor");
    *out = args->u.seq.items[0];
    return 0;
}

static int apply(struct pt_vm *vm, const struct pt_global *g, const struct pt_value *args,
                 int depth, struct pt_value **out);

/* _rebuild_from_type_v2(func, new_type, args, state): func(*args) as new_type. */
static int from_type(struct pt_vm *vm, const struct pt_value *args, int depth,
                     struct pt_value **out)
{
    if (!is_tuple(args, 4, 4))
        return pt__fail(vm, ERR_INVALID, "_rebuild_from_type_v2 with malformed arguments");
    const struct pt_value *fn = arg(args, 0), *type = arg(args, 1), *inner = arg(args, 2);
    if (fn->kind != PT_GLOBAL || type->kind != PT_GLOBAL || inner->kind != PT_TUPLE)
        return pt__fail(vm, ERR_INVALID, "_rebuild_from_type_v2 with malformed arguments");
    if (type->global->kind != PT_G_TENSOR_TYPE && type->global->kind != PT_G_PARAMETER)
        return pt__fail(vm, ERR_UNSUPPORTED, "tensor subclass '%s' is not supported",
                        type->global->name);
    /* One level only: the inner function is a plain rebuild, never this one again. */
    if (depth > 0 || fn->global->kind == PT_G_FROM_TYPE)
        return pt__fail(vm, ERR_DENIED, "nested _rebuild_from_type_v2");
    return apply(vm, fn->global, inner, depth + 1, out);
}

/* An allowed global applied to args, whether by REDUCE or as the inner call above. */
static int apply(struct pt_vm *vm, const struct pt_global *g, const struct pt_value *args,
                 int depth, struct pt_value **out)
{
    switch (g->kind) {
    case PT_G_ORDERED_DICT:
        if (!is_tuple(args, 0, 1) || (args->u.seq.n == 1 && arg(args, 0)->kind != PT_DICT))
            return pt__fail(vm, ERR_UNSUPPORTED, "'%s' called with arguments", g->name);
        if (!(*out = pt__new(vm, PT_DICT)))
            return vm->e->code;
        (*out)->u.seq.ordered = 1;
        for (size_t i = 0; args->u.seq.n == 1 && i < arg(args, 0)->u.seq.n; i++)
            pt__seq_push(*out, arg(args, 0)->u.seq.items[i]); /* Counter({...}) */
        return 0;
    case PT_G_REBUILD_V1:
    case PT_G_REBUILD_V2:
    case PT_G_REBUILD_V3:
        return rebuild_tensor(vm, g->kind, args, out);
    case PT_G_REBUILD_PARAM:
    case PT_G_PARAMETER:
        return tensor_arg0(vm, args, out);
    case PT_G_FROM_TYPE:
        return from_type(vm, args, depth, out);
    case PT_G_SIZE:
        if (!is_tuple(args, 1, 1) || arg(args, 0)->kind != PT_TUPLE)
            return pt__fail(vm, ERR_INVALID, "torch.Size without a tuple");
        *out = args->u.seq.items[0];
        return 0;
    case PT_G_TENSOR_TYPE:
        return pt__fail(vm, ERR_UNSUPPORTED, "legacy torch.Tensor construction");
    default: /* storage types, dtypes, other tensors, inert: an object nothing reads */
        if (!(*out = pt__new(vm, PT_OBJECT)))
            return vm->e->code;
        (*out)->global = g;
        return 0;
    }
}

int pt__reduce(struct pt_vm *vm, const struct pt_value *fn, const struct pt_value *args,
               struct pt_value **out)
{
    if (fn->kind != PT_GLOBAL)
        return pt__fail(vm, ERR_DENIED, "REDUCE calls a %s, not an allowed global",
                        pt_kind_name(fn));
    if (args->kind != PT_TUPLE)
        return pt__fail(vm, ERR_INVALID, "REDUCE arguments are a %s, not a tuple",
                        pt_kind_name(args));
    return apply(vm, fn->global, args, 0, out);
}

int pt__newobj(struct pt_vm *vm, const struct pt_value *cls, const struct pt_value *args,
               struct pt_value **out)
{
    if (cls->kind != PT_GLOBAL || args->kind != PT_TUPLE)
        return pt__fail(vm, ERR_DENIED, "NEWOBJ on a %s", pt_kind_name(cls));
    switch (cls->global->kind) {
    case PT_G_PARAMETER:
    case PT_G_ORDERED_DICT:
        return apply(vm, cls->global, args, 0, out);
    case PT_G_INERT:
        if (!(*out = pt__new(vm, PT_OBJECT)))
            return vm->e->code;
        (*out)->global = cls->global;
        return 0;
    default:
        return pt__fail(vm, ERR_DENIED, "NEWOBJ on '%s' is not allowed", cls->global->name);
    }
}

int pt__build(struct pt_vm *vm, const struct pt_value *inst, const struct pt_value *state)
{
    (void)state; /* an OrderedDict's __dict__ (_metadata) or an inert object's state */
    if ((inst->kind == PT_DICT && inst->u.seq.ordered) || inst->kind == PT_OBJECT)
        return 0;
    if (inst->kind == PT_TENSOR)
        return pt__fail(vm, ERR_UNSUPPORTED, "BUILD on a tensor (legacy set_) is not supported");
    return pt__fail(vm, ERR_DENIED, "BUILD on a %s is not allowed", pt_kind_name(inst));
}

/* ---- storages ------------------------------------------------------------------------ */

static size_t storage_elem_size(const struct pt_global *g)
{
    return g->dtype >= 0 ? st_dtype_size((enum st_dtype)g->dtype) : 0;
}

/* ('storage', StorageType, key, location, numel), as torch.save's persistent_id. */
int pt__persistent_load(struct pt_vm *vm, const struct pt_value *pid, struct pt_value **out)
{
    if (!is_tuple(pid, 5, 5) || arg(pid, 0)->kind != PT_STR ||
        arg(pid, 0)->u.str.len != 7 || memcmp(arg(pid, 0)->u.str.ptr, "storage", 7) != 0)
        return pt__fail(vm, ERR_DENIED, "persistent id is not a storage");
    const struct pt_value *type = arg(pid, 1), *key = arg(pid, 2), *numel = arg(pid, 4);
    if (type->kind != PT_GLOBAL || type->global->kind != PT_G_STORAGE_TYPE ||
        key->kind != PT_STR || arg(pid, 3)->kind != PT_STR || numel->kind != PT_INT ||
        numel->u.i < 0)
        return pt__fail(vm, ERR_INVALID, "malformed storage persistent id");
    uint64_t offset, nbytes;
    if (!vm->res || vm->res->find(vm->res->user, key->u.str.ptr, key->u.str.len, &offset,
                                  &nbytes, vm->e) < 0)
        return vm->res ? vm->e->code : pt__fail(vm, ERR_INVALID, "storage without an archive");
    size_t el = storage_elem_size(type->global);
    if (el && (unsigned __int128)(uint64_t)numel->u.i * el != nbytes)
        return pt__fail(vm, ERR_INVALID,
                        "storage '%.*s' holds %llu bytes but %s of %lld elements needs %llu",
                        (int)key->u.str.len, key->u.str.ptr, (unsigned long long)nbytes,
                        type->global->name, (long long)numel->u.i,
                        (unsigned long long)((uint64_t)numel->u.i * el));
    struct pt_value *v = pt__new(vm, PT_STORAGE);
    if (!v)
        return vm->e->code;
    v->u.st.dtype = type->global->dtype;
    v->u.st.type_name = type->global->name;
    v->u.st.numel = (uint64_t)numel->u.i;
    v->u.st.offset = offset;
    *out = v;
    return 0;
}

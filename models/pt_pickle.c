/*
 * pt_pickle.c — the opcode loop of the restricted unpickler (see pt_pickle.h):
 * reading operands, the stack, MARKs, the memo and the values' storage.
 */
#include "pt_pickle.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "pt_pickle_impl.h"

#define SLAB_VALUES 1024
#define GLOBAL_NAME_MAX 512 /* bytes of "module.name"; longer names are not allowed ones */

struct pt_slab {
    struct pt_slab *next;
    size_t used;
    struct pt_value v[SLAB_VALUES];
};

/* ---- values --------------------------------------------------------------------- */

int pt__fail(struct pt_vm *vm, int code, const char *fmt, ...)
{
    char msg[ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return err_set(vm->e, code, "'%s': data.pkl byte %zu: %s", vm->what, vm->op_at, msg);
}

struct pt_value *pt__new(struct pt_vm *vm, enum pt_kind kind)
{
    struct pt_doc *d = vm->doc;
    if (d->n_values >= PT_PICKLE_MAX_VALUES) {
        pt__fail(vm, ERR_TOO_LARGE, "more than %u objects", PT_PICKLE_MAX_VALUES);
        return NULL;
    }
    if (!d->slabs || d->slabs->used == SLAB_VALUES) {
        struct pt_slab *s = xmalloc(sizeof(*s));
        s->next = d->slabs;
        s->used = 0;
        d->slabs = s;
    }
    struct pt_value *v = &d->slabs->v[d->slabs->used++];
    d->n_values++;
    memset(v, 0, sizeof(*v));
    v->kind = kind;
    return v;
}

void pt__seq_push(struct pt_value *v, struct pt_value *item)
{
    struct pt_seq *s = &v->u.seq;
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 4;
        s->items = xrealloc(s->items, s->cap * sizeof(*s->items));
    }
    s->items[s->n++] = item;
}

static int has_items(const struct pt_value *v)
{
    return v->kind == PT_TUPLE || v->kind == PT_LIST || v->kind == PT_DICT;
}

void pt_doc_free(struct pt_doc *d)
{
    if (!d)
        return;
    for (struct pt_slab *s = d->slabs, *next; s; s = next) {
        next = s->next;
        for (size_t i = 0; i < s->used; i++)
            if (has_items(&s->v[i]))
                xfree(s->v[i].u.seq.items);
        xfree(s);
    }
    xfree(d);
}

const struct pt_value *pt_doc_root(const struct pt_doc *d)
{
    return d->root;
}

const struct pt_value *pt_dict_get(const struct pt_value *d, const char *key)
{
    if (!d || d->kind != PT_DICT)
        return NULL;
    size_t klen = strlen(key);
    for (size_t i = d->u.seq.n / 2; i-- > 0;) {
        const struct pt_value *k = d->u.seq.items[2 * i];
        if (k->kind == PT_STR && k->u.str.len == klen && memcmp(k->u.str.ptr, key, klen) == 0)
            return d->u.seq.items[2 * i + 1];
    }
    return NULL;
}

const char *pt_kind_name(const struct pt_value *v)
{
    static const char *const names[] = {"None",   "bool", "int",    "float",
                                        "str",    "tuple", "list",  "dict",
                                        "global", "storage", "tensor", "object"};
    return (unsigned)v->kind < sizeof(names) / sizeof(names[0]) ? names[v->kind] : "?";
}

/* ---- operands ------------------------------------------------------------------- */

static int take(struct pt_vm *vm, size_t n, const uint8_t **out)
{
    if (vm->len - vm->pos < n)
        return pt__fail(vm, ERR_INVALID, "truncated: %zu bytes needed, %zu left", n,
                        vm->len - vm->pos);
    *out = vm->buf + vm->pos;
    vm->pos += n;
    return 0;
}

static int take_uint(struct pt_vm *vm, size_t n, uint64_t *out)
{
    const uint8_t *p = NULL;
    int rc = take(vm, n, &p);
    if (rc < 0)
        return rc;
    *out = 0;
    for (size_t i = n; i-- > 0;)
        *out = *out << 8 | p[i];
    return 0;
}

/* A GLOBAL operand line ("module\n" or "name\n"), without the newline. */
static int take_line(struct pt_vm *vm, const char **s, size_t *n)
{
    const uint8_t *nl = memchr(vm->buf + vm->pos, '\n', vm->len - vm->pos);
    if (!nl)
        return pt__fail(vm, ERR_INVALID, "truncated: GLOBAL without a newline");
    *s = (const char *)vm->buf + vm->pos;
    *n = (size_t)(nl - (vm->buf + vm->pos));
    vm->pos += *n + 1;
    return 0;
}

/* ---- stack, marks, memo --------------------------------------------------------- */

static size_t frame_base(const struct pt_vm *vm)
{
    return vm->n_marks ? vm->marks[vm->n_marks - 1] : 0;
}

/* At least n values above the last MARK (Python keeps a separate list per MARK). */
static int need(struct pt_vm *vm, size_t n)
{
    if (vm->sp - frame_base(vm) < n)
        return pt__fail(vm, ERR_INVALID, "stack underflow (corrupt pickle)");
    return 0;
}

static int push(struct pt_vm *vm, struct pt_value *v)
{
    if (!v)
        return vm->e->code;
    if (vm->sp == vm->stack_cap) {
        vm->stack_cap = vm->stack_cap ? 2 * vm->stack_cap : 64;
        vm->stack = xrealloc(vm->stack, vm->stack_cap * sizeof(*vm->stack));
    }
    vm->stack[vm->sp++] = v;
    return 0;
}

static struct pt_value *top(struct pt_vm *vm)
{
    return vm->stack[vm->sp - 1];
}

static int mark(struct pt_vm *vm)
{
    if (vm->n_marks == vm->marks_cap) {
        vm->marks_cap = vm->marks_cap ? 2 * vm->marks_cap : 16;
        vm->marks = xrealloc(vm->marks, vm->marks_cap * sizeof(*vm->marks));
    }
    vm->marks[vm->n_marks++] = vm->sp;
    return 0;
}

/* Pop back to the last MARK: the values above it are stack[*first, vm->sp). */
static int pop_mark(struct pt_vm *vm, size_t *first)
{
    if (vm->n_marks == 0)
        return pt__fail(vm, ERR_INVALID, "no MARK to pop to (corrupt pickle)");
    *first = vm->marks[--vm->n_marks];
    return 0;
}

static int memo_put(struct pt_vm *vm, uint64_t idx)
{
    if (vm->sp == frame_base(vm))
        return pt__fail(vm, ERR_INVALID, "memo PUT on an empty stack");
    /* Picklers number memo entries in order, so an index past the end is hostile (and
     * would make us allocate for it). */
    if (idx > vm->n_memo)
        return pt__fail(vm, ERR_INVALID, "memo index %llu out of range (%zu entries)",
                        (unsigned long long)idx, vm->n_memo);
    if (idx == vm->n_memo) {
        if (vm->n_memo == vm->memo_cap) {
            vm->memo_cap = vm->memo_cap ? 2 * vm->memo_cap : 64;
            vm->memo = xrealloc(vm->memo, vm->memo_cap * sizeof(*vm->memo));
        }
        vm->n_memo++;
    }
    vm->memo[idx] = top(vm);
    return 0;
}

static int memo_get(struct pt_vm *vm, uint64_t idx)
{
    if (idx >= vm->n_memo)
        return pt__fail(vm, ERR_INVALID, "memo index %llu out of range (%zu entries)",
                        (unsigned long long)idx, vm->n_memo);
    return push(vm, vm->memo[idx]);
}

/* ---- opcodes ---------------------------------------------------------------------- */

static int op_global(struct pt_vm *vm)
{
    const char *mod, *name;
    size_t mod_len, name_len;
    int rc;
    if ((rc = take_line(vm, &mod, &mod_len)) < 0 || (rc = take_line(vm, &name, &name_len)) < 0)
        return rc;
    if (mod_len == 11 && memcmp(mod, "__builtin__", 11) == 0) { /* Python 2's name */
        mod = "builtins";
        mod_len = 8;
    }
    char full[GLOBAL_NAME_MAX];
    int n = snprintf(full, sizeof(full), "%.*s.%.*s", (int)mod_len, mod, (int)name_len, name);
    size_t full_len = n < (int)sizeof(full) ? (size_t)n : sizeof(full) - 1;
    if (pt_global_blocked(full, full_len))
        return pt__fail(vm, ERR_DENIED, "global '%s' refused: module '%.*s' is blocked", full,
                        (int)mod_len, mod);
    const struct pt_global *g = pt_global_find(full, full_len);
    if (!g)
        return pt__fail(vm, ERR_DENIED,
                        "global '%s' is not allowed: only tensors and plain containers are "
                        "loaded, as torch.load(weights_only=True) does",
                        full);
    struct pt_value *v = pt__new(vm, PT_GLOBAL);
    if (v)
        v->global = g;
    return push(vm, v);
}

static int op_str(struct pt_vm *vm, size_t len_bytes)
{
    uint64_t n;
    const uint8_t *p = NULL;
    int rc;
    if ((rc = take_uint(vm, len_bytes, &n)) < 0 || (rc = take(vm, n, &p)) < 0)
        return rc;
    struct pt_value *v = pt__new(vm, PT_STR);
    if (v) {
        v->u.str.ptr = (const char *)p;
        v->u.str.len = (size_t)n;
    }
    return push(vm, v);
}

static int op_int(struct pt_vm *vm, size_t n, int is_signed)
{
    uint64_t u;
    int rc = take_uint(vm, n, &u);
    if (rc < 0)
        return rc;
    struct pt_value *v = pt__new(vm, PT_INT);
    if (v)
        v->u.i = is_signed ? (int64_t)(int32_t)(uint32_t)u : (int64_t)u;
    return push(vm, v);
}

/* LONG1: little-endian two's complement; wider than 64 bits becomes an inert object. */
static int op_long1(struct pt_vm *vm)
{
    uint64_t n, u = 0;
    const uint8_t *p = NULL;
    int rc;
    if ((rc = take_uint(vm, 1, &n)) < 0 || (rc = take(vm, n, &p)) < 0)
        return rc;
    if (n > 8)
        return push(vm, pt__new(vm, PT_OBJECT));
    for (size_t i = n; i-- > 0;)
        u = u << 8 | p[i];
    if (n > 0 && n < 8 && (p[n - 1] & 0x80))
        u |= ~(uint64_t)0 << (8 * n); /* sign-extend */
    struct pt_value *v = pt__new(vm, PT_INT);
    if (v)
        v->u.i = (int64_t)u;
    return push(vm, v);
}

static int op_float(struct pt_vm *vm)
{
    const uint8_t *p = NULL;
    int rc = take(vm, 8, &p);
    if (rc < 0)
        return rc;
    uint64_t bits = 0;
    for (int i = 0; i < 8; i++) /* big-endian */
        bits = bits << 8 | p[i];
    struct pt_value *v = pt__new(vm, PT_FLOAT);
    if (v)
        memcpy(&v->u.f, &bits, sizeof(bits));
    return push(vm, v);
}

/* TUPLE (k < 0: back to the MARK), TUPLE1..3 (k items). */
static int op_tuple(struct pt_vm *vm, int k)
{
    size_t first = 0;
    int rc = k < 0 ? pop_mark(vm, &first) : need(vm, (size_t)k);
    if (rc < 0)
        return rc;
    if (k >= 0)
        first = vm->sp - (size_t)k;
    struct pt_value *t = pt__new(vm, PT_TUPLE);
    if (!t)
        return vm->e->code;
    for (size_t i = first; i < vm->sp; i++)
        pt__seq_push(t, vm->stack[i]);
    vm->sp = first;
    return push(vm, t);
}

static int op_setitems(struct pt_vm *vm, int one)
{
    size_t first = 0;
    int rc = one ? need(vm, 3) : pop_mark(vm, &first);
    if (rc < 0)
        return rc;
    if (one)
        first = vm->sp - 2;
    if ((vm->sp - first) % 2)
        return pt__fail(vm, ERR_INVALID, "SETITEMS with an odd number of values");
    if (first == frame_base(vm))
        return pt__fail(vm, ERR_INVALID, "SETITEMS without a dict (corrupt pickle)");
    struct pt_value *d = vm->stack[first - 1];
    if (d->kind != PT_DICT)
        return pt__fail(vm, ERR_DENIED, "SETITEM on a %s: only dicts take items",
                        pt_kind_name(d));
    for (size_t i = first; i < vm->sp; i++)
        pt__seq_push(d, vm->stack[i]);
    vm->sp = first;
    return 0;
}

static int op_appends(struct pt_vm *vm, int one)
{
    size_t first = 0;
    int rc = one ? need(vm, 2) : pop_mark(vm, &first);
    if (rc < 0)
        return rc;
    if (one)
        first = vm->sp - 1;
    if (first == frame_base(vm))
        return pt__fail(vm, ERR_INVALID, "APPENDS without a list (corrupt pickle)");
    struct pt_value *l = vm->stack[first - 1];
    if (l->kind != PT_LIST)
        return pt__fail(vm, ERR_DENIED, "APPEND on a %s: only lists take items",
                        pt_kind_name(l));
    for (size_t i = first; i < vm->sp; i++)
        pt__seq_push(l, vm->stack[i]);
    vm->sp = first;
    return 0;
}

/* REDUCE, NEWOBJ, BUILD: two operands, the result replaces them (BUILD keeps the first). */
static int op_apply(struct pt_vm *vm, uint8_t op)
{
    int rc = need(vm, 2);
    if (rc < 0)
        return rc;
    struct pt_value *a = vm->stack[vm->sp - 2], *b = vm->stack[vm->sp - 1], *out = NULL;
    if (op == 'b')
        rc = pt__build(vm, a, b);
    else if (op == 'R')
        rc = pt__reduce(vm, a, b, &out);
    else
        rc = pt__newobj(vm, a, b, &out);
    if (rc < 0)
        return rc;
    vm->sp -= op == 'b' ? 1 : 2;
    return op == 'b' ? 0 : push(vm, out);
}

static int op_persid(struct pt_vm *vm)
{
    struct pt_value *out;
    int rc = need(vm, 1);
    if (rc < 0 || (rc = pt__persistent_load(vm, top(vm), &out)) < 0)
        return rc;
    vm->sp--;
    return push(vm, out);
}

static int op_memo(struct pt_vm *vm, uint8_t op)
{
    uint64_t idx;
    int rc = take_uint(vm, op == 'h' || op == 'q' ? 1 : 4, &idx);
    if (rc < 0)
        return rc;
    return op == 'h' || op == 'j' ? memo_get(vm, idx) : memo_put(vm, idx);
}

static int op_proto(struct pt_vm *vm)
{
    uint64_t v;
    int rc = take_uint(vm, 1, &v);
    if (rc < 0)
        return rc;
    if (v > 5)
        return pt__fail(vm, ERR_UNSUPPORTED, "pickle protocol %llu", (unsigned long long)v);
    return 0;
}

/* One opcode; *done set at STOP. */
static int step(struct pt_vm *vm, uint8_t op, int *done)
{
    switch (op) {
    case 0x80: return op_proto(vm);
    case '.':
        if (need(vm, 1) < 0)
            return vm->e->code;
        vm->doc->root = vm->stack[--vm->sp];
        *done = 1;
        return 0;
    case 'c': return op_global(vm);
    case 'R': case 0x81: case 'b': return op_apply(vm, op);
    case 'Q': return op_persid(vm);
    case 'a': return op_appends(vm, 1);
    case 'e': return op_appends(vm, 0);
    case 's': return op_setitems(vm, 1);
    case 'u': return op_setitems(vm, 0);
    case '(': return mark(vm);
    case 't': return op_tuple(vm, -1);
    case 0x85: return op_tuple(vm, 1);
    case 0x86: return op_tuple(vm, 2);
    case 0x87: return op_tuple(vm, 3);
    case ')': return op_tuple(vm, 0);
    case 'N': return push(vm, pt__new(vm, PT_NONE));
    case 0x88: case 0x89: {
        struct pt_value *v = pt__new(vm, PT_BOOL);
        if (v)
            v->u.i = op == 0x88;
        return push(vm, v);
    }
    case ']': return push(vm, pt__new(vm, PT_LIST));
    case '}': return push(vm, pt__new(vm, PT_DICT));
    case 0x8f: return push(vm, pt__new(vm, PT_OBJECT)); /* EMPTY_SET: nothing reads it */
    case 'J': return op_int(vm, 4, 1);
    case 'K': return op_int(vm, 1, 0);
    case 'M': return op_int(vm, 2, 0);
    case 0x8a: return op_long1(vm);
    case 'G': return op_float(vm);
    case 'X': return op_str(vm, 4);
    case 'U': return op_str(vm, 1);
    case 'h': case 'j': case 'q': case 'r': return op_memo(vm, op);
    default:
        return pt__fail(vm, ERR_UNSUPPORTED,
                        "opcode 0x%02x is not one torch.load(weights_only=True) accepts", op);
    }
}

static void vm_release(struct pt_vm *vm)
{
    xfree(vm->stack);
    xfree(vm->marks);
    xfree(vm->memo);
    pt_doc_free(vm->doc);
}

int pt_pickle_load(const uint8_t *buf, size_t len, const struct pt_storage_resolver *res,
                   const char *what, struct pt_doc **out, struct err *e)
{
    struct pt_vm vm = {.buf = buf, .len = len, .what = what, .res = res, .e = e};
    struct err local = {0};
    if (!vm.e)
        vm.e = &local;
    vm.doc = xcalloc(1, sizeof(*vm.doc));
    *out = NULL;
    int rc = 0, done = 0;
    while (!done) {
        vm.op_at = vm.pos;
        if (vm.pos == vm.len) {
            rc = pt__fail(&vm, ERR_INVALID, "truncated: the pickle ends without STOP");
            break;
        }
        if ((rc = step(&vm, vm.buf[vm.pos++], &done)) < 0)
            break;
    }
    if (rc == 0) {
        *out = vm.doc;
        vm.doc = NULL;
    }
    vm_release(&vm);
    return rc;
}

/*
 * pt_load.c — a torch zip checkpoint's state dict as an st_file tensor table
 * (see pt_load.h).
 */
#include "pt_load.h"

#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "log.h"
#include "pt_pickle.h"
#include "pt_zip.h"

enum pt_format pt_sniff(const uint8_t *head, size_t n)
{
    /* A safetensors header length may begin with either signature (0x0380 = 896 bytes
     * reads as pickle protocol 3), but its JSON must then start with '{' at byte 8. */
    if (n >= 9 && head[8] == '{')
        return PT_FORMAT_NONE;
    if (n >= 4 && memcmp(head, "PK\x03\x04", 4) == 0)
        return PT_FORMAT_ZIP;
    if (n >= 2 && head[0] == 0x80 && head[1] >= 2 && head[1] <= 5)
        return PT_FORMAT_PICKLE;
    return PT_FORMAT_NONE;
}

int pt_refuse_pickle(const char *what, struct err *e)
{
    return err_set(e, ERR_UNSUPPORTED,
                   "cannot load '%s': it is a bare pickle (PyTorch's legacy pre-1.6 format), "
                   "which is not loaded; re-save it with a recent torch.save or convert it "
                   "to .safetensors",
                   what);
}

/* ---- the archive ------------------------------------------------------------------ */

struct archive {
    const struct pt_zip *zip;
    const char *what;
};

/* Storage `key` is the entry "data/<key>"; its bytes are used in place. */
static int find_storage(void *user, const char *key, size_t key_len, uint64_t *offset,
                        uint64_t *nbytes, struct err *e)
{
    const struct archive *a = user;
    char name[256];
    if (key_len > sizeof(name) - 6)
        return err_set(e, ERR_INVALID, "'%s': storage key of %zu bytes", a->what, key_len);
    memcpy(name, "data/", 5);
    memcpy(name + 5, key, key_len);
    const struct pt_zip_entry *ent = pt_zip_find(a->zip, name, 5 + key_len);
    if (!ent)
        return err_set(e, ERR_INVALID, "'%s': storage 'data/%.*s' is missing from the archive",
                       a->what, (int)key_len, key);
    *offset = ent->offset;
    *nbytes = ent->size;
    return 0;
}

/* "byteorder" says "little" or "big"; files before torch 2.1 have none and are little. */
static int check_byteorder(const uint8_t *buf, const struct pt_zip *z, const char *what,
                           struct err *e)
{
    const struct pt_zip_entry *bo = pt_zip_find(z, "byteorder", 9);
    if (!bo || (bo->size == 6 && memcmp(buf + bo->offset, "little", 6) == 0))
        return 0;
    return err_set(e, ERR_UNSUPPORTED,
                   "'%s': the checkpoint was saved on a big-endian machine; re-save it on a "
                   "little-endian one or convert it to .safetensors",
                   what);
}

/* ---- the state dict ------------------------------------------------------------------ */

/* ComfyUI's load_torch_file: pl_sd["state_dict"], or a lone member that is a dict. */
static int pick_state_dict(const struct pt_value *root, const char *what,
                           const struct pt_value **out, struct err *e)
{
    if (root->kind != PT_DICT)
        return err_set(e, ERR_INVALID, "'%s': the checkpoint holds a %s, not a state dict",
                       what, pt_kind_name(root));
    const struct pt_value *step = pt_dict_get(root, "global_step");
    if (step && step->kind == PT_INT)
        log_debug("'%s': global step %lld", what, (long long)step->u.i);
    const struct pt_value *sd = pt_dict_get(root, "state_dict");
    if (sd && sd->kind != PT_DICT)
        return err_set(e, ERR_INVALID, "'%s': 'state_dict' is a %s, not a dict", what,
                       pt_kind_name(sd));
    if (!sd && root->u.seq.n == 2 && root->u.seq.items[1]->kind == PT_DICT)
        sd = root->u.seq.items[1];
    *out = sd ? sd : root;
    return 0;
}

/* Row-major with no gaps: what an st_tensor can describe. Size-1 dims take any stride. */
static int is_contiguous(const struct pt_tensor *t)
{
    int64_t want = 1;
    for (int i = t->ndim; i-- > 0;) {
        if (t->shape[i] == 0)
            return 1;
        if (t->shape[i] != 1 && t->stride[i] != want)
            return 0;
        want *= t->shape[i];
    }
    return 1;
}

static void fmt_dims(const int64_t *v, int n, char *out, size_t size)
{
    struct st_tensor tmp = {.ndim = n};
    memcpy(tmp.shape, v, (size_t)n * sizeof(*v));
    st_shape_str(&tmp, out, size);
}

struct item {
    struct st_tensor t;
    size_t order; /* position in the dict: a later duplicate key wins, as in Python */
};

static int to_st_tensor(const struct pt_value *key, const struct pt_value *val,
                        const char *what, struct item *it, struct err *e)
{
    if (key->kind != PT_STR || memchr(key->u.str.ptr, 0, key->u.str.len))
        return err_set(e, ERR_INVALID, "'%s': a tensor's key is a %s, not a name", what,
                       pt_kind_name(key));
    int kl = (int)(key->u.str.len > 200 ? 200 : key->u.str.len);
    const struct pt_tensor *t = &val->u.t;
    if (t->dtype < 0)
        return err_set(e, ERR_UNSUPPORTED, "'%s': tensor '%.*s' has a dtype we do not load (%s)",
                       what, kl, key->u.str.ptr, t->storage->u.st.type_name);
    if (!is_contiguous(t)) {
        char shape[96], stride[96];
        fmt_dims(t->shape, t->ndim, shape, sizeof(shape));
        fmt_dims(t->stride, t->ndim, stride, sizeof(stride));
        return err_set(e, ERR_UNSUPPORTED,
                       "'%s': tensor '%.*s' is a non-contiguous view (shape %s, stride %s); "
                       "save it with .contiguous() or convert the file to .safetensors",
                       what, kl, key->u.str.ptr, shape, stride);
    }
    size_t el = st_dtype_size((enum st_dtype)t->dtype);
    it->t.dtype = (enum st_dtype)t->dtype;
    it->t.ndim = t->ndim;
    memcpy(it->t.shape, t->shape, sizeof(it->t.shape));
    it->t.offset = t->storage->u.st.offset + t->offset * el;
    it->t.nbytes = st_tensor_numel(&it->t) * el;
    it->t.name = xstrndup(key->u.str.ptr, key->u.str.len);
    return 0;
}

static int cmp_item(const void *a, const void *b)
{
    const struct item *x = a, *y = b;
    int c = strcmp(x->t.name, y->t.name);
    return c ? c : (x->order > y->order) - (x->order < y->order);
}

/* Sorted by name, keeping the last of each run of equal names. */
static void move_sorted(struct item *items, size_t n, struct st_file *f)
{
    qsort(items, n, sizeof(*items), cmp_item);
    f->tensors = xcalloc(n ? n : 1, sizeof(*f->tensors));
    for (size_t i = 0; i < n; i++) {
        if (i + 1 < n && strcmp(items[i].t.name, items[i + 1].t.name) == 0) {
            xfree(items[i].t.name);
            continue;
        }
        f->tensors[f->n_tensors++] = items[i].t;
    }
}

static int collect(const struct pt_value *sd, const char *what, struct st_file *f,
                   struct err *e)
{
    size_t n_pairs = sd->u.seq.n / 2, n = 0, skipped = 0;
    struct item *items = xcalloc(n_pairs ? n_pairs : 1, sizeof(*items));
    int rc = 0;
    for (size_t i = 0; i < n_pairs && rc == 0; i++) {
        const struct pt_value *k = sd->u.seq.items[2 * i], *v = sd->u.seq.items[2 * i + 1];
        if (v->kind == PT_OBJECT && v->global && v->global->kind == PT_G_OTHER_TENSOR) {
            rc = err_set(e, ERR_UNSUPPORTED, "'%s': a tensor is made by '%s' (sparse, "
                         "quantized or meta), which is not supported", what, v->global->name);
        } else if (v->kind != PT_TENSOR) {
            skipped++;
        } else if ((rc = to_st_tensor(k, v, what, &items[n], e)) == 0) {
            items[n++].order = i;
        }
    }
    if (rc == 0)
        move_sorted(items, n, f);
    for (size_t i = 0; rc < 0 && i < n; i++)
        xfree(items[i].t.name);
    xfree(items);
    if (skipped)
        log_debug("'%s': %zu state dict values are not tensors (skipped)", what, skipped);
    return rc;
}

/* ---- entry points ---------------------------------------------------------------------- */

static int run_pickle(const uint8_t *buf, const struct pt_zip *z, const char *what,
                      struct pt_doc **doc, struct err *e)
{
    const struct pt_zip_entry *pkl = pt_zip_find(z, "data.pkl", 8);
    if (!pkl)
        return err_set(e, ERR_INVALID, "'%s': zip archive without data.pkl (not a PyTorch "
                       "checkpoint)", what);
    if (pkl->size > PT_PICKLE_MAX_BYTES)
        return err_set(e, ERR_TOO_LARGE, "'%s': data.pkl of %llu bytes (limit %u)", what,
                       (unsigned long long)pkl->size, PT_PICKLE_MAX_BYTES);
    struct archive a = {.zip = z, .what = what};
    struct pt_storage_resolver res = {.find = find_storage, .user = &a};
    return pt_pickle_load(buf + pkl->offset, (size_t)pkl->size, &res, what, doc, e);
}

int pt_load_doc(const uint8_t *buf, uint64_t size, const char *what, struct pt_doc **doc,
                struct err *e)
{
    struct pt_zip z;
    *doc = NULL;
    int rc = pt_zip_open(buf, size, what, &z, e);
    if (rc < 0)
        return rc;
    if ((rc = check_byteorder(buf, &z, what, e)) == 0)
        rc = run_pickle(buf, &z, what, doc, e);
    pt_zip_release(&z); /* storage offsets are buf's: the document does not need it */
    return rc;
}

int pt_value_tensor(const struct pt_value *key, const struct pt_value *val, const char *what,
                    struct st_tensor *out, struct err *e)
{
    struct item it = {0};
    if (val->kind != PT_TENSOR)
        return err_set(e, ERR_INVALID, "'%s': '%.*s' is a %s, not a tensor", what,
                       key->kind == PT_STR ? (int)(key->u.str.len > 200 ? 200 : key->u.str.len)
                                           : 1,
                       key->kind == PT_STR ? key->u.str.ptr : "?", pt_kind_name(val));
    int rc = to_st_tensor(key, val, what, &it, e);
    if (rc == 0)
        *out = it.t;
    return rc;
}

int pt_parse(const uint8_t *buf, uint64_t size, const char *what, struct st_file *f,
             struct err *e)
{
    struct pt_doc *doc = NULL;
    const struct pt_value *sd = NULL;
    int rc = pt_load_doc(buf, size, what, &doc, e);
    if (rc == 0 && (rc = pick_state_dict(pt_doc_root(doc), what, &sd, e)) == 0)
        rc = collect(sd, what, f, e);
    pt_doc_free(doc);
    if (rc < 0)
        st_file_release_tables(f);
    return rc;
}

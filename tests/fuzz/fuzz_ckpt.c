/*
 * fuzz_ckpt — PyTorch checkpoints (models/pt_load.h, pt_pickle.h): the zip directory
 * reader, the restricted unpickler and the state dict it yields, which see every byte
 * of a user-supplied .ckpt/.pt file.
 *
 * Input: a whole file. One that starts with a zip signature goes through pt_parse, as
 * st_open would hand it over; anything else is run as a bare data.pkl by
 * pt_pickle_load, with every storage key resolving to the whole input (so mutations of
 * the pickle itself are explored without keeping a zip valid).
 * On success the contract of pt_load.h must hold: every tensor lies inside the file,
 * nbytes matches dtype and shape, names are sorted and unique, st_find finds each one.
 * On failure the error carries a message and no table is left behind.
 */
#include "fuzz_util.h"
#include "pt_load.h"
#include "pt_pickle.h"
#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);

static void check_tables(const struct st_file *f, uint64_t size)
{
    for (size_t i = 0; i < f->n_tensors; i++) {
        const struct st_tensor *t = &f->tensors[i];
        FUZZ_CHECK(t->name != NULL);
        FUZZ_CHECK((unsigned)t->dtype < ST_DTYPE_COUNT);
        FUZZ_CHECK(t->ndim >= 0 && t->ndim <= ST_MAX_DIMS);
        FUZZ_CHECK(t->nbytes == st_tensor_numel(t) * st_dtype_size(t->dtype));
        FUZZ_CHECK(t->nbytes == 0 || (t->offset <= size && t->nbytes <= size - t->offset));
        if (i)
            FUZZ_CHECK(strcmp(f->tensors[i - 1].name, t->name) < 0);
        FUZZ_CHECK(st_find(f, t->name) == t);
    }
}

/* Convert the first small float tensors: reads every byte the table points at. */
static void touch_tensors(const struct st_file *f)
{
    for (size_t i = 0; i < f->n_tensors && i < 4; i++) {
        const struct st_tensor *t = &f->tensors[i];
        if (st_tensor_numel(t) > 4096)
            continue;
        float *dst = xmalloc(st_tensor_numel(t) * sizeof(float) + 1);
        struct err e = {0};
        if (st_tensor_to_f32(f, t, dst, &e) < 0)
            FUZZ_CHECK(e.msg[0] != '\0');
        xfree(dst);
    }
}

static void run_zip(const uint8_t *data, size_t n)
{
    struct st_file f;
    memset(&f, 0, sizeof(f));
    struct err e = {0};
    int rc = pt_parse(data, n, "fuzz.ckpt", &f, &e);
    if (rc < 0) {
        FUZZ_CHECK(e.code == rc && e.msg[0] != '\0');
        FUZZ_CHECK(f.tensors == NULL && f.n_tensors == 0);
        return;
    }
    f.path = "fuzz.ckpt";
    f.data = data;
    f.data_size = n;
    check_tables(&f, n);
    touch_tensors(&f);
    f.path = NULL;
    st_file_release_tables(&f);
}

static int whole_input(void *user, const char *key, size_t key_len, uint64_t *offset,
                       uint64_t *nbytes, struct err *e)
{
    (void)key;
    (void)key_len;
    (void)e;
    *offset = 0;
    *nbytes = *(const size_t *)user;
    return 0;
}

static void run_pickle(const uint8_t *data, size_t n)
{
    struct pt_storage_resolver res = {.find = whole_input, .user = &n};
    struct pt_doc *doc = NULL;
    struct err e = {0};
    int rc = pt_pickle_load(data, n, &res, "fuzz.pkl", &doc, &e);
    if (rc < 0) {
        FUZZ_CHECK(e.code == rc && e.msg[0] != '\0' && doc == NULL);
        return;
    }
    const struct pt_value *root = pt_doc_root(doc);
    FUZZ_CHECK(root != NULL && pt_kind_name(root)[0] != '?');
    pt_dict_get(root, "state_dict");
    pt_doc_free(doc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    static int init;
    if (!init++)
        fuzz_quiet_logs();
    long live = alloc_live_count();
    if (pt_sniff(data, n) == PT_FORMAT_ZIP)
        run_zip(data, n);
    else
        run_pickle(data, n);
    FUZZ_CHECK(alloc_live_count() == live);
    return 0;
}

/*
 * fuzz_safetensors — the safetensors header reader (models/safetensors.h,
 * st_parse_header), which sees every byte of a user-supplied model file's header.
 *
 * Input layout, the same as a .safetensors file: 8-byte little-endian header length N,
 * then the header, then the data section. The header handed to the parser is
 * min(N, bytes left) bytes; data_size is what follows it (as st_open computes it), so a
 * seed file is a real, tiny safetensors file. On success the contract of
 * safetensors.h must hold: every tensor lies inside the data, nbytes matches the shape,
 * the table is sorted with unique names, no two byte ranges overlap, st_find finds each
 * tensor. On failure the error carries a message.
 */
#include "fuzz_util.h"
#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);

static void check_tables(const struct st_file *f, uint64_t data_size)
{
    for (size_t i = 0; i < f->n_tensors; i++) {
        const struct st_tensor *t = &f->tensors[i];
        FUZZ_CHECK(t->name != NULL);
        FUZZ_CHECK((unsigned)t->dtype < ST_DTYPE_COUNT);
        FUZZ_CHECK(t->ndim >= 0 && t->ndim <= ST_MAX_DIMS);
        for (int d = 0; d < t->ndim; d++)
            FUZZ_CHECK(t->shape[d] >= 0);
        FUZZ_CHECK(t->nbytes == st_tensor_numel(t) * st_dtype_size(t->dtype));
        FUZZ_CHECK(t->offset <= data_size && t->nbytes <= data_size - t->offset);
        if (i)
            FUZZ_CHECK(strcmp(f->tensors[i - 1].name, t->name) < 0);
        FUZZ_CHECK(st_find(f, t->name) == t);
        char shape[128];
        st_shape_str(t, shape, sizeof(shape));
        FUZZ_CHECK(shape[0] == '[');
    }
    /* Sorted by name, not by offset: check overlaps pairwise (tables are small here). */
    for (size_t i = 0; i < f->n_tensors && i < 512; i++)
        for (size_t j = 0; j < i; j++) {
            const struct st_tensor *a = &f->tensors[i], *b = &f->tensors[j];
            if (a->nbytes && b->nbytes)
                FUZZ_CHECK(a->offset >= b->offset + b->nbytes ||
                           b->offset >= a->offset + a->nbytes);
        }
    for (size_t i = 0; i < f->n_meta; i++) {
        FUZZ_CHECK(f->meta[i].key && f->meta[i].val);
        FUZZ_CHECK(st_meta_get(f, f->meta[i].key) != NULL);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    static int init;
    if (!init++)
        fuzz_quiet_logs();
    if (n < 8)
        return 0;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | data[i];
    size_t avail = n - 8;
    size_t len = hlen < avail ? (size_t)hlen : avail;
    uint64_t data_size = avail - len;
    /* The header in its own exact-size block, so that ASan sees a read past its end. */
    char *json = xmalloc(len ? len : 1);
    memcpy(json, data + 8, len);

    long live = alloc_live_count();
    struct st_file f;
    memset(&f, 0, sizeof(f));
    struct err e = {0};
    int rc = st_parse_header(json, len, data_size, "fuzz.safetensors", &f, &e);
    if (rc < 0) {
        FUZZ_CHECK(e.code == rc && e.msg[0] != '\0');
        FUZZ_CHECK(f.n_tensors == 0 || f.tensors != NULL); /* nothing half-built is exposed */
    } else {
        FUZZ_CHECK(rc == 0);
        f.data = (const uint8_t *)data + 8 + len;
        f.data_size = data_size;
        check_tables(&f, data_size);
        /* Convert the first small float tensors: exercises the accessors on the result. */
        for (size_t i = 0; i < f.n_tensors && i < 4; i++) {
            const struct st_tensor *t = &f.tensors[i];
            if (st_tensor_numel(t) > 4096)
                continue;
            float *dst = xmalloc(st_tensor_numel(t) * sizeof(float) + 1);
            struct err e2 = {0};
            if (st_tensor_to_f32(&f, t, dst, &e2) < 0)
                FUZZ_CHECK(e2.msg[0] != '\0');
            xfree(dst);
        }
    }
    st_file_release_tables(&f);
    FUZZ_CHECK(alloc_live_count() == live);
    xfree(json);
    return 0;
}

/*
 * test_models_pt — PyTorch checkpoints through st_open (models/pt_load.h): the valid
 * fixtures of tests/fixtures/ckpt give exactly the tensors of their safetensors twins,
 * and every hostile or unsupported file is refused with its own message while nothing
 * is executed.
 *
 * Usage: test_models_pt FIXTURE_DIR [A.safetensors B.ckpt ...]
 * Extra pairs (the generated tiny SD1.5 checkpoint and its conversions) are compared
 * the same way.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "harness.h"
#include "log.h"
#include "pt_load.h"
#include "pt_pickle.h"
#include "safetensors.h"

#define PWNED "/tmp/latentd_pwned" /* what the hostile payloads would create */

static const char *fixtures;
static char tmpdir[256];

static const char *fx(const char *name)
{
    static char path[8][512];
    static int k;
    k = (k + 1) % 8;
    snprintf(path[k], sizeof(path[k]), "%s/%s", fixtures, name);
    return path[k];
}

/* Same names, dtypes, shapes and bytes. */
static int same_tables(const struct st_file *a, const struct st_file *b, char *why, size_t n)
{
    if (a->n_tensors != b->n_tensors) {
        snprintf(why, n, "%zu vs %zu tensors", a->n_tensors, b->n_tensors);
        return 0;
    }
    for (size_t i = 0; i < a->n_tensors; i++) {
        const struct st_tensor *x = &a->tensors[i], *y = &b->tensors[i];
        if (strcmp(x->name, y->name) || x->dtype != y->dtype || x->ndim != y->ndim ||
            memcmp(x->shape, y->shape, sizeof(x->shape[0]) * (size_t)x->ndim) ||
            x->nbytes != y->nbytes ||
            memcmp(st_tensor_data(a, x), st_tensor_data(b, y), x->nbytes)) {
            snprintf(why, n, "tensor '%s' differs from '%s'", x->name, y->name);
            return 0;
        }
    }
    return 1;
}

static void expect_same(const char *st_path, const char *pt_path)
{
    struct st_file *a = NULL, *b = NULL;
    struct err e = {0};
    char why[300] = "";
    int ra = st_open(st_path, &a, &e), rb = ra < 0 ? ra : st_open(pt_path, &b, &e);
    ok(rb == 0 && same_tables(a, b, why, sizeof(why)) && st_check(b, &e) == 0,
       "'%s' gives the tensors of '%s' %s%s", pt_path, st_path, why, e.msg);
    st_close(a);
    st_close(b);
}

static void test_valid(void)
{
    static const char *const small_twins[] = {"small.ckpt", "lightning.ckpt", "single_key.pt",
                                              "parameter.pth", "zip64.ckpt"};
    for (size_t i = 0; i < sizeof(small_twins) / sizeof(small_twins[0]); i++)
        expect_same(fx("small.safetensors"), fx(small_twins[i]));
    expect_same(fx("small_f16.safetensors"), fx("small_f16.pt"));

    /* A dict holding itself as key and value: no recursion anywhere, no tensors. */
    struct st_file *g = NULL;
    struct err ge = {0};
    ok(st_open(fx("self_ref.ckpt"), &g, &ge) == 0 && g && g->n_tensors == 0,
       "self_ref.ckpt loads with no tensors %s", ge.msg);
    st_close(g);

    /* Values, and a weight and bias read in place from one shared storage. */
    struct st_file *f = NULL;
    struct err e = {0};
    EXPECT_OK(st_open(fx("small.ckpt"), &f, &e));
    if (!f)
        return;
    const struct st_tensor *w = st_find(f, "a.weight"), *b = st_find(f, "a.bias");
    float v[3] = {0};
    ok(w && b && b->offset == w->offset + 24 && w->offset % 64 == 0,
       "a.bias lies 24 bytes after a.weight in their storage, which is 64-byte aligned");
    ok(b && st_tensor_to_f32(f, b, v, &e) == 0 && v[0] == -1.0f && v[1] == 2.5f &&
           v[2] == 1e-3f,
       "a.bias = [-1, 2.5, 0.001]");
    const struct st_tensor *s = st_find(f, "scalar"), *em = st_find(f, "empty");
    ok(s && s->ndim == 0 && em && em->ndim == 2 && em->shape[0] == 0 && em->nbytes == 0,
       "0-dim and empty tensors keep their shapes");
    ok(st_tensor_f32_view(f, s) && *st_tensor_f32_view(f, s) == 3.25f, "scalar = 3.25 in place");
    st_close(f);
}

struct refusal {
    const char *file;
    int code;
    const char *msg; /* a substring of the message */
};

static const struct refusal refusals[] = {
    {"os_system.ckpt", ERR_DENIED, "'posix.system' refused: module 'posix' is blocked"},
    {"os_system_global.ckpt", ERR_DENIED, "'os.system' refused: module 'os' is blocked"},
    {"eval.ckpt", ERR_DENIED, "global 'builtins.eval' is not allowed"},
    {"exec_stack_global.ckpt", ERR_UNSUPPORTED, "opcode 0x95"},
    {"nested_reduce.ckpt", ERR_DENIED, "REDUCE calls a dict, not an allowed global"},
    {"nested_reduce_disallowed.ckpt", ERR_DENIED, "global 'builtins.getattr' is not allowed"},
    {"reduce_str.ckpt", ERR_DENIED, "REDUCE calls a str"},
    {"memo_get.ckpt", ERR_INVALID, "memo index 5 out of range"},
    {"memo_put_huge.ckpt", ERR_INVALID, "memo index 4294967295 out of range"},
    {"huge_len.ckpt", ERR_INVALID, "truncated: 2147483647 bytes needed"},
    {"truncated_pkl.ckpt", ERR_INVALID, "truncated"},
    {"truncated_file.ckpt", ERR_INVALID, "no zip directory"},
    {"deep_list.ckpt", ERR_INVALID, "holds a list, not a state dict"},
    {"mark_bomb.ckpt", ERR_INVALID, "stack underflow"},
    {"setitem_list.ckpt", ERR_DENIED, "SETITEM on a list"},
    {"append_dict.ckpt", ERR_DENIED, "APPEND on a dict"},
    {"build_list.ckpt", ERR_DENIED, "BUILD on a list is not allowed"},
    {"build_dict.ckpt", ERR_DENIED, "BUILD on a dict is not allowed"},
    {"inst.ckpt", ERR_UNSUPPORTED, "opcode 0x69"},
    {"persid_module.ckpt", ERR_DENIED, "persistent id is not a storage"},
    {"newobj_function.ckpt", ERR_DENIED, "NEWOBJ on 'torch._utils._rebuild_tensor_v2'"},
    {"legacy_tensor.ckpt", ERR_UNSUPPORTED, "legacy torch.Tensor"},
    {"not_dict.ckpt", ERR_INVALID, "holds a list, not a state dict"},
    {"empty_pkl.ckpt", ERR_INVALID, "ends without STOP"},
    {"out_of_bounds.ckpt", ERR_INVALID, "reaches element 7 of a storage of 6 elements"},
    {"storage_size.ckpt", ERR_INVALID, "holds 24 bytes but torch.FloatStorage of 8 elements"},
    {"missing_storage.ckpt", ERR_INVALID, "storage 'data/7' is missing"},
    {"noncontig.ckpt", ERR_UNSUPPORTED, "non-contiguous view (shape [3,2], stride [1,3])"},
    {"complex.ckpt", ERR_UNSUPPORTED, "dtype we do not load (torch.ComplexFloatStorage)"},
    {"big_endian.ckpt", ERR_UNSUPPORTED, "big-endian"},
    {"deflate.ckpt", ERR_UNSUPPORTED, "is compressed (method 8)"},
    {"legacy.pt", ERR_UNSUPPORTED, "legacy pre-1.6 format"},
};

static void test_refused(void)
{
    for (size_t i = 0; i < sizeof(refusals) / sizeof(refusals[0]); i++) {
        const struct refusal *r = &refusals[i];
        struct st_file *f = NULL;
        struct err e = {0};
        int rc = st_open(fx(r->file), &f, &e);
        ok(rc == r->code && f == NULL && strstr(e.msg, r->msg) && strstr(e.msg, r->file),
           "%s: %s (%s)", r->file, e.msg, err_str(rc));
        st_close(f);
    }
    ok(access(PWNED, F_OK) != 0, "no payload ran: %s does not exist", PWNED);
}

/* The pickle VM on its own: operand decoding and the memo. */
static void test_vm(void)
{
    static const uint8_t pkl[] = {0x80, 0x02, '(',  0x8a, 0x02, 0x00, 0xff, 'G', 0xc0, 0x04,
                                  0,    0,    0,    0,    0,    0,    'q',  0x00, 'h', 0x00,
                                  'J',  0xfe, 0xff, 0xff, 0xff, 'M',  0xff, 0xff, 't', '.'};
    struct pt_doc *d = NULL;
    struct err e = {0};
    EXPECT_OK(pt_pickle_load(pkl, sizeof(pkl), NULL, "vm", &d, &e));
    const struct pt_value *t = d ? pt_doc_root(d) : NULL;
    ok(t && t->kind == PT_TUPLE && t->u.seq.n == 5 && t->u.seq.items[0]->u.i == -256 &&
           t->u.seq.items[1]->u.f == -2.5 && t->u.seq.items[2] == t->u.seq.items[1] &&
           t->u.seq.items[3]->u.i == -2 && t->u.seq.items[4]->u.i == 65535,
       "LONG1 -256, BINFLOAT -2.5, memo GET, BININT -2, BININT2 65535");
    pt_doc_free(d);
}

/* The SIGBUS guard and the stamp cover a zip checkpoint as they do a safetensors file. */
static void test_changed(void)
{
    char path[300], cmd[700];
    snprintf(path, sizeof(path), "%s/changed.ckpt", tmpdir);
    snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", fx("small.ckpt"), path);
    ok(system(cmd) == 0, "copied small.ckpt");
    struct st_file *f = NULL;
    struct err e = {0};
    EXPECT_OK(st_open(path, &f, &e));
    if (!f)
        return;
    int fd = open(path, O_WRONLY);
    ok(fd >= 0 && pwrite(fd, "x", 1, 100) == 1, "rewrote one byte in place");
    if (fd >= 0)
        close(fd);
    err_clear(&e);
    ok(st_check(f, &e) == ERR_IO && strstr(e.msg, "changed on disk"), "st_check: %s", e.msg);
    st_close(f);
}

/* A safetensors file named .ckpt loads: the format is read from the content. */
static void test_by_content(void)
{
    char path[300], cmd[700];
    snprintf(path, sizeof(path), "%s/really_safetensors.ckpt", tmpdir);
    snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", fx("small.safetensors"), path);
    ok(system(cmd) == 0, "copied small.safetensors to a .ckpt name");
    expect_same(fx("small.safetensors"), path);

    /* A header of 0x380 bytes: the length's first bytes read "80 03", a pickle's start. */
    char json[0x380];
    memset(json, ' ', sizeof(json));
    const char *h = "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    memcpy(json, h, strlen(h));
    uint8_t len8[8] = {0x80, 0x03};
    float one = 1.0f;
    snprintf(path, sizeof(path), "%s/pickle_like_length.safetensors", tmpdir);
    FILE *fp = fopen(path, "wb");
    ok(fp && fwrite(len8, 8, 1, fp) == 1 && fwrite(json, sizeof(json), 1, fp) == 1 &&
           fwrite(&one, 4, 1, fp) == 1 && fclose(fp) == 0,
       "wrote a safetensors file with a 0x380-byte header");
    struct st_file *f = NULL;
    struct err e = {0};
    ok(st_open(path, &f, &e) == 0 && f->n_tensors == 1 &&
           *st_tensor_f32_view(f, &f->tensors[0]) == 1.0f,
       "it loads as safetensors, not as a legacy pickle %s", e.msg);
    st_close(f);
}

int main(int argc, char **argv)
{
    fixtures = argc > 1 ? argv[1] : "tests/fixtures/ckpt";
    log_set_level(LOG_CRITICAL); /* the refusals are expected */
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(tmpdir, sizeof(tmpdir), "%s/test_models_pt.XXXXXX", base);
    if (!mkdtemp(tmpdir))
        PANIC("mkdtemp: %s", strerror(errno));
    unlink(PWNED);
    long live0 = alloc_live_count();
    test_valid();
    test_refused();
    test_vm();
    test_changed();
    test_by_content();
    for (int i = 2; i + 1 < argc; i += 2)
        expect_same(argv[i], argv[i + 1]);
    EXPECT_EQ(alloc_live_count(), live0);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        printf("# could not remove %s\n", tmpdir);
    return harness_done();
}

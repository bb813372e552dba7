/*
 * safetensors streaming writer (see safetensors.h): header first, then each
 * tensor's bytes in declaration order, so big files never sit in memory.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "afile.h"
#include "alloc.h"
#include "buf.h"
#include "safetensors.h"

struct st_writer {
    struct st_tensor *t; /* owned; in declaration order */
    size_t n, cap;
    struct st_meta *meta; /* owned */
    size_t n_meta;
    struct afile af; /* the temporary until finish renames it over `path` */
    char *path;
    size_t next; /* index of the next tensor to write */
};

struct st_writer *st_writer_new(void)
{
    return xcalloc(1, sizeof(struct st_writer));
}

void st_writer_free(struct st_writer *w)
{
    if (!w)
        return;
    if (w->af.fp)
        afile_abort(&w->af); /* never finished: the target is left untouched */
    for (size_t i = 0; i < w->n; i++)
        xfree(w->t[i].name);
    for (size_t i = 0; i < w->n_meta; i++) {
        xfree(w->meta[i].key);
        xfree(w->meta[i].val);
    }
    xfree(w->t);
    xfree(w->meta);
    xfree(w->path);
    xfree(w);
}

size_t st_writer_add(struct st_writer *w, const char *name, enum st_dtype dtype, int ndim,
                     const int64_t *shape)
{
    ASSERT(ndim >= 0 && ndim <= ST_MAX_DIMS && !w->af.fp);
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 64;
        w->t = xrealloc(w->t, w->cap * sizeof(*w->t));
    }
    struct st_tensor *t = &w->t[w->n];
    memset(t, 0, sizeof(*t));
    t->name = xstrdup(name);
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        t->shape[i] = shape[i];
    t->offset = w->n ? w->t[w->n - 1].offset + w->t[w->n - 1].nbytes : 0;
    t->nbytes = st_tensor_numel(t) * st_dtype_size(dtype);
    return w->n++;
}

void st_writer_meta(struct st_writer *w, const char *key, const char *val)
{
    w->meta = xrealloc(w->meta, (w->n_meta + 1) * sizeof(*w->meta));
    w->meta[w->n_meta].key = xstrdup(key);
    w->meta[w->n_meta].val = xstrdup(val);
    w->n_meta++;
}

/* JSON string with the escapes JSON requires (names are ASCII in practice). */
static void add_json_str(struct buf *b, const char *s)
{
    buf_addc(b, '"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            buf_addc(b, '\\');
            buf_addc(b, (char)c);
        } else if (c < 0x20) {
            buf_printf(b, "\\u%04x", c);
        } else {
            buf_addc(b, (char)c);
        }
    }
    buf_addc(b, '"');
}

int st_writer_begin(struct st_writer *w, const char *path, struct err *e)
{
    struct buf h;
    buf_init(&h);
    buf_addc(&h, '{');
    if (w->n_meta) {
        buf_adds(&h, "\"__metadata__\":{");
        for (size_t i = 0; i < w->n_meta; i++) {
            if (i)
                buf_addc(&h, ',');
            add_json_str(&h, w->meta[i].key);
            buf_addc(&h, ':');
            add_json_str(&h, w->meta[i].val);
        }
        buf_addc(&h, '}');
    }
    for (size_t i = 0; i < w->n; i++) {
        const struct st_tensor *t = &w->t[i];
        if (i || w->n_meta)
            buf_addc(&h, ',');
        add_json_str(&h, t->name);
        buf_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype_name(t->dtype));
        for (int d = 0; d < t->ndim; d++)
            buf_printf(&h, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        buf_printf(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)t->offset,
                   (unsigned long long)(t->offset + t->nbytes));
    }
    buf_addc(&h, '}');
    while ((8 + h.len) % 8) /* pad so the data section starts 8-byte aligned */
        buf_addc(&h, ' ');
    int rc = 0;
    if ((rc = afile_open(&w->af, path, e)) < 0)
        goto out;
    w->path = xstrdup(path);
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
    if (fwrite(len8, 1, 8, w->af.fp) != 8 || fwrite(h.ptr, 1, h.len, w->af.fp) != h.len)
        rc = err_set(e, ERR_IO, "cannot write '%s': %s", path, strerror(errno));
out:
    buf_release(&h);
    return rc;
}

int st_writer_write(struct st_writer *w, const void *bytes, uint64_t nbytes, struct err *e)
{
    ASSERT(w->af.fp && w->next < w->n && nbytes == w->t[w->next].nbytes);
    w->next++;
    if (nbytes && fwrite(bytes, 1, (size_t)nbytes, w->af.fp) != nbytes)
        return err_set(e, ERR_IO, "cannot write '%s': %s", w->path, strerror(errno));
    return 0;
}

int st_writer_finish(struct st_writer *w, struct err *e)
{
    ASSERT(w->af.fp);
    int rc = 0;
    if (w->next != w->n)
        rc = err_set(e, ERR_INVALID, "'%s': %zu of %zu tensors written", w->path, w->next, w->n);
    /* As before, what was written is kept even then (tests write short files on purpose);
     * it only appears under `path` whole, never half-written. */
    int rc2 = afile_commit(&w->af, e);
    return rc ? rc : rc2;
}

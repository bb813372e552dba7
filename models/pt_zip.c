/*
 * pt_zip.c — STORED-only zip central directory reader (see pt_zip.h).
 *
 * Record layouts are those of PKWARE's APPNOTE.TXT (sections 4.3.7, 4.3.12, 4.3.14-16,
 * 4.5.3). Every multi-byte field is little-endian.
 */
#include "pt_zip.h"

#include <stdlib.h>
#include <string.h>

#include "alloc.h"

#define SIG_LOCAL 0x04034b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_EOCD 0x06054b50u
#define SIG_EOCD64 0x06064b50u
#define SIG_LOCATOR64 0x07064b50u
#define EOCD_SIZE 22u
#define LOCATOR64_SIZE 20u
#define EOCD64_SIZE 56u
#define CENTRAL_SIZE 46u
#define LOCAL_SIZE 30u
#define U32_MAX_FIELD 0xffffffffu /* "the real value is in the ZIP64 extra field" */

static uint16_t rd16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t rd64(const uint8_t *p)
{
    return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

/* Where the central directory lies and how many entries it has. */
struct cdir {
    uint64_t offset, size, count;
};

/* The end-of-central-directory record: the last one, after at most a 64 KiB comment. */
static int find_eocd(const uint8_t *buf, uint64_t size, uint64_t *at)
{
    if (size < EOCD_SIZE)
        return -1;
    uint64_t lowest = size - EOCD_SIZE > 0xffffu ? size - EOCD_SIZE - 0xffffu : 0;
    for (uint64_t p = size - EOCD_SIZE + 1; p-- > lowest;) {
        if (rd32(buf + p) == SIG_EOCD && p + EOCD_SIZE + rd16(buf + p + 20) <= size) {
            *at = p;
            return 0;
        }
    }
    return -1;
}

/* ZIP64: the locator just before the EOCD points at the 64-bit record. */
static int read_eocd64(const uint8_t *buf, uint64_t size, uint64_t eocd, const char *what,
                       struct cdir *cd, struct err *e)
{
    if (eocd < LOCATOR64_SIZE || rd32(buf + eocd - LOCATOR64_SIZE) != SIG_LOCATOR64)
        return err_set(e, ERR_INVALID, "'%s': zip directory needs ZIP64 but has no locator",
                       what);
    uint64_t at = rd64(buf + eocd - LOCATOR64_SIZE + 8);
    if (at > size - EOCD64_SIZE || rd32(buf + at) != SIG_EOCD64)
        return err_set(e, ERR_INVALID, "'%s': ZIP64 end record outside the file (truncated?)",
                       what);
    cd->count = rd64(buf + at + 32);
    cd->size = rd64(buf + at + 40);
    cd->offset = rd64(buf + at + 48);
    return 0;
}

static int read_cdir(const uint8_t *buf, uint64_t size, const char *what, struct cdir *cd,
                     struct err *e)
{
    uint64_t eocd;
    if (find_eocd(buf, size, &eocd) < 0)
        return err_set(e, ERR_INVALID, "'%s': no zip directory at the end (truncated?)", what);
    const uint8_t *p = buf + eocd;
    if (rd16(p + 4) != 0 || rd16(p + 6) != 0 || rd16(p + 8) != rd16(p + 10))
        return err_set(e, ERR_UNSUPPORTED, "'%s': split zip archives are not supported", what);
    cd->count = rd16(p + 10);
    cd->size = rd32(p + 12);
    cd->offset = rd32(p + 16);
    if (cd->count == 0xffffu || cd->size == U32_MAX_FIELD || cd->offset == U32_MAX_FIELD) {
        int rc = read_eocd64(buf, size, eocd, what, cd, e);
        if (rc < 0)
            return rc;
    }
    if (cd->offset > eocd || cd->size > eocd - cd->offset)
        return err_set(e, ERR_INVALID, "'%s': zip directory outside the file (truncated?)",
                       what);
    if (cd->count > PT_ZIP_MAX_ENTRIES || cd->count > cd->size / CENTRAL_SIZE)
        return err_set(e, ERR_INVALID, "'%s': zip directory claims %llu entries", what,
                       (unsigned long long)cd->count);
    return 0;
}

/* Sizes and offset given as 0xffffffff are in the ZIP64 extra field (id 1), in order. */
static int zip64_fields(const uint8_t *extra, size_t len, uint64_t *usize, uint64_t *csize,
                        uint64_t *local)
{
    uint64_t *want[3] = {usize, csize, local};
    for (size_t at = 0; at + 4 <= len;) {
        uint16_t id = rd16(extra + at), n = rd16(extra + at + 2);
        if (at + 4 + n > len)
            return -1;
        if (id == 1) {
            size_t k = 0;
            for (int i = 0; i < 3; i++) {
                if (*want[i] != U32_MAX_FIELD)
                    continue;
                if (k + 8 > n)
                    return -1;
                *want[i] = rd64(extra + at + 4 + k);
                k += 8;
            }
            return 0;
        }
        at += 4 + (size_t)n;
    }
    return *usize == U32_MAX_FIELD || *csize == U32_MAX_FIELD || *local == U32_MAX_FIELD ? -1
                                                                                          : 0;
}

/* Where the data of the entry whose local header is at `local` starts. */
static int data_offset(const uint8_t *buf, uint64_t size, uint64_t local,
                       const struct pt_zip_entry *ent, uint64_t *out)
{
    if (local > size || size - local < LOCAL_SIZE || rd32(buf + local) != SIG_LOCAL)
        return -1;
    uint64_t n = rd16(buf + local + 26), m = rd16(buf + local + 28);
    if (n != ent->name_len || size - local - LOCAL_SIZE < n + m ||
        memcmp(buf + local + LOCAL_SIZE, ent->name, n) != 0)
        return -1;
    *out = local + LOCAL_SIZE + n + m;
    return 0;
}

static int read_entry(const uint8_t *buf, uint64_t size, uint64_t *at, uint64_t end,
                      const char *what, struct pt_zip_entry *ent, struct err *e)
{
    const uint8_t *p = buf + *at;
    if (end - *at < CENTRAL_SIZE || rd32(p) != SIG_CENTRAL)
        return err_set(e, ERR_INVALID, "'%s': damaged zip directory entry", what);
    uint16_t flags = rd16(p + 8), method = rd16(p + 10);
    uint64_t csize = rd32(p + 20), usize = rd32(p + 24), local = rd32(p + 42);
    size_t n = rd16(p + 28), m = rd16(p + 30), k = rd16(p + 32);
    if (end - *at - CENTRAL_SIZE < (uint64_t)n + m + k)
        return err_set(e, ERR_INVALID, "'%s': damaged zip directory entry", what);
    ent->name = (const char *)p + CENTRAL_SIZE;
    ent->name_len = n;
    if (zip64_fields(p + CENTRAL_SIZE + n, m, &usize, &csize, &local) < 0)
        return err_set(e, ERR_INVALID, "'%s': entry '%.*s': bad ZIP64 field", what, (int)n,
                       ent->name);
    if (flags & 1u)
        return err_set(e, ERR_UNSUPPORTED, "'%s': entry '%.*s' is encrypted", what, (int)n,
                       ent->name);
    if (method != 0 || csize != usize)
        return err_set(e, ERR_UNSUPPORTED,
                       "'%s': entry '%.*s' is compressed (method %u); torch.save writes "
                       "uncompressed archives, re-save the checkpoint with torch.save",
                       what, (int)n, ent->name, (unsigned)method);
    if (data_offset(buf, size, local, ent, &ent->offset) < 0 || ent->offset > size ||
        usize > size - ent->offset)
        return err_set(e, ERR_INVALID, "'%s': entry '%.*s' lies outside the file (truncated?)",
                       what, (int)n, ent->name);
    ent->size = usize;
    *at += CENTRAL_SIZE + n + m + k;
    return 0;
}

static int cmp_name(const char *a, size_t an, const char *b, size_t bn)
{
    int c = memcmp(a, b, an < bn ? an : bn);
    return c ? c : (an > bn) - (an < bn);
}

static int cmp_entry(const void *x, const void *y)
{
    const struct pt_zip_entry *a = x, *b = y;
    return cmp_name(a->name, a->name_len, b->name, b->name_len);
}

/* torch takes the folder of the first entry as the archive name (inline_container.cc). */
static int set_prefix(struct pt_zip *z, const struct pt_zip_entry *first, const char *what,
                      struct err *e)
{
    const char *slash = memchr(first->name, '/', first->name_len);
    if (!slash)
        return err_set(e, ERR_INVALID,
                       "'%s': zip entry '%.*s' is not in a folder (not a PyTorch checkpoint)",
                       what, (int)first->name_len, first->name);
    z->prefix = first->name;
    z->prefix_len = (size_t)(slash - first->name);
    return 0;
}

int pt_zip_open(const uint8_t *buf, uint64_t size, const char *what, struct pt_zip *z,
                struct err *e)
{
    struct cdir cd = {0};
    int rc;
    memset(z, 0, sizeof(*z));
    if ((rc = read_cdir(buf, size, what, &cd, e)) < 0)
        return rc;
    if (cd.count == 0)
        return err_set(e, ERR_INVALID, "'%s': the zip archive is empty", what);
    z->entries = xcalloc((size_t)cd.count, sizeof(*z->entries));
    uint64_t at = cd.offset, end = cd.offset + cd.size;
    for (uint64_t i = 0; i < cd.count; i++) {
        if ((rc = read_entry(buf, size, &at, end, what, &z->entries[i], e)) < 0)
            goto fail;
        z->n_entries++;
    }
    if ((rc = set_prefix(z, &z->entries[0], what, e)) < 0)
        goto fail;
    qsort(z->entries, z->n_entries, sizeof(*z->entries), cmp_entry);
    for (size_t i = 1; i < z->n_entries; i++)
        if (cmp_entry(&z->entries[i - 1], &z->entries[i]) == 0) {
            rc = err_set(e, ERR_INVALID, "'%s': zip entry '%.*s' appears twice", what,
                         (int)z->entries[i].name_len, z->entries[i].name);
            goto fail;
        }
    return 0;
fail:
    pt_zip_release(z);
    return rc;
}

void pt_zip_release(struct pt_zip *z)
{
    xfree(z->entries);
    memset(z, 0, sizeof(*z));
}

const struct pt_zip_entry *pt_zip_find(const struct pt_zip *z, const char *name,
                                       size_t name_len)
{
    size_t n = z->prefix_len + 1 + name_len;
    char *full = xmalloc(n);
    memcpy(full, z->prefix, z->prefix_len);
    full[z->prefix_len] = '/';
    memcpy(full + z->prefix_len + 1, name, name_len);
    const struct pt_zip_entry *found = NULL;
    size_t lo = 0, hi = z->n_entries;
    while (lo < hi && !found) {
        size_t mid = lo + (hi - lo) / 2;
        const struct pt_zip_entry *m = &z->entries[mid];
        int c = cmp_name(m->name, m->name_len, full, n);
        if (c == 0)
            found = m;
        else if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    xfree(full);
    return found;
}

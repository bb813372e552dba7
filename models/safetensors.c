/*
 * safetensors reader: header validation, mmap, conversions (see safetensors.h).
 */
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "log.h"
#include "pt_load.h"
#include "safetensors_guard.h"

static const char *const dtype_names[ST_DTYPE_COUNT] = {
    "F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8",
    "U8",  "BOOL", "U16", "U32", "U64", "F8_E4M3", "F8_E5M2",
};
static const unsigned char dtype_sizes[ST_DTYPE_COUNT] = {8, 4, 2, 2, 8, 4, 2, 1,
                                                          1, 1, 2, 4, 8, 1, 1};

const char *st_dtype_name(enum st_dtype dt)
{
    return (unsigned)dt < ST_DTYPE_COUNT ? dtype_names[dt] : "?";
}

size_t st_dtype_size(enum st_dtype dt)
{
    return (unsigned)dt < ST_DTYPE_COUNT ? dtype_sizes[dt] : 0;
}

int st_dtype_parse(const char *s, enum st_dtype *out)
{
    for (int i = 0; i < ST_DTYPE_COUNT; i++) {
        if (strcmp(s, dtype_names[i]) == 0) {
            *out = (enum st_dtype)i;
            return 0;
        }
    }
    return ERR_INVALID;
}

uint64_t st_tensor_numel(const struct st_tensor *t)
{
    uint64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= (uint64_t)t->shape[i];
    return n;
}

void st_shape_str(const struct st_tensor *t, char *out, size_t size)
{
    size_t len = 0;
    if (size == 0)
        return;
    out[0] = '\0';
    len += (size_t)snprintf(out + len, size - len, "[");
    for (int i = 0; i < t->ndim && len < size; i++)
        len += (size_t)snprintf(out + len, size - len, "%s%lld", i ? "," : "",
                                (long long)t->shape[i]);
    if (len < size)
        snprintf(out + len, size - len, "]");
}

/* ---- header parsing --------------------------------------------------------- */

/* A JSON number that is a non-negative integer representable exactly in a double. */
static int json_u64(const cJSON *j, uint64_t *out)
{
    if (!cJSON_IsNumber(j))
        return -1;
    double d = j->valuedouble;
    if (!(d >= 0) || d > 9007199254740992.0 || d != floor(d))
        return -1;
    *out = (uint64_t)d;
    return 0;
}

static int cmp_tensor_name(const void *a, const void *b)
{
    return strcmp(((const struct st_tensor *)a)->name, ((const struct st_tensor *)b)->name);
}

static int cmp_tensor_ptr_offset(const void *a, const void *b)
{
    const struct st_tensor *x = *(const struct st_tensor *const *)a;
    const struct st_tensor *y = *(const struct st_tensor *const *)b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

static int parse_tensor(const cJSON *item, uint64_t data_size, const char *what,
                        struct st_tensor *t, struct err *e)
{
    const char *name = item->string;
    if (!cJSON_IsObject(item))
        return err_set(e, ERR_INVALID, "'%s': tensor '%s': header entry is not an object", what,
                       name);
    const cJSON *jd = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *jo = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!cJSON_IsString(jd) || !cJSON_IsArray(js) || !cJSON_IsArray(jo))
        return err_set(e, ERR_INVALID,
                       "'%s': tensor '%s': header entry needs dtype, shape and data_offsets",
                       what, name);
    if (st_dtype_parse(jd->valuestring, &t->dtype) < 0)
        return err_set(e, ERR_INVALID, "'%s': tensor '%s': unknown dtype '%s'", what, name,
                       jd->valuestring);
    int nd = cJSON_GetArraySize(js);
    if (nd > ST_MAX_DIMS)
        return err_set(e, ERR_INVALID, "'%s': tensor '%s': %d dimensions (at most %d)", what,
                       name, nd, ST_MAX_DIMS);
    t->ndim = nd;
    /* numel * element size must not overflow; data_size bounds it anyway. */
    unsigned __int128 bytes = st_dtype_size(t->dtype);
    int i = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, js)
    {
        uint64_t v;
        if (json_u64(d, &v) < 0)
            return err_set(e, ERR_INVALID,
                           "'%s': tensor '%s': shape entries must be non-negative integers", what,
                           name);
        t->shape[i++] = (int64_t)v;
        bytes *= v;
        if (bytes > ((unsigned __int128)1 << 64) - 1)
            bytes = ((unsigned __int128)1 << 64) - 1;
    }
    uint64_t begin, end;
    if (cJSON_GetArraySize(jo) != 2 || json_u64(cJSON_GetArrayItem(jo, 0), &begin) < 0 ||
        json_u64(cJSON_GetArrayItem(jo, 1), &end) < 0)
        return err_set(e, ERR_INVALID,
                       "'%s': tensor '%s': data_offsets must be two non-negative integers", what,
                       name);
    if (begin > end || end > data_size)
        return err_set(e, ERR_INVALID,
                       "'%s': tensor '%s': data_offsets [%llu, %llu] outside the data section "
                       "(%llu bytes; file truncated?)",
                       what, name, (unsigned long long)begin, (unsigned long long)end,
                       (unsigned long long)data_size);
    if ((unsigned __int128)(end - begin) != bytes)
        return err_set(e, ERR_INVALID,
                       "'%s': tensor '%s': %llu bytes in the file but dtype %s and its shape "
                       "need %llu",
                       what, name, (unsigned long long)(end - begin), st_dtype_name(t->dtype),
                       (unsigned long long)bytes);
    t->offset = begin;
    t->nbytes = end - begin;
    return 0;
}

static int parse_meta(const cJSON *m, const char *what, struct st_file *f, struct err *e)
{
    if (!cJSON_IsObject(m))
        return err_set(e, ERR_INVALID, "'%s': __metadata__ is not an object", what);
    size_t n = (size_t)cJSON_GetArraySize(m);
    f->meta = xcalloc(n ? n : 1, sizeof(*f->meta));
    const cJSON *it;
    cJSON_ArrayForEach(it, m)
    {
        if (!cJSON_IsString(it))
            return err_set(e, ERR_INVALID, "'%s': __metadata__ value of '%s' is not a string",
                           what, it->string);
        f->meta[f->n_meta].key = xstrdup(it->string);
        f->meta[f->n_meta].val = xstrdup(it->valuestring);
        f->n_meta++;
    }
    return 0;
}

/* Sorted by name: reject duplicates. Sorted by offset: reject overlaps, note holes. */
static int check_layout(struct st_file *f, uint64_t data_size, const char *what, struct err *e)
{
    for (size_t i = 1; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i - 1].name, f->tensors[i].name) == 0)
            return err_set(e, ERR_INVALID, "'%s': tensor '%s' appears twice in the header", what,
                           f->tensors[i].name);
    if (f->n_tensors == 0)
        return 0;
    const struct st_tensor **by_off = xmalloc(f->n_tensors * sizeof(*by_off));
    for (size_t i = 0; i < f->n_tensors; i++)
        by_off[i] = &f->tensors[i];
    qsort(by_off, f->n_tensors, sizeof(*by_off), cmp_tensor_ptr_offset);
    uint64_t prev_end = 0, holes = 0;
    int rc = 0;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const struct st_tensor *t = by_off[i];
        if (t->nbytes == 0)
            continue; /* empty tensors occupy nothing and may sit anywhere */
        if (t->offset < prev_end) {
            rc = err_set(e, ERR_INVALID, "'%s': tensor '%s' overlaps another tensor's bytes",
                         what, t->name);
            break;
        }
        holes += t->offset - prev_end;
        prev_end = t->offset + t->nbytes;
    }
    xfree(by_off);
    if (rc == 0 && (holes || prev_end != data_size))
        log_debug("'%s': %llu unused bytes in the data section", what,
                  (unsigned long long)(holes + data_size - prev_end));
    return rc;
}

int st_parse_header(const char *json, size_t len, uint64_t data_size, const char *what,
                    struct st_file *f, struct err *e)
{
    int rc = 0;
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root)
        return err_set(e, ERR_INVALID, "'%s': header is not valid JSON (not a safetensors file?)",
                       what);
    if (!cJSON_IsObject(root)) {
        rc = err_set(e, ERR_INVALID, "'%s': header is not a JSON object", what);
        goto fail;
    }
    size_t n = (size_t)cJSON_GetArraySize(root);
    f->tensors = xcalloc(n ? n : 1, sizeof(*f->tensors));
    f->n_tensors = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, root)
    {
        if (strcmp(it->string, "__metadata__") == 0) {
            if (f->meta) {
                rc = err_set(e, ERR_INVALID, "'%s': __metadata__ appears twice", what);
                goto fail;
            }
            if ((rc = parse_meta(it, what, f, e)) < 0)
                goto fail;
            continue;
        }
        struct st_tensor *t = &f->tensors[f->n_tensors];
        if ((rc = parse_tensor(it, data_size, what, t, e)) < 0)
            goto fail;
        t->name = xstrdup(it->string);
        f->n_tensors++;
    }
    qsort(f->tensors, f->n_tensors, sizeof(*f->tensors), cmp_tensor_name);
    if ((rc = check_layout(f, data_size, what, e)) < 0)
        goto fail;
    cJSON_Delete(root);
    return 0;
fail:
    cJSON_Delete(root);
    st_file_release_tables(f);
    return rc;
}

void st_file_release_tables(struct st_file *f)
{
    for (size_t i = 0; i < f->n_tensors; i++)
        xfree(f->tensors[i].name);
    xfree(f->tensors);
    for (size_t i = 0; i < f->n_meta; i++) {
        xfree(f->meta[i].key);
        xfree(f->meta[i].val);
    }
    xfree(f->meta);
    f->tensors = NULL;
    f->meta = NULL;
    f->n_tensors = f->n_meta = 0;
}

/* ---- opening ------------------------------------------------------------------ */

static void stamp_of(const struct stat *sb, struct st_stamp *out)
{
    out->dev = (uint64_t)sb->st_dev;
    out->ino = (uint64_t)sb->st_ino;
    out->size = (uint64_t)sb->st_size;
    out->mtime_ns = (int64_t)sb->st_mtim.tv_sec * 1000000000 + sb->st_mtim.tv_nsec;
    out->ctime_ns = (int64_t)sb->st_ctim.tv_sec * 1000000000 + sb->st_ctim.tv_nsec;
}

int st_stamp_path(const char *path, struct st_stamp *out)
{
    struct stat sb;
    if (stat(path, &sb) < 0)
        return errno == ENOENT ? ERR_NOT_FOUND : ERR_IO;
    stamp_of(&sb, out);
    return 0;
}

int st_check(const struct st_file *f, struct err *e)
{
    if (st__guard_hit(f->_guard))
        return err_set(e, ERR_IO,
                       "'%s' shrank or could not be read while in use (truncated or rewritten "
                       "in place?)",
                       f->path);
    struct stat sb;
    struct st_stamp now;
    if (fstat(f->_fd, &sb) < 0)
        return err_set(e, ERR_IO, "cannot stat '%s': %s", f->path, strerror(errno));
    stamp_of(&sb, &now);
    /* Renamed over or deleted: unlinking set our inode's ctime, but nobody can open
     * it by name to rewrite it, so its bytes are still those we mapped. */
    if (sb.st_nlink == 0)
        now.ctime_ns = f->_stamp.ctime_ns;
    if (memcmp(&now, &f->_stamp, sizeof(now)) != 0)
        return err_set(e, ERR_IO, "'%s' changed on disk while in use (rewritten in place?)",
                       f->path);
    return 0;
}

/* The safetensors header length from the file's first 8 bytes, checked against its size. */
static int read_header_len(const char *path, const uint8_t *head, uint64_t fsize,
                           uint64_t *hlen, struct err *e)
{
    if (fsize < 8 + 2)
        return err_set(e, ERR_INVALID, "'%s' is too short to be a safetensors file (%llu bytes)",
                       path, (unsigned long long)fsize);
    *hlen = 0;
    for (int i = 7; i >= 0; i--)
        *hlen = (*hlen << 8) | head[i];
    if (*hlen > ST_HEADER_MAX)
        return err_set(e, ERR_TOO_LARGE,
                       "'%s': header length %llu exceeds the %u byte limit (not a safetensors "
                       "file?)",
                       path, (unsigned long long)*hlen, ST_HEADER_MAX);
    if (*hlen < 2 || 8 + *hlen > fsize)
        return err_set(e, ERR_INVALID,
                       "'%s': header length %llu does not fit in the file (%llu bytes; "
                       "truncated?)",
                       path, (unsigned long long)*hlen, (unsigned long long)fsize);
    return 0;
}

/* Fill f's tables from the mapping: a safetensors header, or a torch zip (pt_load.h). */
static int parse_mapped(struct st_file *f, enum pt_format fmt, uint64_t hlen, struct err *e)
{
    const uint8_t *map = f->_map;
    if (fmt == PT_FORMAT_ZIP) {
        f->data = map; /* tensor offsets are file offsets */
        f->data_size = f->_map_size;
        return pt_parse(map, f->_map_size, f->path, f, e);
    }
    f->data = map + 8 + hlen;
    f->data_size = f->_map_size - 8 - hlen;
    return st_parse_header((const char *)map + 8, (size_t)hlen, f->data_size, f->path, f, e);
}

int st_open(const char *path, struct st_file **out, struct err *e)
{
    int rc = 0;
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return err_set(e, errno == ENOENT ? ERR_NOT_FOUND : ERR_IO, "cannot open '%s': %s", path,
                       strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return err_set(e, ERR_IO, "cannot open '%s': not a regular file", path);
    }
    uint64_t fsize = (uint64_t)sb.st_size;
    uint8_t head[9] = {0}; /* the length and the header's first byte, for pt_sniff */
    ssize_t got = fsize ? pread(fd, head, sizeof(head), 0) : 0;
    if (got < 0) {
        rc = err_set(e, ERR_IO, "cannot read '%s': %s", path, strerror(errno));
        close(fd);
        return rc;
    }
    /* The format is decided by content, not by name: a ".ckpt" may be a safetensors file. */
    enum pt_format fmt = pt_sniff(head, (size_t)got);
    uint64_t hlen = 0;
    if (fmt == PT_FORMAT_PICKLE)
        rc = pt_refuse_pickle(path, e);
    else if (fmt == PT_FORMAT_NONE)
        rc = read_header_len(path, head, fsize, &hlen, e);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    void *map = mmap(NULL, (size_t)fsize, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        rc = err_set(e, ERR_IO, "cannot map '%s': %s", path, strerror(errno));
        close(fd);
        return rc;
    }

    struct st_file *f = xcalloc(1, sizeof(*f));
    f->path = xstrdup(path);
    f->_map = map;
    f->_map_size = (size_t)fsize;
    f->_fd = fd;
    stamp_of(&sb, &f->_stamp);
    /* Before the header is read: a file shrinking right now must not kill us either. */
    if ((f->_guard = st__guard_add(map, (size_t)fsize)) < 0)
        log_warn("'%s': mapped without the SIGBUS guard (no free slot or no handler); a "
                 "truncation while it is read would kill the process",
                 path);
    if ((rc = parse_mapped(f, fmt, hlen, e)) < 0 || (rc = st_check(f, e)) < 0)
        goto fail;
    *out = f;
    return 0;
fail:
    st_close(f);
    return rc;
}

void st_close(struct st_file *f)
{
    if (!f)
        return;
    st_file_release_tables(f);
    st__guard_remove(f->_guard); /* before munmap: the address may be reused at once */
    if (f->_map)
        munmap(f->_map, f->_map_size);
    if (f->_fd >= 0)
        close(f->_fd);
    xfree(f->path);
    xfree(f);
}

const struct st_tensor *st_find(const struct st_file *f, const char *name)
{
    size_t lo = 0, hi = f->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(f->tensors[mid].name, name);
        if (c == 0)
            return &f->tensors[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const void *st_tensor_data(const struct st_file *f, const struct st_tensor *t)
{
    return f->data + t->offset;
}

int st_tensor_read(const struct st_file *f, const struct st_tensor *t, uint64_t off, void *buf,
                   size_t n, struct err *e)
{
    ASSERT(off <= t->nbytes && n <= t->nbytes - off);
    const uint8_t *src = st_tensor_data(f, t) + off;
    if (f->_fd < 0 || !f->_map) {
        memcpy(buf, src, n);
        return 0;
    }
    /* The mapping starts at file offset 0 (safetensors and zip archives alike). */
    off_t pos = (off_t)(src - (const uint8_t *)f->_map);
    size_t done = 0;
    while (done < n) {
        ssize_t got = pread(f->_fd, (char *)buf + done, n - done, pos + (off_t)done);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return err_set(e, ERR_IO, "'%s': cannot read tensor '%s': %s", f->path, t->name,
                           got < 0 ? strerror(errno) : "the file is shorter than when opened");
        done += (size_t)got;
    }
    return 0;
}

const float *st_tensor_f32_view(const struct st_file *f, const struct st_tensor *t)
{
    const void *p = st_tensor_data(f, t);
    if (t->dtype != ST_DTYPE_F32 || ((uintptr_t)p & 3u))
        return NULL;
    return p;
}

const char *st_meta_get(const struct st_file *f, const char *key)
{
    for (size_t i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta[i].key, key) == 0)
            return f->meta[i].val;
    return NULL;
}

/* ---- conversions -------------------------------------------------------------- */

float st_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: renormalise */
            int shift = 0;
            while (!(man & 0x400u)) {
                man <<= 1;
                shift++;
            }
            man &= 0x3ffu;
            bits = sign | ((uint32_t)(127 - 15 + 1 - shift) << 23) | (man << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float out;
    memcpy(&out, &bits, 4);
    return out;
}

uint16_t st_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or NaN (keep NaN quiet and non-zero) */
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0));
    if (ax >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        if (ax < 0x33000000u)
            return (uint16_t)sign; /* < half of the smallest subnormal */
        uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; /* 14 - (e - 127) + 13 - 1 ... gives mantissa in units */
        /* value = m * 2^(e-150); in units of 2^-24: m * 2^(e-126) */
        uint32_t q = m >> (shift), rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1)))
            q++;
        return (uint16_t)(sign | q);
    }
    uint32_t e = (ax >> 23) - 127 + 15, m = ax & 0x7fffffu;
    uint32_t h = (e << 10) | (m >> 13), rem = m & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
        h++; /* may carry into the exponent, which is the correct rounding */
    return (uint16_t)(sign | h);
}

float st_bf16_to_f32(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float out;
    memcpy(&out, &bits, 4);
    return out;
}

uint16_t st_f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
    uint32_t lsb = (x >> 16) & 1u;
    x += 0x7fffu + lsb;
    return (uint16_t)(x >> 16);
}

int st_tensor_to_f32(const struct st_file *f, const struct st_tensor *t, float *dst,
                     struct err *e)
{
    const uint8_t *p = st_tensor_data(f, t);
    uint64_t n = st_tensor_numel(t);
    switch (t->dtype) {
    case ST_DTYPE_F32:
        memcpy(dst, p, n * 4);
        return 0;
    case ST_DTYPE_F16:
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = st_f16_to_f32(h);
        }
        return 0;
    case ST_DTYPE_BF16:
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = st_bf16_to_f32(h);
        }
        return 0;
    case ST_DTYPE_F64:
        for (uint64_t i = 0; i < n; i++) {
            double d;
            memcpy(&d, p + 8 * i, 8);
            dst[i] = (float)d;
        }
        return 0;
    case ST_DTYPE_F8_E4M3:
    case ST_DTYPE_F8_E5M2:
        return err_set(e, ERR_UNSUPPORTED,
                       "'%s': tensor '%s' is stored as %s; fp8 checkpoints are not supported "
                       "yet (convert to fp16)",
                       f->path, t->name, st_dtype_name(t->dtype));
    default:
        return err_set(e, ERR_UNSUPPORTED, "'%s': tensor '%s' has integer dtype %s, not a float",
                       f->path, t->name, st_dtype_name(t->dtype));
    }
}

/*
 * safetensors — read-only access to .safetensors files (sd15.md §1.1).
 *
 * A file is an 8-byte little-endian header length N, N bytes of JSON, then one
 * flat data section. st_open() maps the whole file read-only (MAP_PRIVATE,
 * PROT_READ) and validates the header before anything is handed out:
 *   - N within [2, 100 MiB] and 8 + N <= file size;
 *   - the JSON is one object; every member except "__metadata__" is a tensor
 *     with a known "dtype", a "shape" of at most ST_MAX_DIMS non-negative
 *     integers and "data_offsets" [begin, end] with begin <= end <= data size
 *     and end - begin == element count * element size;
 *   - no two tensors share a name, and no two tensors' byte ranges overlap
 *     (holes are allowed and logged at debug level: some writers pad);
 *   - "__metadata__", if present, maps strings to strings.
 * After a successful open the tensor table is sorted by name (st_find is a
 * binary search) and every st_tensor's bytes lie inside the mapping, so the
 * accessors below never fail for bounds reasons.
 *
 * PyTorch checkpoints (.ckpt/.pt/.pth/.bin as torch.save writes them: a zip
 * archive) give the same table through a restricted unpickler that executes
 * nothing (pt_load.h): their offsets are from the start of the file (data points
 * at the mapping's start) and two tensors may share bytes. The format is decided
 * by the content, not the name; a bare pickle (torch's legacy format) is refused.
 *
 * Data is borrowed from the mapping: a pointer from st_tensor_data() stays valid
 * until st_close(). No copy is made unless a conversion is asked for
 * (st_tensor_to_f32 and friends).
 *
 * Files change under a running server (people `cp` a new model over an old one).
 * A rename over the file leaves our inode and mapping intact. A rewrite in place
 * changes the bytes behind pages not yet read, and a shrink makes reads past the
 * new end raise SIGBUS. st_open() therefore keeps the descriptor and the file's
 * stamp (struct st_stamp), and registers the mapping with a SIGBUS guard
 * (safetensors_guard.h) that replaces a faulting mapping with zeros instead of
 * killing the process. Nothing read from a file may be trusted until st_check()
 * says the file is still the one opened: callers check after reading everything
 * they need (the loaders) or before each use of borrowed bytes (the patcher).
 * Keeping the mapping keeps loads zero-copy for weights stored at their file dtype.
 *
 * Threads: an open st_file is immutable; any thread may read it concurrently.
 * st_open/st_close must not race with readers of the same file.
 */
#ifndef LATENTD_MODELS_SAFETENSORS_H
#define LATENTD_MODELS_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define ST_MAX_DIMS 8
#define ST_HEADER_MAX (100u << 20) /* bytes; the reference implementation's cap */

enum st_dtype {
    ST_DTYPE_F64,
    ST_DTYPE_F32,
    ST_DTYPE_F16,
    ST_DTYPE_BF16,
    ST_DTYPE_I64,
    ST_DTYPE_I32,
    ST_DTYPE_I16,
    ST_DTYPE_I8,
    ST_DTYPE_U8,
    ST_DTYPE_BOOL,
    ST_DTYPE_U16,
    ST_DTYPE_U32,
    ST_DTYPE_U64,
    ST_DTYPE_F8_E4M3,
    ST_DTYPE_F8_E5M2,
    ST_DTYPE_COUNT,
};

struct st_tensor {
    char *name;                   /* owned by the st_file */
    enum st_dtype dtype;
    int ndim;                     /* 0 = scalar (one element) */
    int64_t shape[ST_MAX_DIMS];   /* PyTorch order, outermost first */
    uint64_t offset;              /* bytes, from the start of the data section */
    uint64_t nbytes;              /* = numel * element size */
};

struct st_meta {
    char *key; /* owned by the st_file */
    char *val; /* owned by the st_file */
};

/* What identifies a file's contents without reading them: any write, truncate,
 * rename over it or chmod changes at least one field (ctime cannot be set back by
 * `touch -r` or `cp -p`, which is why it is here besides mtime). */
struct st_stamp {
    uint64_t dev, ino;
    uint64_t size;     /* bytes */
    int64_t mtime_ns;  /* ns since the epoch */
    int64_t ctime_ns;  /* ns since the epoch */
};

struct st_file {
    char *path;                 /* owned */
    const uint8_t *data;        /* borrowed from the mapping: start of the data section */
    uint64_t data_size;         /* bytes */
    struct st_tensor *tensors;  /* owned; sorted by name */
    size_t n_tensors;
    struct st_meta *meta;       /* owned; "__metadata__" members in file order */
    size_t n_meta;
    /* private */
    void *_map;
    size_t _map_size;
    int _fd;                    /* owned: open while mapped, for st_check's fstat */
    int _guard;                 /* SIGBUS guard slot, or -1 */
    struct st_stamp _stamp;     /* at open */
};

/* "F32", "BF16", ...; "?" for an out-of-range value. */
const char *st_dtype_name(enum st_dtype dt);
/* Element size in bytes (1, 2, 4 or 8). */
size_t st_dtype_size(enum st_dtype dt);
/* Parse a dtype code; returns 0 or ERR_INVALID for an unknown code. */
int st_dtype_parse(const char *s, enum st_dtype *out);

/* Number of elements (product of the shape; 1 for a scalar). */
uint64_t st_tensor_numel(const struct st_tensor *t);
/* Format the shape as "[320,4,3,3]" into out (size bytes, always NUL-terminated). */
void st_shape_str(const struct st_tensor *t, char *out, size_t size);

/*
 * Open and validate `path`. Returns 0 and a new st_file in *out (caller frees
 * with st_close), or a negative ERR_* with a message naming the file (and the
 * tensor, when one is at fault) in `e`: ERR_NOT_FOUND, ERR_IO, ERR_INVALID,
 * ERR_TOO_LARGE, ERR_UNSUPPORTED (legacy pickles, compressed archives, ...) or
 * ERR_DENIED (a pickle that names what the allow-list refuses; pt_pickle.h).
 */
int st_open(const char *path, struct st_file **out, struct err *e);

/* Unmap and free. st_close(NULL) is a no-op. */
void st_close(struct st_file *f);

/*
 * 0 while every byte read from `f` is what the file held at st_open; ERR_IO with a
 * message naming the file when it has since been rewritten in place, truncated, or
 * could not be read (a SIGBUS the guard caught: the mapping reads as zeros from
 * then on). Costs one fstat. Any thread.
 */
int st_check(const struct st_file *f, struct err *e);

/* The stamp of `path` (stat, following links). Returns 0, ERR_NOT_FOUND or ERR_IO. */
int st_stamp_path(const char *path, struct st_stamp *out);

/*
 * Parse and validate a header held in a caller buffer (pure; used by st_open
 * and by the fuzz driver). `json` is the N header bytes (not NUL-terminated),
 * `data_size` the size of the data section that follows it in the file. On
 * success fills f->tensors/n_tensors/meta/n_meta (caller releases them with
 * st_file_release_tables). `what` names the file in messages.
 */
int st_parse_header(const char *json, size_t len, uint64_t data_size, const char *what,
                    struct st_file *f, struct err *e);
void st_file_release_tables(struct st_file *f);

/* The tensor named `name`, or NULL. O(log n). */
const struct st_tensor *st_find(const struct st_file *f, const char *name);

/* Bytes of `t`, borrowed from the mapping (valid until st_close). */
const void *st_tensor_data(const struct st_file *f, const struct st_tensor *t);

/*
 * Copy bytes [off, off + n) of t's data into buf through the file descriptor (pread),
 * not the mapping. Why: a caller that reads every tensor once (validation) then leaves
 * none of their pages mapped in this process, so the file does not count in its RSS
 * until a model uses the weights (issue 15), and a read copies faster than page faults
 * map (this VM: 0.3 s for the whole 2 GiB SD1.5 file against 1.3-1.9 s to map 1.6 GiB).
 * off + n must lie within the tensor. Returns 0, or ERR_IO with a message when the
 * file is now shorter (truncated or rewritten) or cannot be read. An st_file without
 * a descriptor is read from its mapping. Any thread.
 */
int st_tensor_read(const struct st_file *f, const struct st_tensor *t, uint64_t off, void *buf,
                   size_t n, struct err *e);

/*
 * A float32 view of `t` without copying when the file stores it as F32 at a
 * 4-byte aligned address; NULL otherwise (then use st_tensor_to_f32).
 */
const float *st_tensor_f32_view(const struct st_file *f, const struct st_tensor *t);

/*
 * Convert `t` to float32 into dst (numel floats). F32, F16, BF16 and F64 are
 * converted exactly (F64 rounds to nearest); integer dtypes are refused, as are
 * fp8 (out of scope, sd15.md §1.4). Returns 0 or ERR_UNSUPPORTED with a message
 * naming the file and the tensor.
 */
int st_tensor_to_f32(const struct st_file *f, const struct st_tensor *t, float *dst,
                     struct err *e);

/* Value of "__metadata__" member `key`, or NULL. */
const char *st_meta_get(const struct st_file *f, const char *key);

/* IEEE half <-> float conversions (round to nearest even), and bfloat16. */
float st_f16_to_f32(uint16_t h);
uint16_t st_f32_to_f16(float f);
float st_bf16_to_f32(uint16_t h);
uint16_t st_f32_to_bf16(float f);

/* ---- writing (for the checkpoint generator, LoRA test files and fixtures) ---- */

/*
 * A streaming writer: declare every tensor first (name, dtype, shape), then
 * st_writer_begin() writes the header, then st_writer_write() is called once
 * per tensor in declaration order with exactly its bytes. This keeps a 2 GiB
 * checkpoint out of memory. Not thread-safe.
 */
struct st_writer;

struct st_writer *st_writer_new(void);
void st_writer_free(struct st_writer *w);
/* Declare a tensor; returns its index. `name` is copied. */
size_t st_writer_add(struct st_writer *w, const char *name, enum st_dtype dtype, int ndim,
                     const int64_t *shape);
/* Add a "__metadata__" string pair (copied). */
void st_writer_meta(struct st_writer *w, const char *key, const char *val);
/* Open a temporary beside `path` (util/afile) and write the header; finish renames it over
 * `path`, st_writer_free before finish removes it. Returns 0 or ERR_IO with a message. */
int st_writer_begin(struct st_writer *w, const char *path, struct err *e);
/* Write the next tensor's bytes (must be that tensor's nbytes). */
int st_writer_write(struct st_writer *w, const void *bytes, uint64_t nbytes, struct err *e);
/* Flush and close the file; fails if not every declared tensor was written. */
int st_writer_finish(struct st_writer *w, struct err *e);

#endif

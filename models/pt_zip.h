/*
 * pt_zip — the zip container of PyTorch checkpoints (torch.save since 1.6), read
 * from a caller buffer (the file's mapping). Private to models/pt_*.c and tests.
 *
 * torch writes every record STORED (uncompressed) with its data aligned to 64 bytes,
 * so a tensor's bytes can be used in place from the mapping: that is the whole
 * reason this reader exists instead of a zip library. libzip and minizip both
 * extract entries into buffers and neither says where an entry's data lies in the
 * file, which is the one thing we need; what is left to read is the central
 * directory (ZIP64 included, which any checkpoint over 4 GiB uses), a few dozen
 * lines we can fuzz. Compressed, encrypted or split archives are refused: torch
 * never writes them.
 *
 * Layout of a checkpoint: every entry lies in one top-level folder (the archive
 * name, "archive" or the file's stem), holding "data.pkl" (the pickle), "data/<key>"
 * (one per storage), "version", "byteorder" ("little" or "big"; absent before torch
 * 2.1, meaning little) and a few bookkeeping files.
 *
 * CRCs are not checked: that would read every byte of a multi-GiB file at open
 * (torch's own mmap=True load does not check them either). Bounds are: every entry
 * found lies inside the buffer.
 *
 * Pure functions over the buffer; any thread.
 */
#ifndef LATENTD_MODELS_PT_ZIP_H
#define LATENTD_MODELS_PT_ZIP_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define PT_ZIP_MAX_ENTRIES (1u << 20) /* far above any state dict's storage count */

struct pt_zip_entry {
    const char *name; /* borrowed from the buffer; not NUL-terminated */
    size_t name_len;
    uint64_t offset;  /* bytes from the start of the buffer to the entry's data */
    uint64_t size;    /* bytes */
};

struct pt_zip {
    struct pt_zip_entry *entries; /* owned; sorted by name */
    size_t n_entries;
    const char *prefix; /* archive folder name, borrowed; not NUL-terminated */
    size_t prefix_len;
};

/*
 * Read the central directory of the zip in buf[0, size). Returns 0 and fills `z`
 * (release with pt_zip_release), or ERR_INVALID / ERR_UNSUPPORTED with a message
 * naming `what` (the file) in `e`.
 */
int pt_zip_open(const uint8_t *buf, uint64_t size, const char *what, struct pt_zip *z,
                struct err *e);
void pt_zip_release(struct pt_zip *z);

/* The entry "<prefix>/<name>" (name of name_len bytes), or NULL. O(log n). */
const struct pt_zip_entry *pt_zip_find(const struct pt_zip *z, const char *name,
                                       size_t name_len);

#endif

/*
 * pt_load — PyTorch checkpoints (.ckpt/.pt/.pth/.bin written by torch.save since 1.6)
 * as the same tensor table a safetensors file gives (struct st_file), so that every
 * loader reads either format through st_open() without knowing which it got.
 *
 * The file is a zip (pt_zip.h) whose data.pkl is run by a restricted unpickler with
 * the guarantees of torch.load(weights_only=True) (pt_pickle.h): nothing is
 * executed, only allowed globals are named, anything else is refused with a message.
 * The state dict is chosen as ComfyUI's load_torch_file (comfy/utils.py) does: the
 * "state_dict" member when there is one (pytorch-lightning checkpoints: it sits
 * beside epoch, global_step, callbacks, ...), else the single member of a one-member
 * dict when that is a dict, else the whole dict. Its tensor values become st_tensors
 * whose offsets point at their bytes in the file itself (torch stores them
 * uncompressed), so nothing is copied; its other values are skipped.
 *
 * Unlike a safetensors file, two tensors may share bytes (views of one storage,
 * tied weights); the bytes are read-only, so nothing depends on them being apart.
 * Views that are not contiguous are refused (we have no strides), as are dtypes
 * safetensors has no name for, sparse/quantized tensors and big-endian files.
 * The legacy (pre-1.6, non-zip) format is refused with a message.
 *
 * Pure functions over a caller buffer; any thread.
 */
#ifndef LATENTD_MODELS_PT_LOAD_H
#define LATENTD_MODELS_PT_LOAD_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "safetensors.h"

#define PT_PICKLE_MAX_BYTES (256u << 20) /* data.pkl; a 100k-tensor state dict is ~20 MiB */

enum pt_format {
    PT_FORMAT_NONE,   /* neither: perhaps a safetensors file */
    PT_FORMAT_ZIP,    /* a zip archive: torch.save's format since 1.6 */
    PT_FORMAT_PICKLE, /* a bare pickle: torch's legacy format, or not a checkpoint */
};

/* What the first n bytes of a file (9 are enough) say it is. */
enum pt_format pt_sniff(const uint8_t *head, size_t n);

/* ERR_UNSUPPORTED with a message for a PT_FORMAT_PICKLE file named `what`. */
int pt_refuse_pickle(const char *what, struct err *e);

/*
 * Read the torch zip checkpoint in buf[0, size) (the whole file). On success fills
 * f->tensors / f->n_tensors, sorted by name, with offsets from buf (release with
 * st_file_release_tables; f->data and f->data_size are the caller's to set: buf and
 * size). On failure returns a negative ERR_* with a message naming `what` in `e`
 * (ERR_DENIED for a pickle that names or does what the allow-list refuses) and
 * leaves no tables behind.
 */
int pt_parse(const uint8_t *buf, uint64_t size, const char *what, struct st_file *f,
             struct err *e);

/*
 * The whole pickle of the torch zip checkpoint buf[0, size), for files that are more than
 * a flat state dict (a hypernetwork's per-width module lists): the restricted unpickler's
 * document (pt_pickle.h) in *doc, freed with pt_doc_free; its strings and storage offsets
 * refer to buf, which must outlive it. Errors as pt_parse's.
 */
struct pt_doc;
struct pt_value;
int pt_load_doc(const uint8_t *buf, uint64_t size, const char *what, struct pt_doc **doc,
                struct err *e);

/*
 * The tensor `val` (stored under `key`) of such a document as an st_tensor whose offset
 * is into buf (out->name owned: xfree). ERR_INVALID when val is no tensor, ERR_UNSUPPORTED
 * for a dtype or view pt_parse refuses too.
 */
int pt_value_tensor(const struct pt_value *key, const struct pt_value *val, const char *what,
                    struct st_tensor *out, struct err *e);

#endif

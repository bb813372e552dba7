/*
 * Private to checkpoint*.c: the name table, detection, and the validated tensor list
 * shared by probing (checkpoint.c, no patcher) and loading (checkpoint_load.c).
 */
#ifndef LATENTD_MODELS_CHECKPOINT_IMPL_H
#define LATENTD_MODELS_CHECKPOINT_IMPL_H

#include "safetensors.h"
#include "model_config.h"
#include "tensor.h"

/* The file's tensors under their normalised names, sorted by name. */
struct nkey {
    char *name;                /* owned: normalised full name */
    const struct st_tensor *t; /* borrowed from the st_file */
    int used;
};

struct ntable {
    struct nkey *v;
    size_t n;
    int skipped;
};

/* Build the sorted table of f's tensors under the names map() gives (1: renamed into buf,
 * 0: kept, -1: skipped and counted); release with ckpt__ntable_release. */
void ckpt__ntable_build(const struct st_file *f,
                        int (*map)(const char *name, unsigned flags, char *buf, size_t size),
                        unsigned flags, struct ntable *nt);
void ckpt__ntable_release(struct ntable *nt);
struct nkey *ckpt__ntable_find(const struct ntable *nt, const char *name);
const struct st_tensor *ckpt__nfind(const struct ntable *nt, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
size_t ckpt__count_prefix(const struct ntable *nt, const char *prefix);

/* checkpoint_detect.c: the family and every knob of the components in `flags`
 * (enum model_load_flags) from shapes, or ERR_UNSUPPORTED naming what was found. */
int ckpt__detect(const struct st_file *f, const struct ntable *nt, unsigned flags,
                 struct model_config *c, struct err *e);

/* The UNet's knobs and family from its shapes (model.diffusion_model.* in nt). */
int ckpt__detect_unet(const struct st_file *f, const struct ntable *nt, struct model_config *c,
                      struct err *e);

struct ckpt__item {
    struct model_key key;           /* expected name (normalised), shape, component */
    const struct st_tensor *t;     /* the file's tensor, borrowed from the st_file */
};

struct ckpt__items {
    struct ckpt__item *v; /* owned; free with xfree */
    size_t n, cap;
};

/* Open, detect and validate (checkpoint.h steps 1-4). On success *f_out is open (caller
 * closes) and items lists every expected tensor of the flagged components in layout
 * (forward) order. */
int ckpt__validate(const char *path, unsigned flags, struct st_file **f_out,
                   struct model_config *cfg, struct ckpt__items *items, int *skipped,
                   struct err *e);

/* A file tensor against the expected key: shape, a supported dtype, finite values.
 * 0, or an error naming the file and the tensor. */
int ckpt__check_tensor(const struct st_file *f, const struct st_tensor *t,
                       const struct model_key *k, struct err *e);
/* Append (k, t) to the list. */
void ckpt__items_push(struct ckpt__items *it, const struct model_key *k,
                      const struct st_tensor *t);

int ckpt__tensor_dtype(const struct st_tensor *t, enum tensor_dtype *dt);
/* The MODEL_LOAD_* flag that loads component c. */
unsigned ckpt__comp_flag(enum model_component c);

/* checkpoint_vae.c: the first_stage_model.* name of a standalone VAE file's tensor
 * `name` (bare LDM or diffusers naming) into out; 0 when the name is left as is
 * (already prefixed, or not a VAE name). */
int ckpt__vae_file_name(const char *name, char *out, size_t size);
/* The error for a file asked as a VAE that holds none, naming what it holds. */
int ckpt__not_a_vae(const struct st_file *f, struct err *e);

/*
 * checkpoint_text.c: standalone text-encoder files (model_text_load). Flags past
 * enum model_load_flags: the file is one text encoder, loaded as slot 1 (or 2 with
 * CKPT_LOAD_TEXT_SECOND) of family (flags >> CKPT_LOAD_TEXT_FAMILY_SHIFT) - 1.
 */
#define CKPT_LOAD_TEXT_FILE (1u << 5)
#define CKPT_LOAD_TEXT_SECOND (1u << 6)
#define CKPT_LOAD_TEXT_FAMILY_SHIFT 8
/* The name map of such a load: the target slot's checkpoint name, -1 to skip. */
int ckpt__text_file_name(const char *name, unsigned flags, char *out, size_t size);
/* Its detection: the target family's canonical config with the file's encoder knobs in
 * the slot (the other slot's width 0). */
int ckpt__detect_text(const struct st_file *f, const struct ntable *nt, unsigned flags,
                      struct model_config *c, struct err *e);

#endif

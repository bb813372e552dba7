/*
 * Private to sd15_ckpt*.c: the validated tensor list shared by probing
 * (sd15_ckpt.c, no patcher) and loading (sd15_load.c, builds patcher models).
 */
#ifndef LATENTD_MODELS_SD15_CKPT_IMPL_H
#define LATENTD_MODELS_SD15_CKPT_IMPL_H

#include "safetensors.h"
#include "model_config.h"
#include "tensor.h"

struct ckpt__item {
    struct model_key key;           /* expected name (normalised), shape, component */
    const struct st_tensor *t;     /* the file's tensor, borrowed from the st_file */
};

struct ckpt__items {
    struct ckpt__item *v; /* owned; free with xfree */
    size_t n, cap;
};

/* Open, detect and validate (sd15_ckpt.h steps 1-4). On success *f_out is open (caller
 * closes) and items lists every expected tensor of the flagged components in layout
 * (forward) order. */
int ckpt__validate(const char *path, unsigned flags, struct st_file **f_out,
                   struct model_config *cfg, struct ckpt__items *items, int *skipped,
                   struct err *e);

int ckpt__tensor_dtype(const struct st_tensor *t, enum tensor_dtype *dt);
const char *ckpt__comp_prefix(enum model_component c);

/* sd15_ckpt_vae.c: the first_stage_model.* name of a standalone VAE file's tensor
 * `name` (bare LDM or diffusers naming) into out; 0 when the name is left as is
 * (already prefixed, or not a VAE name). */
int ckpt__vae_file_name(const char *name, char *out, size_t size);
/* The error for a file asked as a VAE that holds none, naming what it holds. */
int ckpt__not_a_vae(const struct st_file *f, struct err *e);

#endif

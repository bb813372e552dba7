/*
 * Private to models/controlnet/: the Union ControlNet's parts (controlnet_union.c) that
 * the forward pass (controlnet.c) and the layout (controlnet_layout.c) call, and the
 * file checks and patcher building (controlnet_load.c) the T2I-Adapter's loader shares.
 *
 * Threads: the executor thread.
 */
#ifndef LATENTD_MODELS_CONTROLNET_IMPL_H
#define LATENTD_MODELS_CONTROLNET_IMPL_H

#include "checkpoint_impl.h"
#include "controlnet.h"
#include "model_layout_impl.h"
#include "nn.h"

/* A file's tensors checked against a layout walk (controlnet__check_key as its fn): each
 * expected key present with its shape and a float dtype, listed in items. */
struct controlnet__check {
    const struct st_file *f;
    struct ntable *nt;          /* the file's names, mapped to the layout's */
    struct ckpt__items items;   /* owned (xfree items.v) */
    const char *what;           /* "ControlNet", "T2I-Adapter": for messages */
    struct err *e;
    int rc;                     /* the first failure */
};
void controlnet__check_key(void *user, const struct model_key *k);
/* ERR_INVALID naming the first file tensor the walk did not expect (`layout` names it). */
int controlnet__check_unused(const struct controlnet__check *c, const char *layout);

/* The patcher of the checked items (one layer per layout layer), stored as dt, named
 * `name` ("controlnet": the UNet's role) with the file kept open (and *f taken, NULL
 * after) for its mmap; base: a diff ControlNet's UNet (its weights added), or NULL. */
int controlnet__patcher_new(struct st_file **f, const struct ckpt__items *items,
                            struct patcher_model *base, enum tensor_dtype dt, const char *name,
                            struct patcher **out, struct err *e);

/* cldm.py's fixed sizes: the type embedding's width per type and the layer's heads. */
#define CONTROLNET_UNION_EMBED_DIM 256
#define CONTROLNET_UNION_HEADS 8

/* The Union's tensors (control_add_embedding, task_embedding, transformer_layes.0,
 * spatial_ch_projs) for a trunk of width model_ch and time embedding 4 model_ch. */
void controlnet__union_keys(struct key_walk *w, int model_ch, int union_types);

/* Whether control_type fits the model; ERR_INVALID with ComfyUI's message if not. */
int controlnet__union_check_type(const struct controlnet *cn, int control_type, struct err *e);

/* temb [B, TE] += control_add_embedding(one-hot of control_type, or zeros for -1). */
int controlnet__union_add_embedding(struct nn_w *w, struct dev *d, int union_types,
                                    int control_type, struct tensor *temb, struct err *e);

/* g [B, C, h, w], the encoded hint, becomes union_controlnet_merge's guided hint for
 * control_type (>= 0). */
int controlnet__union_merge(struct nn_w *w, struct dev *d, int control_type, struct tensor *g,
                            struct err *e);

/* f32 buffers a model's weights point into, freed with the model (patcher_model_keep). */
struct controlnet__owned;
struct controlnet__owned *controlnet__owned_new(struct patcher_model *m);
void controlnet__owned_add(struct controlnet__owned *o, float *buf); /* takes buf */

#endif

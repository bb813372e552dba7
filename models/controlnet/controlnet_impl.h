/*
 * Private to models/controlnet/: the Union ControlNet's parts (controlnet_union.c) that
 * the forward pass (controlnet.c) and the layout (controlnet_layout.c) call.
 *
 * Threads: the executor thread.
 */
#ifndef LATENTD_MODELS_CONTROLNET_IMPL_H
#define LATENTD_MODELS_CONTROLNET_IMPL_H

#include "controlnet.h"
#include "model_layout_impl.h"
#include "nn.h"

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

#endif

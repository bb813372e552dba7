/*
 * gligen — ComfyUI's GLIGEN text-box grounding model (comfy/gligen.py, loaded as its
 * load_gligen does) for SD1.x UNets: a position net that turns up to GLIGEN_MAX_OBJS
 * (text embedding, box) pairs into object tokens, and one gated self-attention module
 * ("fuser") per SpatialTransformer of the UNet that mixes those tokens into the image
 * tokens after each transformer block's self-attention (the UNet's middle patch,
 * unet.h's unet_patches.middle).
 *
 *   position net  the boxes (x1, y1, x2, y2 as fractions of the latent) through a
 *                 Fourier embedding (8 frequencies 100^(k/8), sin and cos of each
 *                 coordinate: 64 numbers), next to the box's pooled text embedding;
 *                 unused slots take the learnt null features instead; then Linear(in +
 *                 64, 512), SiLU, Linear(512, 512), SiLU, Linear(512, key_dim).
 *   fuser k       on the image tokens x [B, T, C] of the k-th SpatialTransformer (walk
 *                 order; every transformer block of it): objs = linear(tokens);
 *                 x += tanh(alpha_attn) attn(norm1(cat(x, objs)))[:, :T];
 *                 x += tanh(alpha_dense) ff(norm2(x)); attention with 8 heads when
 *                 key_dim is 768 (SD1.x), else 64-wide heads; ff a GEGLU of 4C.
 *
 * Files: ComfyUI's layout, the pruned GLIGEN files (gligen_sd14_textbox_pruned):
 * position_net.{null_positive_feature, null_position_feature, linears.{0,2,4}.*} and
 * per module <...>{input_blocks,middle_block,output_blocks}.N.<...>.fuser.<name>,
 * grouped by block as load_gligen does (the modules are the groups in block order).
 * Every tensor is required (ComfyUI would leave a missing one at its random
 * initialisation): a file without the position net, a checkpoint, a ControlNet or a
 * LoRA is refused naming what it is.
 *
 * Weights: one patcher layer for the position net, one per module, keyed
 * "position_net.*" and "fuser.<k>.*"; the alpha gates (0-d tensors) are read at load.
 *
 * Threads: loading and evaluation on the executor thread; gligen_ref/unref any thread.
 */
#ifndef LATENTD_MODELS_GLIGEN_H
#define LATENTD_MODELS_GLIGEN_H

#include <stdatomic.h>
#include <stddef.h>

#include "err.h"
#include "model_config.h"
#include "patcher.h"
#include "tensor.h"
#include "unet_arch.h"

#define GLIGEN_MAX_OBJS 30   /* Gligen.max_objs: object token slots */
#define GLIGEN_FREQS 8       /* PositionNet's fourier_freqs */
#define GLIGEN_POS_DIM (GLIGEN_FREQS * 2 * 4) /* sin and cos of x1, y1, x2, y2: 64 */
#define GLIGEN_HIDDEN 512    /* PositionNet's linears' width */
#define GLIGEN_MAX_MODULES 64

/* One fuser: where load_gligen found it and its widths. */
struct gligen_module {
    char block[32];   /* "input_blocks.1", "middle_block.1": the group it came from */
    int query_dim;    /* C: the width of the transformer it runs in */
    int heads;        /* attention heads (C / heads wide each) */
    float gate_attn;  /* tanh(alpha_attn) */
    float gate_dense; /* tanh(alpha_dense) */
};

/* The architecture: what gligen_layout emits and the loader finds. */
struct gligen_arch {
    int in_dim;  /* the text embedding width the position net takes (CLIP-L pooled: 768) */
    int key_dim; /* object token width: position net output, fuser.linear input (768) */
    int n_modules;
    struct gligen_module m[GLIGEN_MAX_MODULES];
};

struct gligen {
    struct patcher *p; /* owned reference: the weights */
    struct gligen_arch a;
    atomic_int _refs;
};

/*
 * Load a GLIGEN file, weights stored as dt. Errors (ERR_INVALID / ERR_UNSUPPORTED, the
 * message naming the file): no position net (a checkpoint, ControlNet, LoRA ... named
 * as such), no fuser module, a missing, unexpected, misshapen, non-float or non-finite
 * tensor, modules of different key widths, a head split ComfyUI cannot make. *out has
 * one reference.
 */
int gligen_load(const char *path, enum tensor_dtype dt, struct gligen **out, struct err *e);

void gligen_ref(struct gligen *g);
void gligen_unref(struct gligen *g); /* NULL is a no-op */

/*
 * The GLIGEN arch for UNet `u`: a module per SpatialTransformer (named as the SD1.4
 * GLIGEN files name them, heads by ComfyUI's rule), text width in_dim, object tokens
 * key_dim wide. For the generator and tests (gates left 0).
 */
void gligen_arch_for_unet(const struct unet_arch *u, int in_dim, int key_dim,
                          struct gligen_arch *out);

/*
 * Every tensor of a GLIGEN file of arch `a` in file naming, the position net first, then
 * the modules (name prefix m.block + ".1.transformer_blocks.0.fuser." for input and
 * output blocks, ".transformer_blocks.0.fuser." after middle_block.1), each with the
 * patcher layer it loads into; the two gates are 0-d (ndim 0). For the generator.
 */
size_t gligen_layout(const struct gligen_arch *a,
                     void (*fn)(void *user, const struct model_key *k), void *user);

/*
 * Whether g fits UNet `u`: a module per SpatialTransformer, each as wide as it, and the
 * text embeddings it will be given in_dim wide (pooled_dim; 0: not checked).
 * ERR_INVALID with a message naming both if not.
 */
int gligen_fits(const struct gligen *g, const struct unet_arch *u, int pooled_dim,
                struct err *e);

/* One text box of GLIGENTextBoxApply, in latent units (pixels / 8, floored). */
struct gligen_box {
    const float *pooled; /* [in_dim], borrowed */
    int h, w, y, x;
};

/*
 * The position net's object tokens for `boxes` (n <= GLIGEN_MAX_OBJS) over a latent of
 * lat_h x lat_w (the x the UNet gets: an area's crop size), as Gligen.set_position:
 * objs [B, GLIGEN_MAX_OBJS, key_dim] on patcher_device(g->p) (every sample the same).
 * The model must be loaded (mm_load_models).
 */
int gligen_objs(struct gligen *g, const struct gligen_box *boxes, int n, int lat_h, int lat_w,
                struct tensor *objs, struct err *e);

/*
 * Fuser `k` on the image tokens x [B, T, C] in place (the middle patch of the k-th
 * SpatialTransformer), objs from gligen_objs.
 */
int gligen_fuse(struct gligen *g, int k, const struct tensor *objs, struct tensor *x,
                struct err *e);

/* The host side of gligen_objs (exposed for tests): the position net's input rows
 * [GLIGEN_MAX_OBJS, in_dim + GLIGEN_POS_DIM], the null features in unused slots. */
int gligen_objs_input(const struct gligen *g, const struct gligen_box *boxes, int n,
                      int lat_h, int lat_w, float *rows, struct err *e);

/* Activation bytes of one UNet call's GLIGEN work at these shapes (b samples, the
 * largest transformer's T tokens of width C), beside the UNet's own plan. */
size_t gligen_plan_bytes(const struct gligen *g, int b, int tokens, int width);

#endif

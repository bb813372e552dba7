/*
 * ref_unet64 — a float64 reference of the tiny SD1.5 UNet (input, middle and output
 * blocks), the classic and Union ControlNets over its trunk, FreeU's output-block patch
 * and ControlNet / T2I-Adapter residual injection, for the ControlNet tests. Written
 * apart from models/: naive loops in double precision over the weights as stored in
 * the file (ref_file, names ref_prefix + the UNet-relative name). Batch 1. The input x
 * may have any channel count (conv_in reads x->c): an inpainting or instruct-pix2pix
 * UNet's 9 or 8, the model input then its c_concat (test_sd_concat).
 *
 * State is global (set it before a call): one test thread.
 */
#ifndef LATENTD_TESTS_REF_UNET64_H
#define LATENTD_TESTS_REF_UNET64_H

#include "safetensors.h"
#include "unet.h"
#include "unet_freeu.h"

/* One sample's activation [c, h, w] (or tokens [h = n, w = 1, c] for the transformer). */
struct act {
    double *v; /* owned (ref_act_free) */
    int c, h, w;
};

struct act ref_act_new(int c, int h, int w); /* zeros */
void ref_act_free(struct act *a);

extern const struct st_file *ref_file; /* the weights' file */
extern const char *ref_prefix;         /* "control_model.", "model.diffusion_model." ... */
/* When set, ref_w asks it first (ref_prefix + name; a malloc'd array or NULL). */
extern double *(*ref_w_hook)(const char *name);
extern const double *ref_ctx;          /* context [ref_tokens, ref_ctx_dim] */
extern int ref_tokens, ref_ctx_dim, ref_heads;
extern const struct unet_freeu *ref_freeu; /* FreeU's patch in ref_unet, or NULL */
/* ref_unet: a residual per input block added to its output (T2I-Adapter features;
 * .v NULL: none), or NULL. */
extern const struct act *ref_input;
/*
 * Self-attention patches (NULL: none). ref_attn1_tiles(block "input_blocks.1.1", transformer
 * index, tokens, ...) returns 1 with HyperTile's tiling of that attention (queries in the
 * rows x cols grid's tile t attend over keys [t·L, (t+1)·L), L = tokens/(nh·nw)), 0 for
 * none. ref_attn1_colsum gets SelfAttentionGuidance's map of middle_block.1's first
 * attn1: per key, the mean over heads of the softmax summed over queries.
 */
extern int (*ref_attn1_tiles)(const char *block, int depth, int tokens, int *nh, int *nw,
                              int *rows, int *cols);
extern double *ref_attn1_colsum;
/* ref_controlnet: a Union of ref_union_types types (0: classic), type ref_union_type
 * (-1: none). */
extern int ref_union_types, ref_union_type;

/* ref_unet: GLIGEN's middle patch (models/gligen), called in every transformer block after
 * the self-attention's residual on its tokens h [n, c] with the index of its
 * SpatialTransformer in walk order (ComfyUI's transformer_index); NULL: none. */
extern void (*ref_middle_patch)(double *h, int n, int c, int st);

/* ref_prefix + name as doubles (caller frees); PANIC when missing. */
double *ref_w(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
double ref_silu(double x);
/* conv2d k x k, stride s, padding k/2, weights name.weight [co, ci, k, k] + bias. */
struct act ref_conv(const struct act *x, const char *name, int co, int k, int s);
/* out[n, o] = in[n, i] W[o, i]^T (+ bias); caller frees. */
double *ref_linear(const double *in, int n, int ci, int co, const char *name, int bias);
void ref_layer_norm(const double *x, int n, int c, const char *name, double *out);
/* h[n, c] += p.to_out(softmax(q k^T / sqrt(d)) v) over `heads`: q = p.to_q(xn [n, c]),
 * k, v = p.to_k, p.to_v(src [s, cs]) (no bias but to_out's). */
void ref_attention(double *h, const double *xn, int n, int c, const double *src, int s, int cs,
                   const char *p, int heads);

/* The ControlNet's residuals (times strength): out[0..ns) and out[ns] the middle's;
 * returns ns. */
int ref_controlnet(const struct unet_arch *a, const struct act *x, double t,
                   const struct act *hint, double strength, struct act *out);

/* eps of the tiny SD1.5 UNet with residuals res[0..ns) (skips) and res[ns] (middle)
 * (res NULL, or an entry with .v NULL: none), ref_input into the input blocks. */
struct act ref_unet(const struct unet_arch *a, const struct act *x, double t,
                    const struct act *res);

#endif

/*
 * text_encoder — the CLIP-style text transformer (sd15.md §2.10-2.13) on tensor/ ops,
 * reading every weight through the patcher; one encoder layer is one patcher layer.
 *
 * Threads: executor thread only (text_plan_bytes: any thread).
 */
#ifndef LATENTD_MODELS_TEXT_ENCODER_H
#define LATENTD_MODELS_TEXT_ENCODER_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "model_config.h"
#include "patcher.h"
#include "tensor.h"
#include "clip_tokenizer.h"
#include "text_arch.h"

/* How a conditioning builder wants the encoder's output (sd15.md §2.11, sdxl.md §4.2). */
struct text_encode_opts {
    int layer;       /* CLIPSetLastLayer: -1 (or 0) = last, -2 = penultimate, ...; below
                      * -layers falls back to last */
    int norm_hidden; /* the selected layer goes through final_layer_norm: SD1.x 1, SDXL 0
                      * (out of range or 0 -> last, always normalized) */
    int pad_zero;    /* pad with id 0 after the first end token, not with the end token
                      * (OpenCLIP bigG, sdxl.md §4.1); the empty sequence likewise */
};

/*
 * Encode a tokenized prompt (clip_tokenize_prompt) with the encoder whose weights are
 * `prefix` + internal names in `clip`. Emphasis is applied to the output (§2.12).
 * Outputs are new host arrays (caller frees with xfree): *cond [tk->n_chunks * 77 *
 * width] (= [1, 77n, width]), *pooled (may be NULL: not computed) [proj_dim or width]:
 * chunk 0's final-LN last-layer output at its first end token (§2.13), projected when
 * the arch has a text_projection. `probe` (NULL in production) gets embeddings,
 * layer.0, last and selected.
 */
int text_encode(struct patcher *clip, const struct text_arch *a, const char *prefix,
                const struct clip_tokens *tk, const struct text_encode_opts *opts, float **cond,
                float **pooled, struct model_probe *probe, struct err *e);

/* Activation bytes the encode needs on the device for n_seq sequences (plan input). */
size_t text_plan_bytes(const struct text_arch *a, int n_seq);

#endif

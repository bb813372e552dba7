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

/* ---- CLIP ------------------------------------------------------------------------------ */

/*
 * Encode a tokenized prompt (clip_tokenize_prompt). clip_skip: -1 (or 0) = last layer,
 * -2 = penultimate, ... (CLIPSetLastLayer; below -layers falls back to last, §2.11).
 * Emphasis is applied to the output (§2.12). Outputs are new host arrays (caller frees
 * with xfree): *cond [tk->n_chunks * 77 * width] (= [1, 77n, width]), *pooled [width]
 * (chunk 0's final-LN output at its first end token, §2.13). *width_out may be NULL.
 */
int text_encode(struct patcher *clip, const struct model_config *cfg,
                     const struct clip_tokens *tk, int clip_skip, float **cond, float **pooled,
                     struct model_probe *probe, struct err *e);

/* Activation bytes the encode needs on the device for n_seq sequences (plan input). */
size_t text_plan_bytes(const struct model_config *cfg, int n_seq);

#endif

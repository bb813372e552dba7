/*
 * text_arch — a CLIP-style text transformer described by its knobs: Hugging Face
 * CLIP-L (SD1.x, SDXL's first encoder) and OpenCLIP ViT-bigG/H (SDXL, SD2) are one
 * implementation (text_encoder.c) with different values here (sd15.md §2.9-2.13,
 * sdxl.md §1.3, §4).
 *
 * Weights are named the Hugging Face way inside latentd (encoder.layers.N.self_attn.
 * q_proj, ...); a file in OpenCLIP naming is mapped at load (text_name_from_file),
 * its fused attention input projection kept whole (self_attn.in_proj, q, k, v rows).
 *
 * Pure functions; any thread.
 */
#ifndef LATENTD_MODELS_TEXT_ARCH_H
#define LATENTD_MODELS_TEXT_ARCH_H

#include <stddef.h>

enum text_act {
    TEXT_ACT_QUICK_GELU = 0, /* x * sigmoid(1.702 x): OpenAI CLIP-L */
    TEXT_ACT_GELU = 1,       /* exact erf GELU: OpenCLIP bigG / H */
};

enum text_naming {
    TEXT_NAMING_HF = 0,       /* embeddings.token_embedding.weight, encoder.layers.N... */
    TEXT_NAMING_OPENCLIP = 1, /* token_embedding.weight, transformer.resblocks.N... */
};

struct text_arch {
    int width;    /* hidden width: 768 (CLIP-L), 1280 (bigG) */
    int layers;   /* 12 / 32 */
    int mlp;      /* 3072 / 5120 */
    int heads;    /* 12 / 20 (head width 64; not stored in files) */
    int vocab;    /* 49408 */
    int pos;      /* 77 */
    int act;      /* enum text_act */
    int naming;   /* enum text_naming: the names in the file */
    int proj_dim; /* text_projection output width (bigG 1280); 0 = none. OpenCLIP naming
                   * stores P [width, proj_dim] as "text_projection"; Hugging Face naming
                   * (a standalone bigG / ViT-H file) its Linear "text_projection.weight"
                   * [proj_dim, width] = P^T */
};

/*
 * A file tensor name (without the component prefix) in `naming` -> the internal
 * (Hugging Face) name in out. Returns 1 when renamed, 0 when the name is kept, -1
 * when it is a tensor the encoder does not use (OpenCLIP's logit_scale).
 */
int text_name_from_file(int naming, const char *file, char *out, size_t size);

/* The inverse, for writers (tools/ckpt_gen): internal -> file name in `naming`. */
void text_name_to_file(int naming, const char *internal, char *out, size_t size);

#endif

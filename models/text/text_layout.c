/*
 * The text encoder's tensors (sd15.md §2.9; sdxl.md §1.3 for OpenCLIP) and the
 * OpenCLIP <-> internal name mapping.
 */
#include "text_arch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_layout_impl.h"

void text__walk(struct key_walk *w, const struct text_arch *a)
{
    int64_t d = a->width, m = a->mlp;
    int fused = a->naming == TEXT_NAMING_OPENCLIP;
    char n[128];
    key__layer(w, "embeddings");
    key__emit(w, MODEL_INIT_EMBED, KEY_SHAPE(a->vocab, d), "embeddings.token_embedding.weight");
    key__emit(w, MODEL_INIT_EMBED, KEY_SHAPE(a->pos, d), "embeddings.position_embedding.weight");
    static const char *const proj[] = {"q_proj", "k_proj", "v_proj", "out_proj"};
    for (int l = 0; l < a->layers; l++) {
        key__layer(w, "encoder.layers.%d", l);
        if (fused) { /* OpenCLIP keeps q, k, v as one [3d, d] projection */
            key__name(n, sizeof(n), "encoder.layers.%d.self_attn.in_proj", l);
            key__wb(w, n, KEY_SHAPE(3 * d, d));
        }
        for (int p = fused ? 3 : 0; p < 4; p++) {
            key__name(n, sizeof(n), "encoder.layers.%d.self_attn.%s", l, proj[p]);
            key__wb(w, n, KEY_SHAPE(d, d));
        }
        key__name(n, sizeof(n), "encoder.layers.%d.layer_norm1", l);
        key__norm(w, n, d);
        key__name(n, sizeof(n), "encoder.layers.%d.mlp.fc1", l);
        key__wb(w, n, KEY_SHAPE(m, d));
        key__name(n, sizeof(n), "encoder.layers.%d.mlp.fc2", l);
        key__wb(w, n, KEY_SHAPE(d, m));
        key__name(n, sizeof(n), "encoder.layers.%d.layer_norm2", l);
        key__norm(w, n, d);
    }
    key__layer(w, "final_layer_norm");
    key__norm(w, "final_layer_norm", d);
    if (a->proj_dim > 0 && a->naming == TEXT_NAMING_OPENCLIP) /* P, as pooled . P (sdxl.md §1.3) */
        key__emit(w, MODEL_INIT_WEIGHT, KEY_SHAPE(d, a->proj_dim), "text_projection");
    else if (a->proj_dim > 0) /* Hugging Face's Linear: its weight is P transposed */
        key__emit(w, MODEL_INIT_WEIGHT, KEY_SHAPE(a->proj_dim, d), "text_projection.weight");
}

/* OpenCLIP names: whole-name renames, then per-resblock tails. */
static const char *const oc_top[][2] = {
    {"token_embedding.weight", "embeddings.token_embedding.weight"},
    {"positional_embedding", "embeddings.position_embedding.weight"},
    {"ln_final.weight", "final_layer_norm.weight"},
    {"ln_final.bias", "final_layer_norm.bias"},
    {"text_projection", "text_projection"},
};
static const char *const oc_block[][2] = {
    {"ln_1.", "layer_norm1."},
    {"attn.in_proj_weight", "self_attn.in_proj.weight"},
    {"attn.in_proj_bias", "self_attn.in_proj.bias"},
    {"attn.out_proj.", "self_attn.out_proj."},
    {"ln_2.", "layer_norm2."},
    {"mlp.c_fc.", "mlp.fc1."},
    {"mlp.c_proj.", "mlp.fc2."},
};
#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* Map `in` through table column `from` -> `to`; rest of the name after a prefix match
 * is kept. Returns 1 on a match. */
static int map_tail(const char *const (*t)[2], size_t n, int from, const char *in, char *out,
                    size_t size, const char *head)
{
    for (size_t i = 0; i < n; i++) {
        size_t k = strlen(t[i][from]);
        int prefix = t[i][from][k - 1] == '.';
        if (prefix ? strncmp(in, t[i][from], k) == 0 : strcmp(in, t[i][from]) == 0) {
            snprintf(out, size, "%s%s%s", head, t[i][1 - from], prefix ? in + k : "");
            return 1;
        }
    }
    return 0;
}

int text_name_from_file(int naming, const char *file, char *out, size_t size)
{
    if (naming != TEXT_NAMING_OPENCLIP)
        return 0;
    if (strcmp(file, "logit_scale") == 0)
        return -1; /* CLIP's training temperature: never used (sdxl.md §1.1) */
    const char *rb = "transformer.resblocks.";
    if (strncmp(file, rb, strlen(rb)) == 0) {
        char *end;
        long l = strtol(file + strlen(rb), &end, 10);
        char head[48];
        snprintf(head, sizeof(head), "encoder.layers.%ld.", l);
        return *end == '.' && map_tail(oc_block, N_OF(oc_block), 0, end + 1, out, size, head);
    }
    return map_tail(oc_top, N_OF(oc_top), 0, file, out, size, "");
}

void text_name_to_file(int naming, const char *internal, char *out, size_t size)
{
    const char *el = "encoder.layers.";
    snprintf(out, size, "%s", internal);
    if (naming != TEXT_NAMING_OPENCLIP)
        return;
    if (strncmp(internal, el, strlen(el)) == 0) {
        char *end;
        long l = strtol(internal + strlen(el), &end, 10);
        char head[48];
        snprintf(head, sizeof(head), "transformer.resblocks.%ld.", l);
        if (*end == '.')
            map_tail(oc_block, N_OF(oc_block), 1, end + 1, out, size, head);
        return;
    }
    map_tail(oc_top, N_OF(oc_top), 1, internal, out, size, "");
}

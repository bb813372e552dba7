/*
 * Standalone VAE files (model_vae_load in checkpoint.h): their tensor names mapped
 * onto the checkpoint's first_stage_model.* layout, so that detection, validation
 * and loading are the checkpoint's own (checkpoint.c, checkpoint_load.c).
 *
 * The diffusers <-> LDM correspondence is the one ComfyUI's diffusers_convert.py
 * uses: encoder down_blocks.i == down.i, decoder up_blocks.i == up.(3 - i) (the SD
 * VAE always has 4 levels, vae_arch.h), resnets.j == block.j, mid_block.resnets.j
 * == mid.block_(j + 1), conv_shortcut == nin_shortcut, conv_norm_out == norm_out,
 * and the mid attention's group_norm / to_q|query / to_k|key / to_v|value /
 * to_out.0|proj_attn == norm / q / k / v / proj_out (stored 2-D as linears, which
 * the shape check accepts for 1x1 convs).
 */
#include <stdio.h>
#include <string.h>

#include "checkpoint.h"
#include "checkpoint_impl.h"

static int starts_with(const char *s, const char *p)
{
    return strncmp(s, p, strlen(p)) == 0;
}

/* Mid attention tails, diffusers first (two generations of names), LDM last. */
static const char *const attn_map[][3] = {
    {"group_norm.", "group_norm.", "norm."},
    {"to_q.", "query.", "q."},
    {"to_k.", "key.", "k."},
    {"to_v.", "value.", "v."},
    {"to_out.0.", "proj_attn.", "proj_out."},
};

/* `r` is the part after "encoder." / "decoder."; writes the LDM part. 1 if mapped. */
static int from_diffusers(int decoder, const char *r, char *out, size_t size)
{
    int i = -1, j = -1, n = -1;
    const char *tail;
    if (sscanf(r, decoder ? "up_blocks.%d.resnets.%d.%n" : "down_blocks.%d.resnets.%d.%n", &i,
               &j, &n) == 2 && n > 0) {
        if (i < 0 || i > 3 || j < 0 || j > 9)
            return 0;
        tail = r + n;
        int sc = starts_with(tail, "conv_shortcut.");
        snprintf(out, size, "%s.%d.block.%d.%s%s", decoder ? "up" : "down", decoder ? 3 - i : i,
                 j, sc ? "nin_shortcut." : "", sc ? tail + strlen("conv_shortcut.") : tail);
        return 1;
    }
    n = -1;
    if (sscanf(r, decoder ? "up_blocks.%d.upsamplers.0.%n" : "down_blocks.%d.downsamplers.0.%n",
               &i, &n) == 1 && n > 0) {
        if (i < 0 || i > 3)
            return 0;
        snprintf(out, size, "%s.%d.%s.%s", decoder ? "up" : "down", decoder ? 3 - i : i,
                 decoder ? "upsample" : "downsample", r + n);
        return 1;
    }
    n = -1;
    if (sscanf(r, "mid_block.resnets.%d.%n", &j, &n) == 1 && n > 0) {
        if (j < 0 || j > 1)
            return 0;
        snprintf(out, size, "mid.block_%d.%s", j + 1, r + n);
        return 1;
    }
    if (starts_with(r, "mid_block.attentions.0.")) {
        tail = r + strlen("mid_block.attentions.0.");
        for (size_t k = 0; k < sizeof(attn_map) / sizeof(attn_map[0]); k++)
            for (int v = 0; v < 2; v++)
                if (starts_with(tail, attn_map[k][v])) {
                    snprintf(out, size, "mid.attn_1.%s%s", attn_map[k][2],
                             tail + strlen(attn_map[k][v]));
                    return 1;
                }
        return 0;
    }
    if (starts_with(r, "conv_norm_out.")) {
        snprintf(out, size, "norm_out.%s", r + strlen("conv_norm_out."));
        return 1;
    }
    return 0;
}

int ckpt__vae_file_name(const char *name, char *out, size_t size)
{
    int decoder = starts_with(name, "decoder.");
    if (decoder || starts_with(name, "encoder.")) {
        char rel[400];
        const char *r = name + strlen("encoder."); /* same length as "decoder." */
        if (from_diffusers(decoder, r, rel, sizeof(rel)))
            snprintf(out, size, "%s%s.%s", MODEL_PREFIX_VAE, decoder ? "decoder" : "encoder", rel);
        else /* LDM already, or an unknown name the layout check will name */
            snprintf(out, size, "%s%s", MODEL_PREFIX_VAE, name);
        return 1;
    }
    if (starts_with(name, "quant_conv.") || starts_with(name, "post_quant_conv.")) {
        snprintf(out, size, "%s%s", MODEL_PREFIX_VAE, name);
        return 1;
    }
    return 0;
}

int ckpt__not_a_vae(const struct st_file *f, struct err *e)
{
    const char *what = "no VAE tensors";
    for (size_t i = 0; i < f->n_tensors; i++) {
        const char *nm = f->tensors[i].name;
        if (starts_with(nm, "lora_") || strstr(nm, ".lora_up.") || strstr(nm, ".lora_down.") ||
            strstr(nm, "lora_A") || strstr(nm, "lora_B")) {
            what = "a LoRA";
            break;
        }
        if (starts_with(nm, "model.diffusion_model.") || starts_with(nm, "input_blocks.") ||
            starts_with(nm, "down_blocks.") || starts_with(nm, "diffusion_model.")) {
            what = "a UNet without a VAE";
            break;
        }
        if (starts_with(nm, "cond_stage_model.") || starts_with(nm, "text_model.")) {
            what = "a text encoder without a VAE";
            break;
        }
    }
    return err_set(e, ERR_INVALID,
                   "'%s' is not a VAE: it holds %s (%zu tensors%s%s%s); expected encoder.* and "
                   "decoder.* tensors, optionally under %s",
                   f->path, what, f->n_tensors, f->n_tensors ? ", first '" : "",
                   f->n_tensors ? f->tensors[0].name : "", f->n_tensors ? "'" : "",
                   MODEL_PREFIX_VAE);
}

int model_vae_load(const char *path, enum tensor_dtype dt, struct model_ckpt *ck, struct err *e)
{
    const enum tensor_dtype d3[MODEL_COMPONENT_COUNT] = {dt, dt, dt};
    return model_ckpt_load(path, MODEL_LOAD_VAE | MODEL_LOAD_VAE_FILE, d3, ck, e);
}

int vae_name_to_diffusers(const char *ldm, char *out, size_t size)
{
    int decoder = starts_with(ldm, "decoder.");
    if (!decoder && !starts_with(ldm, "encoder.")) {
        if (!starts_with(ldm, "quant_conv.") && !starts_with(ldm, "post_quant_conv."))
            return -1;
        snprintf(out, size, "%s", ldm);
        return 0;
    }
    const char *side = decoder ? "decoder" : "encoder";
    const char *r = ldm + strlen("encoder.");
    int i = -1, j = -1, n = -1;
    const char *tail;
    if (sscanf(r, decoder ? "up.%d.block.%d.%n" : "down.%d.block.%d.%n", &i, &j, &n) == 2 &&
        n > 0) {
        tail = r + n;
        int sc = starts_with(tail, "nin_shortcut.");
        snprintf(out, size, "%s.%s_blocks.%d.resnets.%d.%s%s", side, decoder ? "up" : "down",
                 decoder ? 3 - i : i, j, sc ? "conv_shortcut." : "",
                 sc ? tail + strlen("nin_shortcut.") : tail);
        return 0;
    }
    n = -1;
    if (sscanf(r, decoder ? "up.%d.upsample.%n" : "down.%d.downsample.%n", &i, &n) == 1 &&
        n > 0) {
        snprintf(out, size, "%s.%s_blocks.%d.%s.0.%s", side, decoder ? "up" : "down",
                 decoder ? 3 - i : i, decoder ? "upsamplers" : "downsamplers", r + n);
        return 0;
    }
    n = -1;
    if (sscanf(r, "mid.block_%d.%n", &j, &n) == 1 && n > 0) {
        snprintf(out, size, "%s.mid_block.resnets.%d.%s", side, j - 1, r + n);
        return 0;
    }
    if (starts_with(r, "mid.attn_1.")) {
        tail = r + strlen("mid.attn_1.");
        for (size_t k = 0; k < sizeof(attn_map) / sizeof(attn_map[0]); k++)
            if (starts_with(tail, attn_map[k][2])) {
                snprintf(out, size, "%s.mid_block.attentions.0.%s%s", side, attn_map[k][0],
                         tail + strlen(attn_map[k][2]));
                return 0;
            }
        return -1;
    }
    if (starts_with(r, "norm_out.")) {
        snprintf(out, size, "%s.conv_norm_out.%s", side, r + strlen("norm_out."));
        return 0;
    }
    snprintf(out, size, "%s", ldm);
    return 0;
}

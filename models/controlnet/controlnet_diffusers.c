/*
 * ControlNet names between the ldm layout (controlnet_layout) and diffusers'
 * ControlNetModel (comfy/controlnet.py's diffusers branch: comfy.utils.unet_to_diffusers
 * for the trunk, controlnet_down_blocks.N / controlnet_mid_block for the zero convs,
 * controlnet_cond_embedding.conv_in / blocks.K / conv_out for the hint encoder).
 *
 * One table of fixed names plus the block patterns below serves both directions. The
 * trunk patterns assume two ResBlocks per level (input_blocks.1 + 3 L + i), which every
 * family of family.h has, as diffusers' down_blocks do.
 */
#include <stdio.h>
#include <string.h>

#include "controlnet.h"
#include "unet_impl.h"

static const char *const fixed[][2] = {
    {"input_blocks.0.0", "conv_in"},
    {"time_embed.0", "time_embedding.linear_1"},
    {"time_embed.2", "time_embedding.linear_2"},
    {"label_emb.0.0", "add_embedding.linear_1"},
    {"label_emb.0.2", "add_embedding.linear_2"},
    {"middle_block_out.0", "controlnet_mid_block"},
    {"input_hint_block.0", "controlnet_cond_embedding.conv_in"},
    {"input_hint_block.14", "controlnet_cond_embedding.conv_out"},
    {"middle_block.1", "mid_block.attentions.0"},
};

/* name = module + ".weight" / ".bias" (or another last component). */
static const char *split_param(const char *name, char *module, size_t size)
{
    const char *dot = strrchr(name, '.');
    if (!dot || (size_t)(dot - name) >= size)
        return NULL;
    memcpy(module, name, (size_t)(dot - name));
    module[dot - name] = 0;
    return dot;
}

/* A ResBlock sub-module from one naming to the other (from = 0: ldm, 1: diffusers). */
static const char *res_module(const char *s, int from, const char **rest)
{
    for (int i = 0; i < UNET_RES_MODULES; i++) {
        const char *a = unet__res_diffusers[i][from];
        size_t l = strlen(a);
        if (strncmp(s, a, l) == 0 && (s[l] == 0 || s[l] == '.')) {
            *rest = s + l;
            return unet__res_diffusers[i][!from];
        }
    }
    return NULL;
}

/* A module path, ldm -> diffusers; 0, or -1 when it is no ControlNet module. */
static int to_diffusers(const char *m, char *out, size_t size)
{
    int n, sub, len, k;
    const char *rest, *r;
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
        if (strcmp(m, fixed[i][0]) == 0)
            return snprintf(out, size, "%s", fixed[i][1]), 0;
    len = 0;
    if (sscanf(m, "middle_block.1.%n", &len) == 0 && len > 0)
        return snprintf(out, size, "mid_block.attentions.0.%s", m + len), 0;
    if (sscanf(m, "zero_convs.%d.0%n", &n, &len) == 1 && m[len] == 0)
        return snprintf(out, size, "controlnet_down_blocks.%d", n), 0;
    if (sscanf(m, "input_hint_block.%d%n", &k, &len) == 1 && m[len] == 0 && k % 2 == 0 && k > 0)
        return snprintf(out, size, "controlnet_cond_embedding.blocks.%d", k / 2 - 1), 0;
    if (sscanf(m, "middle_block.%d.%n", &sub, &len) == 1 && (sub == 0 || sub == 2) &&
        (r = res_module(m + len, 0, &rest)))
        return snprintf(out, size, "mid_block.resnets.%d.%s%s", sub / 2, r, rest), 0;
    if (sscanf(m, "input_blocks.%d.%d.%n", &n, &sub, &len) == 2 && n >= 1) {
        int lvl = (n - 1) / 3, i = (n - 1) % 3;
        const char *s = m + len;
        if (i == 2)
            return strcmp(s, "op") == 0
                       ? (snprintf(out, size, "down_blocks.%d.downsamplers.0.conv", lvl), 0)
                       : -1;
        if (sub == 1)
            return snprintf(out, size, "down_blocks.%d.attentions.%d.%s", lvl, i, s), 0;
        if ((r = res_module(s, 0, &rest)))
            return snprintf(out, size, "down_blocks.%d.resnets.%d.%s%s", lvl, i, r, rest), 0;
    }
    return -1;
}

/* A module path, diffusers -> ldm; 0, or -1 when it is no ControlNet module. */
static int from_diffusers(const char *m, char *out, size_t size)
{
    int l, i, len;
    const char *rest, *r;
    for (size_t k = 0; k < sizeof(fixed) / sizeof(fixed[0]); k++)
        if (strcmp(m, fixed[k][1]) == 0)
            return snprintf(out, size, "%s", fixed[k][0]), 0;
    len = 0;
    if (sscanf(m, "mid_block.attentions.0.%n", &len) == 0 && len > 0)
        return snprintf(out, size, "middle_block.1.%s", m + len), 0;
    if (sscanf(m, "controlnet_down_blocks.%d%n", &i, &len) == 1 && m[len] == 0)
        return snprintf(out, size, "zero_convs.%d.0", i), 0;
    if (sscanf(m, "controlnet_cond_embedding.blocks.%d%n", &i, &len) == 1 && m[len] == 0)
        return snprintf(out, size, "input_hint_block.%d", 2 * i + 2), 0;
    if (sscanf(m, "mid_block.resnets.%d.%n", &i, &len) == 1 && (r = res_module(m + len, 1, &rest)))
        return snprintf(out, size, "middle_block.%d.%s%s", 2 * i, r, rest), 0;
    if (sscanf(m, "down_blocks.%d.downsamplers.0.conv%n", &l, &len) == 1 && m[len] == 0)
        return snprintf(out, size, "input_blocks.%d.0.op", 3 * l + 3), 0;
    if (sscanf(m, "down_blocks.%d.attentions.%d.%n", &l, &i, &len) == 2)
        return snprintf(out, size, "input_blocks.%d.1.%s", 1 + 3 * l + i, m + len), 0;
    if (sscanf(m, "down_blocks.%d.resnets.%d.%n", &l, &i, &len) == 2 &&
        (r = res_module(m + len, 1, &rest)))
        return snprintf(out, size, "input_blocks.%d.0.%s%s", 1 + 3 * l + i, r, rest), 0;
    return -1;
}

static int map_name(const char *name, int (*fn)(const char *, char *, size_t), char *out,
                    size_t size)
{
    char module[256], mapped[256];
    const char *param = split_param(name, module, sizeof(module));
    if (!param || fn(module, mapped, sizeof(mapped)) < 0)
        return -1;
    return snprintf(out, size, "%s%s", mapped, param) < (int)size ? 0 : -1;
}

/*
 * A Union's attention projection: diffusers files keep nn.MultiheadAttention's
 * in_proj_weight / in_proj_bias, ComfyUI renames them to in_proj.weight / .bias (the
 * Linear its OptimizedAttention has). The Union's other names are the same in both.
 */
#define UNION_IN_PROJ_DIFFUSERS ".attn.in_proj_"
#define UNION_IN_PROJ_LDM ".attn.in_proj."

static int union_name(const char *name, const char *from, const char *to, char *out,
                      size_t size)
{
    const char *p = strstr(name, from);
    if (!p || strncmp(name, "transformer_layes.", 18) != 0)
        return -1;
    return snprintf(out, size, "%.*s%s%s", (int)(p - name), name, to, p + strlen(from)) <
                   (int)size
               ? 0
               : -1;
}

int controlnet_name_to_diffusers(const char *ldm, char *out, size_t size)
{
    if (union_name(ldm, UNION_IN_PROJ_LDM, UNION_IN_PROJ_DIFFUSERS, out, size) == 0)
        return 0;
    return map_name(ldm, to_diffusers, out, size);
}

int controlnet__name_from_diffusers(const char *name, char *out, size_t size)
{
    if (union_name(name, UNION_IN_PROJ_DIFFUSERS, UNION_IN_PROJ_LDM, out, size) == 0)
        return 0;
    return map_name(name, from_diffusers, out, size);
}

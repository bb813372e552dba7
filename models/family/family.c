/*
 * The family table (see family.h). Order matters as in ComfyUI's
 * supported_models.models: the first match wins, so a more specific entry goes
 * before a more general one.
 */
#include "family.h"

#include <string.h>

static const struct model_family *const families[] = {
    &family_sd15,
    &family_sd2, /* after SD1.5 as in ComfyUI's list: told apart by context width or marker */
    &family_sdxl_refiner, /* before SDXL, as in ComfyUI's list (no overlap either way) */
    &family_sdxl,
};

#define N_FAMILIES (int)(sizeof(families) / sizeof(families[0]))

const struct model_family *model_family_get(int id)
{
    for (int i = 0; i < N_FAMILIES; i++)
        if (families[i]->id == id)
            return families[i];
    return NULL;
}

const struct model_family *model_family_detect(const struct unet_arch *u,
                                               int (*has_prefix)(void *user, const char *prefix),
                                               void *user)
{
    for (int i = 0; has_prefix && i < N_FAMILIES; i++)
        if (families[i]->marker && has_prefix(user, families[i]->marker) && families[i]->match(u))
            return families[i];
    for (int i = 0; i < N_FAMILIES; i++)
        if (families[i]->match(u))
            return families[i];
    return NULL;
}

int model_concat_channels(enum model_concat k)
{
    return k == MODEL_CONCAT_INPAINT ? 5 : k == MODEL_CONCAT_IP2P ? 4 : 0;
}

int model_family_concat(const struct model_family *f, int in_ch)
{
    /* in_ch decides, as ComfyUI's inpaint_model() (in_channels > 4) and the ip2p
     * entries' unet_config (in_channels 8) do; a kind the family lacks is refused. */
    for (int k = 0; k < MODEL_CONCAT_COUNT; k++)
        if (4 + model_concat_channels(k) == in_ch &&
            (k == MODEL_CONCAT_NONE || (f->concat_kinds & (1u << k))))
            return k;
    return -1;
}

int family_text_heads_w64(const struct text_arch *t)
{
    return t->width % 64 == 0 ? t->width / 64 : 1;
}

int family_unet_is_sd1x_structure(const struct unet_arch *u)
{
    if (u->levels != 4 || u->adm_in)
        return 0;
    for (int l = 0; l < 4; l++)
        if (u->res_blocks[l] != 2 || (l < 3) != (u->depth[l] > 0))
            return 0;
    return 1;
}

void family_unet_sd1x(struct unet_arch *u, int mc, const int mult[4], int ctx)
{
    *u = (struct unet_arch){
        .in_ch = 4,
        .out_ch = 4,
        .model_ch = mc,
        .levels = 4,
        .mult = {mult[0], mult[1], mult[2], mult[3]},
        .res_blocks = {2, 2, 2, 2},
        .depth = {1, 1, 1, 0},
        .depth_mid = 1,
        .heads = 8,
        .ctx_dim = ctx,
    };
}

int model_config_is_canonical(const struct model_config *c)
{
    const struct model_family *f = model_family_get(c->family);
    struct model_config k;
    if (!f)
        return 0;
    memset(&k, 0, sizeof(k));
    f->canonical(&k);
    k.prediction = c->prediction; /* the family's either way (768-v is canonical SD2) */
    k.unet.in_ch = c->unet.in_ch;  /* an inpainting or ip2p file is the family's model too */
    k.zsnr = c->zsnr;
    return memcmp(c, &k, sizeof(k)) == 0;
}

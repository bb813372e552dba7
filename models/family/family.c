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

int model_config_is_canonical(const struct model_config *c)
{
    const struct model_family *f = model_family_get(c->family);
    struct model_config k;
    if (!f)
        return 0;
    memset(&k, 0, sizeof(k));
    f->canonical(&k);
    k.prediction = c->prediction; /* the family's either way (768-v is canonical SD2) */
    k.zsnr = c->zsnr;
    return memcmp(c, &k, sizeof(k)) == 0;
}

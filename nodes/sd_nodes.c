/*
 * sd_nodes — registration of the SD1.5 node family (see sd_nodes.h).
 */
#include "sd_nodes.h"

static const struct node_class *const sd_classes[] = {
    &sd_ksampler,          &sd_empty_latent_image,   &sd_latent_upscale,
    &sd_latent_upscale_by, &sd_ksampler_advanced,    &sd_set_latent_noise_mask,
};

void nodes_sd_register(struct node_registry *r)
{
    node_registry_add_all(r, sd_classes, sizeof(sd_classes) / sizeof(sd_classes[0]));
}

/*
 * sd_extra_nodes — registration of the comfy_extras families in sd_extra_nodes.h.
 */
#include "sd_extra_nodes.h"

/* init_builtin_extra_nodes' module order, each module's classes in its own order. */
static const struct node_class *const extra_classes[] = {
    &sd_hypernetwork_loader,        /* nodes_hypernetwork */
    &sd_freeu, &sd_freeu_v2,        /* nodes_freelunch */
    &sd_dual_cfg_guider,            /* nodes_custom_sampler */
    &sd_hypertile,                  /* nodes_hypertile */
    &sd_model_sampling_discrete,    /* nodes_model_advanced */
    &sd_model_sampling_continuous_edm,
    &sd_model_sampling_continuous_v,
    &sd_rescale_cfg,
    &sd_self_attention_guidance,    /* nodes_sag */
    &sd_perp_neg,                   /* nodes_perpneg */
    &sd_perp_neg_guider,
    &sd_align_your_steps_scheduler, /* nodes_align_your_steps */
};

_Static_assert(sizeof extra_classes / sizeof extra_classes[0] == SD_EXTRA_N_CLASSES,
               "SD_EXTRA_N_CLASSES is the length of extra_classes");

void nodes_sd_extras_register(struct node_registry *r)
{
    node_registry_add_all(r, extra_classes, SD_EXTRA_N_CLASSES);
}

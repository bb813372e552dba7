/*
 * sd_extra_nodes — smaller comfy_extras node families over the SD sampling
 * core: AlignYourStepsScheduler (sd_ays_nodes.c), the DualCFGGuider and
 * PerpNegGuider guiders (sd_guider_nodes.c) and the model patches RescaleCFG,
 * ModelSamplingDiscrete, ModelSamplingContinuousEDM/V,
 * FreeU and FreeU_V2 (sd_model_patch_nodes.c), HypernetworkLoader, HyperTile,
 * SelfAttentionGuidance and PerpNeg (sd_attn_patch_nodes.c).
 *
 * nodes_sd_extras_register() adds the implemented classes in the order ComfyUI
 * loads their modules (init_builtin_extra_nodes); nodes_sd_register() calls it.
 * Threads: register before the registry is shared; the nodes run on the
 * executor thread.
 */
#ifndef LATENTD_NODES_SD_EXTRA_NODES_H
#define LATENTD_NODES_SD_EXTRA_NODES_H

#include "node_registry.h"

/* Number of classes nodes_sd_extras_register adds. */
#define SD_EXTRA_N_CLASSES 13

void nodes_sd_extras_register(struct node_registry *r);

extern const struct node_class sd_align_your_steps_scheduler;
extern const struct node_class sd_rescale_cfg;
extern const struct node_class sd_model_sampling_discrete;
extern const struct node_class sd_model_sampling_continuous_edm;
extern const struct node_class sd_model_sampling_continuous_v;
extern const struct node_class sd_dual_cfg_guider;
extern const struct node_class sd_perp_neg_guider;
extern const struct node_class sd_freeu;
extern const struct node_class sd_freeu_v2;
extern const struct node_class sd_hypertile;
extern const struct node_class sd_hypernetwork_loader;
extern const struct node_class sd_self_attention_guidance;
extern const struct node_class sd_perp_neg;

#endif

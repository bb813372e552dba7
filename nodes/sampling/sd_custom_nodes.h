/*
 * sd_custom_nodes — ComfyUI's custom-sampling node family
 * (comfy_extras/nodes_custom_sampler.py) over the SD1.5 sampling core:
 * schedulers and sigma edits (sd_sigmas_nodes.c), samplers, noise, guiders
 * and SamplerCustom / SamplerCustomAdvanced (sd_custom_sampling.c), the Sampler*
 * option nodes (sd_sampler_nodes.c). Payload
 * types are in sd_custom_types.h.
 *
 * nodes_sd_custom_register() adds them in ComfyUI's NODE_CLASS_MAPPINGS
 * order; nodes_sd_register() calls it. Threads: register before the registry
 * is shared; the nodes run on the executor thread.
 */
#ifndef LATENTD_NODES_SD_CUSTOM_NODES_H
#define LATENTD_NODES_SD_CUSTOM_NODES_H

#include "node_registry.h"

/* Number of classes nodes_sd_custom_register adds. */
#define SD_CUSTOM_N_CLASSES 29

void nodes_sd_custom_register(struct node_registry *r);

/* Combo choices: every implemented scheduler / sampler, in ComfyUI's order. */
void sd__scheduler_options(const struct node_env *env, struct node_strlist *out);
void sd__sampler_options(const struct node_env *env, struct node_strlist *out);

/*
 * The inputs a guider keeps: 0, or node_fail's code unless model is a MODEL and pos
 * and neg (neg may be NULL) non-empty CONDITIONINGs.
 */
struct node_ctx;
int sd__check_guider_inputs(struct node_ctx *c, struct value *model, struct value *pos,
                            struct value *neg);

/* The classes, for tests that run a node directly. */
extern const struct node_class sd_sampler_custom;
extern const struct node_class sd_basic_scheduler;
extern const struct node_class sd_karras_scheduler;
extern const struct node_class sd_exponential_scheduler;
extern const struct node_class sd_polyexponential_scheduler;
extern const struct node_class sd_laplace_scheduler;
extern const struct node_class sd_vp_scheduler;
extern const struct node_class sd_beta_sampling_scheduler;
extern const struct node_class sd_sdturbo_scheduler;
extern const struct node_class sd_ksampler_select;
extern const struct node_class sd_sampler_euler_ancestral;
extern const struct node_class sd_sampler_euler_ancestral_cfg_pp;
extern const struct node_class sd_sampler_lms;
extern const struct node_class sd_sampler_dpmpp_3m_sde;
extern const struct node_class sd_sampler_dpmpp_2m_sde;
extern const struct node_class sd_sampler_dpmpp_sde;
extern const struct node_class sd_sampler_dpmpp_2s_ancestral;
extern const struct node_class sd_split_sigmas;
extern const struct node_class sd_split_sigmas_denoise;
extern const struct node_class sd_flip_sigmas;
extern const struct node_class sd_set_first_sigma;
extern const struct node_class sd_extend_intermediate_sigmas;
extern const struct node_class sd_sampling_percent_to_sigma;
extern const struct node_class sd_cfg_guider;
extern const struct node_class sd_basic_guider;
extern const struct node_class sd_random_noise;
extern const struct node_class sd_disable_noise;
extern const struct node_class sd_add_noise;
extern const struct node_class sd_sampler_custom_advanced;

#endif

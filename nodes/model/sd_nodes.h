/*
 * sd_nodes — the SD1.5 node family: model nodes (CheckpointLoaderSimple, VAELoader,
 * CLIPTextEncode, CLIPSetLastLayer, VAEDecode, VAEDecodeTiled, VAEEncode,
 * VAEEncodeForInpaint, VAEEncodeTiled,
 * LoraLoader, LoraLoaderModelOnly, the model merging and saving nodes),
 * latent nodes (EmptyLatentImage,
 * LatentUpscale, LatentUpscaleBy, SetLatentNoiseMask), conditioning edits
 * (ConditioningCombine, ConditioningSetArea, ConditioningZeroOut) and the
 * samplers (KSampler, KSamplerAdvanced). Payload types are in sd_types.h.
 *
 * nodes_sd_register() adds them to a registry; node_registry_add_builtins()
 * must call it (node_builtin.c). The KSampler combos list exactly the
 * samplers and schedulers models/sampling implements, in ComfyUI's order.
 *
 * Threads: register before the registry is shared; the nodes run on the
 * executor thread.
 */
#ifndef LATENTD_NODES_SD_NODES_H
#define LATENTD_NODES_SD_NODES_H

#include "node_registry.h"

void nodes_sd_register(struct node_registry *r);

/* Private to sd_*.c: the loaders' IS_CHANGED, the stamp of the model file that
 * combo input `index` (the class's declared order) names in `folder`
 * (sd_model_nodes.c). */
struct buf;
int sd__model_file_is_changed_at(struct node_ctx *c, const char *folder, int index,
                                 struct buf *out);

/* The classes, for tests that run a node directly. */
extern const struct node_class sd_empty_latent_image;
extern const struct node_class sd_latent_upscale;
extern const struct node_class sd_latent_upscale_by;
extern const struct node_class sd_set_latent_noise_mask;
extern const struct node_class sd_ksampler;
extern const struct node_class sd_ksampler_advanced;
extern const struct node_class sd_conditioning_combine;
extern const struct node_class sd_conditioning_set_area;
extern const struct node_class sd_conditioning_zero_out;
extern const struct node_class sd_conditioning_average;
extern const struct node_class sd_conditioning_concat;
extern const struct node_class sd_conditioning_set_area_percentage;
extern const struct node_class sd_conditioning_set_area_strength;
extern const struct node_class sd_conditioning_set_mask;
extern const struct node_class sd_conditioning_set_timestep_range;
extern const struct node_class sd_checkpoint_loader_simple;
extern const struct node_class sd_vae_loader;
extern const struct node_class sd_clip_text_encode;
extern const struct node_class sd_clip_set_last_layer;
extern const struct node_class sd_clip_text_encode_sdxl;
extern const struct node_class sd_clip_text_encode_sdxl_refiner;
extern const struct node_class sd_vae_decode;
extern const struct node_class sd_vae_decode_tiled;
extern const struct node_class sd_vae_encode;
extern const struct node_class sd_vae_encode_for_inpaint;
extern const struct node_class sd_vae_encode_tiled;
extern const struct node_class sd_lora_loader;
extern const struct node_class sd_lora_loader_model_only;
/* ControlNet: sd_controlnet_nodes.c */
extern const struct node_class sd_controlnet_apply;
extern const struct node_class sd_controlnet_apply_advanced;
extern const struct node_class sd_controlnet_loader;
extern const struct node_class sd_diff_controlnet_loader;
extern const struct node_class sd_set_union_controlnet_type;
/* GLIGEN: sd_gligen_nodes.c */
extern const struct node_class sd_gligen_loader;
extern const struct node_class sd_gligen_textbox_apply;
/* The concat-conditioned UNets' nodes: conditioning/sd_concat_cond_nodes.c */
#define SD_CONCAT_COND_N_CLASSES 2
extern const struct node_class sd_inpaint_model_conditioning;
extern const struct node_class sd_instruct_pix2pix_conditioning;
/* comfy_extras.nodes_model_merging: sd_merge_nodes.c, sd_save_nodes.c */
extern const struct node_class sd_model_merge_simple;
extern const struct node_class sd_model_merge_blocks;
extern const struct node_class sd_model_merge_subtract;
extern const struct node_class sd_model_merge_add;
extern const struct node_class sd_clip_merge_simple;
extern const struct node_class sd_clip_merge_subtract;
extern const struct node_class sd_clip_merge_add;
extern const struct node_class sd_checkpoint_save;
extern const struct node_class sd_clip_save;
extern const struct node_class sd_vae_save;
extern const struct node_class sd_model_save;
/* CLIPLoader, DualCLIPLoader: sd_clip_loader_nodes.c (registered by sd_loader_nodes.c) */
extern const struct node_class sd_clip_loader;
extern const struct node_class sd_dual_clip_loader;
/* comfy_extras.nodes_model_merging_model_specific: sd_merge_model_specific.c */
extern const struct node_class sd_model_merge_sd1;
extern const struct node_class sd_model_merge_sd2;
extern const struct node_class sd_model_merge_sdxl;

#endif

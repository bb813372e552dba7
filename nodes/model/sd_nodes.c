/*
 * sd_nodes — registration of the SD1.5 node family (see sd_nodes.h).
 */
#include "sd_nodes.h"

#include "sd_custom_nodes.h"
#include "sd_extra_nodes.h"
#include "sd_latent_ops.h"

/* ComfyUI's NODE_CLASS_MAPPINGS order for these classes. */
static const struct node_class *const sd_classes[] = {
    &sd_ksampler,
    &sd_checkpoint_loader_simple,
    &sd_clip_text_encode,
    &sd_clip_set_last_layer,
    &sd_vae_decode,
    &sd_vae_encode,
    &sd_vae_encode_for_inpaint,
    &sd_vae_loader,
    &sd_empty_latent_image,
    &sd_latent_upscale,
    &sd_latent_upscale_by,
    &sd_conditioning_average,
    &sd_conditioning_combine,
    &sd_conditioning_concat,
    &sd_conditioning_set_area,
    &sd_conditioning_set_area_percentage,
    &sd_conditioning_set_area_strength,
    &sd_conditioning_set_mask,
    &sd_ksampler_advanced,
    &sd_set_latent_noise_mask,
    &sd_vae_decode_tiled,
    &sd_vae_encode_tiled,
    &sd_conditioning_zero_out,
    &sd_conditioning_set_timestep_range,
    &sd_lora_loader,
    &sd_controlnet_apply,
    &sd_controlnet_apply_advanced,
    &sd_controlnet_loader,
    &sd_diff_controlnet_loader,
    &sd_set_union_controlnet_type,
    &sd_gligen_loader,
    &sd_gligen_textbox_apply,
    &sd_inpaint_model_conditioning,
    &sd_lora_loader_model_only,
};

static const struct node_class *const sd_merge_classes[] = {
    &sd_model_merge_simple, &sd_model_merge_blocks, &sd_model_merge_subtract,
    &sd_model_merge_add,    &sd_checkpoint_save,    &sd_clip_merge_simple,
    &sd_clip_merge_subtract, &sd_clip_merge_add,    &sd_clip_save,
    &sd_vae_save,           &sd_model_save,
};

void nodes_sd_register(struct node_registry *r)
{
    node_registry_add_all(r, sd_classes, sizeof(sd_classes) / sizeof(sd_classes[0]));
    nodes_sd_latent_core_register(r);
    /* comfy_extras load after nodes.py: their classes follow in /object_info. */
    nodes_sd_custom_register(r);
    nodes_sd_latent_extras_register(r);
    /* comfy_extras.nodes_model_merging, in its NODE_CLASS_MAPPINGS order */
    node_registry_add_all(r, sd_merge_classes,
                          sizeof(sd_merge_classes) / sizeof(sd_merge_classes[0]));
    /* comfy_extras.nodes_clip_sdxl, in its get_node_list order */
    node_registry_add(r, &sd_clip_text_encode_sdxl_refiner);
    node_registry_add(r, &sd_clip_text_encode_sdxl);
    /* comfy_extras.nodes_model_merging_model_specific (the families latentd runs) */
    node_registry_add(r, &sd_model_merge_sd1);
    node_registry_add(r, &sd_model_merge_sd2);
    node_registry_add(r, &sd_model_merge_sdxl);
    /* later comfy_extras: AYS, guiders, model patches */
    nodes_sd_extras_register(r);
    /* comfy_extras.nodes_ip2p (init_builtin_extra_nodes has it between nodes_perpneg and
     * nodes_align_your_steps: only the order in /object_info differs) */
    node_registry_add(r, &sd_instruct_pix2pix_conditioning);
}

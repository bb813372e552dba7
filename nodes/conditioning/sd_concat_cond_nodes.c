/*
 * sd_concat_cond_nodes — the conditioning nodes of the concat-conditioned UNets:
 * InpaintModelConditioning (nodes.py) for inpainting models and
 * InstructPixToPixConditioning (comfy_extras/nodes_ip2p.py) for instruct-pix2pix ones.
 *
 * Each encodes the image with the VAE and sets on a copy of every entry of both
 * conditionings what ComfyUI's node_helpers.conditioning_set_values sets:
 * "concat_latent_image" (the VAE latent, unscaled) and, for inpainting, "concat_mask"
 * (the mask at the cropped image's size). The sampler turns them into each call's
 * c_concat for the model it runs (sd_concat.h); a model without concat inputs ignores
 * them, as ComfyUI's does.
 */
#include <string.h>

#include "alloc.h"
#include "node_registry.h"
#include "sd_backend.h"
#include "sd_inpaint_pixels.h"
#include "sd_nodes.h"
#include "sd_types.h"

static const struct node_output_def concat_outputs[] = {
    {.type = "CONDITIONING", .name = "positive"},
    {.type = "CONDITIONING", .name = "negative"},
    {.type = "LATENT", .name = "latent"},
    NODE_OUTPUTS_END};

/*
 * Copies of the conditionings at inputs pos and neg with the concat keys set on every
 * entry: lat's samples as concat_latent_image, and mask [mb, h, w] as concat_mask when
 * not NULL. Outputs 0 and 1. Returns 0, or <0 after node_fail.
 */
static int set_concat(struct node_ctx *c, int pos, int neg, const struct sd_latent *lat,
                      const float *mask, int64_t mb, int64_t h, int64_t w)
{
    const struct sd_cond *in[2] = {sd_cond_of(node_in_at(c, pos)), sd_cond_of(node_in_at(c, neg))};
    for (int s = 0; s < 2; s++)
        if (!in[s])
            return node_fail(c, "RuntimeError", "input '%s' is not a CONDITIONING",
                             node_in_name(c, s ? neg : pos));
    size_t nl = (size_t)(lat->b * 4 * lat->h * lat->w), nm = (size_t)(mb * h * w);
    for (int s = 0; s < 2; s++) {
        struct sd_cond *out = sd_cond_clone(in[s]);
        for (int i = 0; i < out->n; i++) {
            struct sd_cond_entry *en = &out->entries[i];
            xfree(en->concat_latent);
            en->concat_latent = xmalloc(nl * sizeof *en->concat_latent);
            memcpy(en->concat_latent, lat->samples, nl * sizeof *en->concat_latent);
            en->concat_b = (int)lat->b;
            en->concat_h = (int)lat->h;
            en->concat_w = (int)lat->w;
            if (!mask)
                continue;
            xfree(en->concat_mask);
            en->concat_mask = xmalloc(nm * sizeof *en->concat_mask);
            memcpy(en->concat_mask, mask, nm * sizeof *en->concat_mask);
            en->concat_mask_b = (int)mb;
            en->concat_mask_h = (int)h;
            en->concat_mask_w = (int)w;
        }
        node_set_output(c, s, sd_cond_value(out));
    }
    return 0;
}

/* The VAE at input `index`, or NULL after node_fail. */
static const struct sd_vae *vae_input(struct node_ctx *c, int index)
{
    const struct sd_vae *vae = sd_vae_of(node_in_at(c, index));
    if (!vae)
        node_fail(c, "RuntimeError", "input '%s' is not a VAE", node_in_name(c, index));
    return vae;
}

/* ---- InpaintModelConditioning ---- */

enum { IMC_POSITIVE, IMC_NEGATIVE, IMC_VAE, IMC_PIXELS, IMC_MASK, IMC_NOISE_MASK, IMC_N };
static const struct node_input_def imc_inputs[] = {
    {.name = "positive", .type = "CONDITIONING"},
    {.name = "negative", .type = "CONDITIONING"},
    {.name = "vae", .type = "VAE"},
    {.name = "pixels", .type = "IMAGE"},
    {.name = "mask", .type = "MASK"},
    {.name = "noise_mask", .type = "BOOLEAN", .def_bool = 1, .has_def_bool = 1,
     .tooltip = "Add a noise mask to the latent so sampling will only happen within the mask. "
                "Might improve results or completely break things depending on the model."},
    NODE_INPUTS_END};

/*
 * ComfyUI's InpaintModelConditioning.encode: the mask resized to the image and both
 * cropped to multiples of 8 (sd_inpaint_pixels); concat_latent_image = the VAE latent of
 * the image with the masked pixels grey, concat_mask = that mask (not rounded); the
 * LATENT is the original image's latent with the mask as its noise mask when noise_mask.
 */
static int imc_run(struct node_ctx *c)
{
    const struct sd_vae *vae = vae_input(c, IMC_VAE);
    if (!vae)
        return ERR_INVALID;
    struct sd_inpaint_pixels ip;
    struct sd_latent *concat = NULL, *lat = NULL;
    struct err e = {0};
    int rc = sd_inpaint_pixels_make(node_in_at(c, IMC_PIXELS), node_in_at(c, IMC_MASK), &ip, &e);
    if (rc < 0)
        return node_fail_err(c, rc, &e);
    if ((rc = sd_vae_encode_image(vae, c->env->mm, ip.grey, 0, 0, &concat, &e)) < 0 ||
        (rc = sd_vae_encode_image(vae, c->env->mm, node_in_at(c, IMC_PIXELS), 0, 0, &lat, &e)) <
            0) {
        rc = node_fail_err(c, rc, &e);
        goto out;
    }
    if ((rc = set_concat(c, IMC_POSITIVE, IMC_NEGATIVE, concat, ip.mask, ip.mb, ip.h, ip.w)) < 0)
        goto out;
    if (node_in_bool_at(c, IMC_NOISE_MASK)) { /* out_latent["noise_mask"] = mask */
        lat->noise_mask = ip.mask;
        lat->mb = ip.mb;
        lat->mh = ip.h;
        lat->mw = ip.w;
        ip.mask = NULL;
    }
    node_set_output(c, 2, sd_latent_value(lat));
    lat = NULL;
out:
    sd_latent_free(concat);
    sd_latent_free(lat);
    sd_inpaint_pixels_release(&ip);
    return rc;
}

const struct node_class sd_inpaint_model_conditioning = {
    .name = "InpaintModelConditioning",
    .category = "conditioning/inpaint",
    .inputs = imc_inputs,
    .n_inputs = IMC_N,
    .outputs = concat_outputs,
    .run = imc_run,
};

/* ---- InstructPixToPixConditioning ---- */

enum { IP2P_POSITIVE, IP2P_NEGATIVE, IP2P_VAE, IP2P_PIXELS, IP2P_N };
static const struct node_input_def ip2p_inputs[] = {
    {.name = "positive", .type = "CONDITIONING"},
    {.name = "negative", .type = "CONDITIONING"},
    {.name = "vae", .type = "VAE"},
    {.name = "pixels", .type = "IMAGE"},
    NODE_INPUTS_END};

/*
 * comfy_extras' InstructPixToPixConditioning: concat_latent_image = the VAE latent of
 * the image (cropped to multiples of 8 around the centre, as VAEEncode crops), and a
 * LATENT of zeros of its shape.
 */
static int ip2p_run(struct node_ctx *c)
{
    const struct sd_vae *vae = vae_input(c, IP2P_VAE);
    if (!vae)
        return ERR_INVALID;
    struct sd_latent *concat = NULL, *zeros = NULL;
    struct err e = {0};
    int rc = sd_vae_encode_image(vae, c->env->mm, node_in_at(c, IP2P_PIXELS), 0, 0, &concat, &e);
    if (rc < 0)
        return node_fail_err(c, rc, &e);
    if ((rc = sd_latent_try_new(concat->b, concat->c, concat->h, concat->w, &zeros, &e)) < 0) {
        rc = node_fail_err(c, rc, &e);
        goto out;
    }
    if ((rc = set_concat(c, IP2P_POSITIVE, IP2P_NEGATIVE, concat, NULL, 0, 0, 0)) < 0)
        goto out;
    node_set_output(c, 2, sd_latent_value(zeros));
    zeros = NULL;
out:
    sd_latent_free(concat);
    sd_latent_free(zeros);
    return rc;
}

const struct node_class sd_instruct_pix2pix_conditioning = {
    .name = "InstructPixToPixConditioning",
    .category = "conditioning/instructpix2pix",
    .flags = NODE_CLASS_V3, /* io.ComfyNode */
    .python_module = "comfy_extras.nodes_ip2p",
    .inputs = ip2p_inputs,
    .n_inputs = IP2P_N,
    .outputs = concat_outputs,
    .run = ip2p_run,
};

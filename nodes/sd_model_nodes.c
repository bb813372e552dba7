/*
 * sd_model_nodes — the model-backed SD1.5 nodes (comfy-api.md §7.3):
 * CheckpointLoaderSimple, CLIPTextEncode, CLIPSetLastLayer, VAEDecode,
 * VAEDecodeTiled and VAEEncode, over sd_backend.h.
 *
 * CheckpointLoaderSimple reads the file once into host memory; the graph's
 * output cache keeps the MODEL/CLIP/VAE values, so a cached checkpoint is
 * never read again. Device memory is planned by each node that runs a model.
 */
#include <string.h>

#include "alloc.h"
#include "buf.h"
#include "node_files.h"
#include "node_registry.h"
#include "sd15_ckpt.h"
#include "sd_backend.h"
#include "sd_nodes.h"

/* ---- CheckpointLoaderSimple ---- */

static const struct node_input_def ckpt_inputs[] = {
    {.name = "ckpt_name", .type = NODE_COMBO, .options_folder = "checkpoints",
     .tooltip = "The name of the checkpoint (model) to load."},
    NODE_INPUTS_END};
static const struct node_output_def ckpt_outputs[] = {
    {.type = "MODEL", .tooltip = "The model used for denoising latents."},
    {.type = "CLIP", .tooltip = "The CLIP model used for encoding text prompts."},
    {.type = "VAE",
     .tooltip = "The VAE model used for encoding and decoding images to and from latent space."},
    NODE_OUTPUTS_END};

static int ckpt_run(struct node_ctx *c)
{
    const char *name = node_in_str(c, "ckpt_name");
    struct buf path;
    buf_init(&path);
    if (node_files_find_model(c->env, "checkpoints", name, &path) < 0) {
        buf_release(&path);
        return node_fail_code(c, ERR_NOT_FOUND, "FileNotFoundError",
                              "Model in folder 'checkpoints' with filename '%s' not found.", name);
    }
    /* f32 storage everywhere for now (sd15.md §8.5's CPU policy). */
    static const enum tensor_dtype dt[3] = {TENSOR_F32, TENSOR_F32, TENSOR_F32};
    struct sd15_ckpt ck;
    struct err e = {0};
    int rc = sd15_ckpt_load(path.ptr, SD15_LOAD_ALL, dt, &ck, &e);
    buf_release(&path);
    if (rc < 0)
        return node_fail_code(c, rc, "RuntimeError", "ERROR: could not load '%s': %s", name,
                              e.msg);
    struct patcher *unet = patcher_new(ck.model[SD15_UNET]);
    struct patcher *clip = patcher_new(ck.model[SD15_CLIP]);
    struct patcher *vae = patcher_new(ck.model[SD15_VAE]);
    struct sd15_config cfg = ck.cfg;
    sd15_ckpt_release(&ck); /* the patchers hold the models now */
    struct sd_clip *cl = NULL;
    if ((rc = sd_clip_new(clip, &cfg, &cl, &e)) < 0) {
        patcher_unref(unet);
        patcher_unref(vae);
        return node_fail_code(c, rc, "RuntimeError", "%s", e.msg);
    }
    node_set_output(c, 0, sd_model_value(sd_unet_model_new(unet, &cfg)));
    node_set_output(c, 1, sd_clip_value(cl));
    node_set_output(c, 2, sd_vae_value(sd_vae_new(vae, &cfg)));
    return 0;
}

const struct node_class sd_checkpoint_loader_simple = {
    .name = "CheckpointLoaderSimple",
    .display_name = "Load Checkpoint",
    .description = "Loads a diffusion model checkpoint, diffusion models are used to denoise "
                   "latents.",
    .category = "loaders",
    .inputs = ckpt_inputs,
    .outputs = ckpt_outputs,
    .run = ckpt_run,
};

/* ---- CLIPTextEncode ---- */

static const struct node_input_def encode_inputs[] = {
    {.name = "text", .type = "STRING", .multiline = 1, .dynamic_prompts = 1,
     .tooltip = "The text to be encoded."},
    {.name = "clip", .type = "CLIP", .tooltip = "The CLIP model used for encoding the text."},
    NODE_INPUTS_END};
static const struct node_output_def encode_outputs[] = {
    {.type = "CONDITIONING",
     .tooltip = "A conditioning containing the embedded text used to guide the diffusion model."},
    NODE_OUTPUTS_END};

static int encode_run(struct node_ctx *c)
{
    const struct sd_clip *clip = sd_clip_of(node_in(c, "clip"));
    if (!clip)
        return node_fail(c, "RuntimeError",
                         "ERROR: clip input is invalid: None\n\nIf the clip is from a checkpoint "
                         "loader node your checkpoint does not contain a valid clip or text "
                         "encoder model.");
    struct sd_cond *cond = NULL;
    struct err e = {0};
    int rc = sd_clip_encode_text(clip, c->env->mm, node_in_str(c, "text"), &cond, &e);
    if (rc == ERR_DEVICE_OOM)
        return node_fail_code(c, rc, "torch.OutOfMemoryError", "%s", e.msg);
    if (rc < 0)
        return node_fail_code(c, rc, "RuntimeError", "%s", e.msg);
    node_set_output(c, 0, sd_cond_value(cond));
    return 0;
}

const struct node_class sd_clip_text_encode = {
    .name = "CLIPTextEncode",
    .display_name = "CLIP Text Encode (Prompt)",
    .description = "Encodes a text prompt using a CLIP model into an embedding that can be used "
                   "to guide the diffusion model towards generating specific images.",
    .category = "conditioning",
    .inputs = encode_inputs,
    .outputs = encode_outputs,
    .run = encode_run,
};

/* ---- CLIPSetLastLayer ---- */

static const struct node_input_def last_layer_inputs[] = {
    {.name = "clip", .type = "CLIP"},
    {.name = "stop_at_clip_layer", .type = "INT", .def = NODE_I(-1), .min = NODE_I(-24),
     .max = NODE_I(-1), .step = NODE_I(1)},
    NODE_INPUTS_END};
static const struct node_output_def clip_outputs[] = {{.type = "CLIP"}, NODE_OUTPUTS_END};

static int last_layer_run(struct node_ctx *c)
{
    const struct sd_clip *clip = sd_clip_of(node_in(c, "clip"));
    if (!clip)
        return node_fail(c, "RuntimeError", "input 'clip' is not a CLIP");
    int64_t layer = node_in_int(c, "stop_at_clip_layer");
    if (layer > -1 || layer < -24)
        return node_fail(c, "ValueError", "stop_at_clip_layer %lld is not in -24..-1",
                         (long long)layer);
    struct sd_clip *out = sd_clip_clone(clip);
    out->clip_skip = (int)layer;
    node_set_output(c, 0, sd_clip_value(out));
    return 0;
}

const struct node_class sd_clip_set_last_layer = {
    .name = "CLIPSetLastLayer",
    .display_name = "CLIP Set Last Layer",
    .category = "conditioning",
    .inputs = last_layer_inputs,
    .outputs = clip_outputs,
    .run = last_layer_run,
};

/* ---- VAEDecode / VAEDecodeTiled ---- */

static const struct node_input_def decode_inputs[] = {
    {.name = "samples", .type = "LATENT", .tooltip = "The latent to be decoded."},
    {.name = "vae", .type = "VAE", .tooltip = "The VAE model used for decoding the latent."},
    NODE_INPUTS_END};
static const struct node_output_def decode_outputs[] = {
    {.type = "IMAGE", .tooltip = "The decoded image."}, NODE_OUTPUTS_END};

static int decode_common(struct node_ctx *c, int tile, int overlap)
{
    const struct sd_latent *lat = sd_latent_of(node_in(c, "samples"));
    const struct sd_vae *vae = sd_vae_of(node_in(c, "vae"));
    if (!lat)
        return node_fail(c, "RuntimeError", "input 'samples' is not a LATENT");
    if (!vae)
        return node_fail(c, "RuntimeError",
                         "ERROR: VAE is invalid: None\n\nIf the VAE is from a checkpoint loader "
                         "node your checkpoint does not contain a valid VAE.");
    struct value *img = NULL;
    struct err e = {0};
    int rc = sd_vae_decode_latent(vae, c->env->mm, lat, tile, overlap, &img, &e);
    if (rc == ERR_DEVICE_OOM)
        return node_fail_code(c, rc, "torch.OutOfMemoryError", "%s", e.msg);
    if (rc < 0)
        return node_fail_code(c, rc, "RuntimeError", "%s", e.msg);
    node_set_output(c, 0, img);
    return 0;
}

static int decode_run(struct node_ctx *c)
{
    return decode_common(c, 0, 0);
}

const struct node_class sd_vae_decode = {
    .name = "VAEDecode",
    .display_name = "VAE Decode",
    .description = "Decodes latent images back into pixel space images.",
    .category = "latent",
    .inputs = decode_inputs,
    .outputs = decode_outputs,
    .run = decode_run,
};

static const struct node_input_def decode_tiled_inputs[] = {
    {.name = "samples", .type = "LATENT"},
    {.name = "vae", .type = "VAE"},
    {.name = "tile_size", .type = "INT", .def = NODE_I(512), .min = NODE_I(64),
     .max = NODE_I(4096), .step = NODE_I(32)},
    {.name = "overlap", .type = "INT", .def = NODE_I(64), .min = NODE_I(0), .max = NODE_I(4096),
     .step = NODE_I(32)},
    {.name = "temporal_size", .type = "INT", .def = NODE_I(64), .min = NODE_I(8),
     .max = NODE_I(4096), .step = NODE_I(4),
     .tooltip = "Only used for video VAEs: Amount of frames to decode at a time."},
    {.name = "temporal_overlap", .type = "INT", .def = NODE_I(8), .min = NODE_I(4),
     .max = NODE_I(4096), .step = NODE_I(4),
     .tooltip = "Only used for video VAEs: Amount of frames to overlap."},
    NODE_INPUTS_END};
static const struct node_output_def image_outputs[] = {{.type = "IMAGE"}, NODE_OUTPUTS_END};

static int decode_tiled_run(struct node_ctx *c)
{
    int64_t tile = node_in_int(c, "tile_size"), overlap = node_in_int(c, "overlap");
    if (tile < 8 || overlap < 0)
        return node_fail(c, "ValueError", "invalid tile size %lld / overlap %lld",
                         (long long)tile, (long long)overlap);
    if (tile < overlap * 4)
        overlap = tile / 4;
    /* Pixels to latent pixels (the SD VAE compresses 8x); temporal inputs are for video. */
    return decode_common(c, (int)(tile / 8), (int)(overlap / 8));
}

const struct node_class sd_vae_decode_tiled = {
    .name = "VAEDecodeTiled",
    .display_name = "VAE Decode (Tiled)",
    .category = "_for_testing",
    .inputs = decode_tiled_inputs,
    .outputs = image_outputs,
    .run = decode_tiled_run,
};

/* ---- VAEEncode ---- */

static const struct node_input_def vae_encode_inputs[] = {
    {.name = "pixels", .type = "IMAGE"}, {.name = "vae", .type = "VAE"}, NODE_INPUTS_END};
static const struct node_output_def latent_out[] = {{.type = "LATENT"}, NODE_OUTPUTS_END};

static int vae_encode_run(struct node_ctx *c)
{
    const struct sd_vae *vae = sd_vae_of(node_in(c, "vae"));
    if (!vae)
        return node_fail(c, "RuntimeError",
                         "ERROR: VAE is invalid: None\n\nIf the VAE is from a checkpoint loader "
                         "node your checkpoint does not contain a valid VAE.");
    struct sd_latent *lat = NULL;
    struct err e = {0};
    int rc = sd_vae_encode_image(vae, c->env->mm, node_in(c, "pixels"), &lat, &e);
    if (rc == ERR_DEVICE_OOM)
        return node_fail_code(c, rc, "torch.OutOfMemoryError", "%s", e.msg);
    if (rc < 0)
        return node_fail_code(c, rc, "RuntimeError", "%s", e.msg);
    node_set_output(c, 0, sd_latent_value(lat));
    return 0;
}

const struct node_class sd_vae_encode = {
    .name = "VAEEncode",
    .display_name = "VAE Encode",
    .category = "latent",
    .inputs = vae_encode_inputs,
    .outputs = latent_out,
    .run = vae_encode_run,
};

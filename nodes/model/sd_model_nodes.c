/*
 * sd_model_nodes — the model-backed SD1.5 nodes (comfy-api.md §7.3):
 * CheckpointLoaderSimple, VAELoader, CLIPTextEncode, CLIPSetLastLayer, VAEDecode,
 * VAEDecodeTiled and VAEEncode, over sd_backend.h.
 *
 * CheckpointLoaderSimple reads the file once into host memory; the graph's
 * output cache keeps the MODEL/CLIP/VAE values, so a cached checkpoint is
 * never read again. Device memory is planned by each node that runs a model.
 */
#include <math.h>
#include <string.h>

#include "alloc.h"
#include "buf.h"
#include "node_files.h"
#include "node_registry.h"
#include "checkpoint.h"
#include "memmgr.h"
#include "sd_backend.h"
#include "sd_inpaint_pixels.h"
#include "sd_latent_util.h"
#include "sd_nodes.h"
#include "sampling.h"

/* ---- model files ---- */

/*
 * IS_CHANGED of a loader: the stamp of the file its combo `input` names in `folder`
 * (device, inode, size, mtime, ctime; st_stamp). A model file replaced on disk (cp
 * over it, a rename, a rewrite) gets a new key, so the loader reads the new file
 * instead of handing out the cached model of the old one. One stat per prompt.
 */
int sd__model_file_is_changed_at(struct node_ctx *c, const char *folder, int index,
                                 struct buf *out)
{
    const struct value *v = node_in_at(c, index);
    if (!v || v->kind != VALUE_STRING)
        return ERR_INVALID;
    struct buf path;
    buf_init(&path);
    struct st_stamp st;
    int rc = node_files_find_model(c->env, folder, v->s, &path);
    if (rc == 0)
        rc = st_stamp_path(path.ptr, &st);
    buf_release(&path);
    if (rc < 0)
        return rc; /* the run reports it */
    buf_printf(out, "%llu:%llu:%llu:%lld:%lld", (unsigned long long)st.dev,
               (unsigned long long)st.ino, (unsigned long long)st.size, (long long)st.mtime_ns,
               (long long)st.ctime_ns);
    return 0;
}

/* The CLIP at input `index`, or NULL after node_fail. */
static const struct sd_clip *clip_in(struct node_ctx *c, int index)
{
    const struct sd_clip *clip = sd_clip_of(node_in_at(c, index));
    if (!clip)
        node_fail(c, "RuntimeError", "input '%s' is not a CLIP", node_in_name(c, index));
    return clip;
}

/*
 * The VAE at input `index` of VAEDecode and VAEEncode (and their tiled forms), or
 * NULL after node_fail with ComfyUI's message for a checkpoint that has none.
 */
static const struct sd_vae *vae_in(struct node_ctx *c, int index)
{
    const struct sd_vae *vae = sd_vae_of(node_in_at(c, index));
    if (!vae)
        node_fail(c, "RuntimeError",
                  "ERROR: VAE is invalid: None\n\nIf the VAE is from a checkpoint loader "
                  "node your checkpoint does not contain a valid VAE.");
    return vae;
}

/* ---- CheckpointLoaderSimple ---- */

enum { CKPT_CKPT_NAME, CKPT_N };
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

static int ckpt_is_changed(struct node_ctx *c, struct buf *out)
{
    return sd__model_file_is_changed_at(c, "checkpoints", CKPT_CKPT_NAME, out);
}

static int ckpt_run(struct node_ctx *c)
{
    const char *name = node_in_str_at(c, CKPT_CKPT_NAME);
    struct buf path;
    buf_init(&path);
    if (node_files_find_model(c->env, "checkpoints", name, &path) < 0) {
        buf_release(&path);
        return node_fail_code(c, ERR_NOT_FOUND, "FileNotFoundError",
                              "Model in folder 'checkpoints' with filename '%s' not found.", name);
    }
    /* f32 compute (sd15.md §8.5's CPU policy); f16/bf16 file weights stay at their file
     * dtype on the host and are widened inside the ops or on upload (issue 15). */
    static const enum tensor_dtype dt[3] = {TENSOR_F32, TENSOR_F32, TENSOR_F32};
    struct model_ckpt ck;
    struct err e = {0};
    int rc = model_ckpt_load(path.ptr, MODEL_LOAD_ALL, dt, &ck, &e);
    buf_release(&path);
    if (rc < 0)
        return node_fail_code(c, rc, "RuntimeError", "ERROR: could not load '%s': %s", name, e.msg);
    /* --bf16-unet / --bf16-text-enc / --bf16-vae (ComfyUI's unet_dtype, text_encoder_dtype,
     * vae_dtype): the GEMM precision each model computes at (tensor_precision.h). */
    for (int m = 0; m < MODEL_COMPONENT_COUNT; m++)
        if (ck.model[m])
            patcher_model_set_precision(
                ck.model[m], mm_precision(c->env->mm, patcher_model_role(ck.model[m])));
    struct patcher *unet = patcher_new(ck.model[MODEL_UNET]);
    struct patcher *clip = patcher_new(ck.model[MODEL_CLIP]);
    struct patcher *vae = patcher_new(ck.model[MODEL_VAE]);
    struct patcher *clip2 = ck.model[MODEL_CLIP2] ? patcher_new(ck.model[MODEL_CLIP2]) : NULL;
    struct model_config cfg = ck.cfg;
    model_ckpt_release(&ck); /* the patchers hold the models now */
    struct sd_clip *cl = NULL;
    if ((rc = sd_clip_new(clip, &cfg, &cl, &e)) < 0) {
        patcher_unref(unet);
        patcher_unref(vae);
        patcher_unref(clip2);
        return node_fail_code(c, rc, "RuntimeError", "%s", e.msg);
    }
    sd_clip_set_second(cl, clip2); /* SDXL's bigG: CLIPTextEncode concatenates both */
    sd_clip_set_embedding_dir(cl, c->env->models_dir);
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
    .n_inputs = CKPT_N,
    .outputs = ckpt_outputs,
    .run = ckpt_run,
    .is_changed = ckpt_is_changed,
};

/* ---- VAELoader ---- */

/*
 * The files in models/vae, then "pixel_space" as ComfyUI always lists it
 * (comfy-api.md §7.3). The TAESD approximations (taesd, ...) are not listed:
 * latentd has no TAESD model, so they would only fail when run. pixel_space
 * is listed for workflow compatibility and refused when run (latentd's
 * samplers need the SD1.5 latent space).
 */
static void vae_names(const struct node_env *env, struct node_strlist *out)
{
    node_files_list_models(env, "vae", NULL, out);
    node_strlist_add(out, "pixel_space");
}

enum { VAE_LOADER_VAE_NAME, VAE_LOADER_N };
static const struct node_input_def vae_loader_inputs[] = {
    {.name = "vae_name", .type = NODE_COMBO, .options_fn = vae_names},
    NODE_INPUTS_END};
static const struct node_output_def vae_loader_outputs[] = {{.type = "VAE"}, NODE_OUTPUTS_END};

static int vae_loader_is_changed(struct node_ctx *c, struct buf *out)
{
    return sd__model_file_is_changed_at(c, "vae", VAE_LOADER_VAE_NAME, out);
}

static int vae_loader_run(struct node_ctx *c)
{
    const char *name = node_in_str_at(c, VAE_LOADER_VAE_NAME);
    if (strcmp(name, "pixel_space") == 0)
        return node_fail_code(c, ERR_UNSUPPORTED, "RuntimeError",
                              "ERROR: VAE 'pixel_space' is not supported: latentd runs SD1.5 "
                              "VAEs only (put a .safetensors VAE in models/vae)");
    struct buf path;
    buf_init(&path);
    if (node_files_find_model(c->env, "vae", name, &path) < 0) {
        buf_release(&path);
        return node_fail_code(c, ERR_NOT_FOUND, "FileNotFoundError",
                              "Model in folder 'vae' with filename '%s' not found.", name);
    }
    struct model_ckpt ck;
    struct err e = {0};
    /* f32 storage, as CheckpointLoaderSimple (sd15.md §8.5's CPU policy). */
    int rc = model_vae_load(path.ptr, TENSOR_F32, &ck, &e);
    buf_release(&path);
    if (rc < 0)
        return node_fail_code(c, rc, "RuntimeError", "ERROR: could not load VAE '%s': %s", name,
                              e.msg);
    patcher_model_set_precision(ck.model[MODEL_VAE], mm_precision(c->env->mm, PATCHER_ROLE_VAE));
    struct patcher *vae = patcher_new(ck.model[MODEL_VAE]);
    struct model_config cfg = ck.cfg;
    model_ckpt_release(&ck); /* the patcher holds the model now */
    node_set_output(c, 0, sd_vae_value(sd_vae_new(vae, &cfg)));
    return 0;
}

const struct node_class sd_vae_loader = {
    .name = "VAELoader",
    .display_name = "Load VAE",
    .category = "loaders",
    .inputs = vae_loader_inputs,
    .n_inputs = VAE_LOADER_N,
    .outputs = vae_loader_outputs,
    .run = vae_loader_run,
    .is_changed = vae_loader_is_changed,
};

/* ---- CLIPTextEncode ---- */

enum { ENCODE_TEXT, ENCODE_CLIP, ENCODE_N };
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
    const struct sd_clip *clip = sd_clip_of(node_in_at(c, ENCODE_CLIP));
    if (!clip)
        return node_fail(c, "RuntimeError",
                         "ERROR: clip input is invalid: None\n\nIf the clip is from a checkpoint "
                         "loader node your checkpoint does not contain a valid clip or text "
                         "encoder model.");
    struct sd_cond *cond = NULL;
    struct err e = {0};
    int rc = sd_clip_encode_text(clip, c->env->mm, node_in_str_at(c, ENCODE_TEXT), &cond, &e);
    if (rc < 0)
        return node_fail_err(c, rc, &e);
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
    .n_inputs = ENCODE_N,
    .outputs = encode_outputs,
    .run = encode_run,
};

/* ---- CLIPTextEncodeSDXL (comfy_extras/nodes_clip_sdxl.py, V3; sdxl.md §4.7) ---- */

#define SDXL_SIZE(n, d)                                                                            \
    {                                                                                              \
        .name = n, .type = "INT", .def = NODE_I(d), .min = NODE_I(0), .max = NODE_I(16384)         \
    }
enum {
    SDXL_CLIP, SDXL_WIDTH, SDXL_HEIGHT, SDXL_CROP_W, SDXL_CROP_H, SDXL_TARGET_WIDTH,
    SDXL_TARGET_HEIGHT, SDXL_TEXT_G, SDXL_TEXT_L, SDXL_N
};
static const struct node_input_def encode_sdxl_inputs[] = {
    {.name = "clip", .type = "CLIP"},
    SDXL_SIZE("width", 1024),
    SDXL_SIZE("height", 1024),
    SDXL_SIZE("crop_w", 0),
    SDXL_SIZE("crop_h", 0),
    SDXL_SIZE("target_width", 1024),
    SDXL_SIZE("target_height", 1024),
    {.name = "text_g", .type = "STRING", .multiline = 1, .dynamic_prompts = 1},
    {.name = "text_l", .type = "STRING", .multiline = 1, .dynamic_prompts = 1},
    NODE_INPUTS_END};
static const struct node_output_def encode_sdxl_outputs[] = {{.type = "CONDITIONING"},
                                                             NODE_OUTPUTS_END};

static int encode_sdxl_run(struct node_ctx *c)
{
    const struct sd_clip *clip = clip_in(c, SDXL_CLIP);
    if (!clip)
        return ERR_INVALID;
    struct adm_sizes s = {.width = (int)node_in_int_at(c, SDXL_WIDTH),
                          .height = (int)node_in_int_at(c, SDXL_HEIGHT),
                          .crop_w = (int)node_in_int_at(c, SDXL_CROP_W),
                          .crop_h = (int)node_in_int_at(c, SDXL_CROP_H),
                          .target_width = (int)node_in_int_at(c, SDXL_TARGET_WIDTH),
                          .target_height = (int)node_in_int_at(c, SDXL_TARGET_HEIGHT)};
    struct sd_cond *cond = NULL;
    struct err e = {0};
    int rc = sd_clip_encode_sdxl(clip, c->env->mm, node_in_str_at(c, SDXL_TEXT_G),
                                 node_in_str_at(c, SDXL_TEXT_L), &s, &cond, &e);
    if (rc < 0)
        return node_fail_err(c, rc, &e);
    node_set_output(c, 0, sd_cond_value(cond));
    return 0;
}

const struct node_class sd_clip_text_encode_sdxl = {
    .name = "CLIPTextEncodeSDXL",
    .category = "advanced/conditioning",
    .python_module = "comfy_extras.nodes_clip_sdxl",
    .flags = NODE_CLASS_V3,
    .inputs = encode_sdxl_inputs,
    .n_inputs = SDXL_N,
    .outputs = encode_sdxl_outputs,
    .run = encode_sdxl_run,
};

/* ---- CLIPTextEncodeSDXLRefiner (comfy_extras/nodes_clip_sdxl.py, V3) ---- */

enum { REFINER_ASCORE, REFINER_WIDTH, REFINER_HEIGHT, REFINER_TEXT, REFINER_CLIP, REFINER_N };
static const struct node_input_def encode_refiner_inputs[] = {
    {.name = "ascore",
     .type = "FLOAT",
     .def = NODE_F(6.0),
     .min = NODE_F(0.0),
     .max = NODE_F(1000.0),
     .step = NODE_F(0.01)},
    SDXL_SIZE("width", 1024),
    SDXL_SIZE("height", 1024),
    {.name = "text", .type = "STRING", .multiline = 1, .dynamic_prompts = 1},
    {.name = "clip", .type = "CLIP"},
    NODE_INPUTS_END};

static int encode_refiner_run(struct node_ctx *c)
{
    const struct sd_clip *clip = clip_in(c, REFINER_CLIP);
    if (!clip)
        return ERR_INVALID;
    struct sd_cond *cond = NULL;
    struct err e = {0};
    int rc = sd_clip_encode_sdxl_refiner(clip, c->env->mm, node_in_str_at(c, REFINER_TEXT),
                                         node_in_float_at(c, REFINER_ASCORE),
                                         (int)node_in_int_at(c, REFINER_WIDTH),
                                         (int)node_in_int_at(c, REFINER_HEIGHT), &cond, &e);
    if (rc < 0)
        return node_fail_err(c, rc, &e);
    node_set_output(c, 0, sd_cond_value(cond));
    return 0;
}

const struct node_class sd_clip_text_encode_sdxl_refiner = {
    .name = "CLIPTextEncodeSDXLRefiner",
    .category = "advanced/conditioning",
    .python_module = "comfy_extras.nodes_clip_sdxl",
    .flags = NODE_CLASS_V3,
    .inputs = encode_refiner_inputs,
    .n_inputs = REFINER_N,
    .outputs = encode_sdxl_outputs,
    .run = encode_refiner_run,
};

/* ---- CLIPSetLastLayer ---- */

enum { LAST_LAYER_CLIP, LAST_LAYER_STOP_AT_CLIP_LAYER, LAST_LAYER_N };
static const struct node_input_def last_layer_inputs[] = {
    {.name = "clip", .type = "CLIP"},
    {.name = "stop_at_clip_layer", .type = "INT", .def = NODE_I(-1), .min = NODE_I(-24),
     .max = NODE_I(-1), .step = NODE_I(1)},
    NODE_INPUTS_END};
static const struct node_output_def clip_outputs[] = {{.type = "CLIP"}, NODE_OUTPUTS_END};

static int last_layer_run(struct node_ctx *c)
{
    const struct sd_clip *clip = clip_in(c, LAST_LAYER_CLIP);
    if (!clip)
        return ERR_INVALID;
    int64_t layer = node_in_int_at(c, LAST_LAYER_STOP_AT_CLIP_LAYER);
    if (layer > -1 || layer < -24)
        return node_fail(c, "ValueError", "stop_at_clip_layer %lld is not in -24..-1",
                         (long long)layer);
    struct sd_clip *out = sd_clip_clone(clip);
    out->clip_skip = (int)layer;
    out->clip_skip_set = 1;
    node_set_output(c, 0, sd_clip_value(out));
    return 0;
}

const struct node_class sd_clip_set_last_layer = {
    .name = "CLIPSetLastLayer",
    .display_name = "CLIP Set Last Layer",
    .category = "conditioning",
    .inputs = last_layer_inputs,
    .n_inputs = LAST_LAYER_N,
    .outputs = clip_outputs,
    .run = last_layer_run,
};

/* ---- VAEDecode / VAEDecodeTiled ---- */

enum { DECODE_SAMPLES, DECODE_VAE, DECODE_N };
static const struct node_input_def decode_inputs[] = {
    {.name = "samples", .type = "LATENT", .tooltip = "The latent to be decoded."},
    {.name = "vae", .type = "VAE", .tooltip = "The VAE model used for decoding the latent."},
    NODE_INPUTS_END};
static const struct node_output_def decode_outputs[] = {
    {.type = "IMAGE", .tooltip = "The decoded image."}, NODE_OUTPUTS_END};

static int decode_common(struct node_ctx *c, int tile, int overlap)
{
    const struct sd_latent *lat = sd__latent_in_at(c, DECODE_SAMPLES);
    const struct sd_vae *vae = lat ? vae_in(c, DECODE_VAE) : NULL;
    if (!vae)
        return ERR_INVALID;
    struct value *img = NULL;
    struct err e = {0};
    int rc = sd_vae_decode_latent(vae, c->env->mm, lat, tile, overlap, &img, &e);
    if (rc < 0)
        return node_fail_err(c, rc, &e);
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
    .n_inputs = DECODE_N,
    .outputs = decode_outputs,
    .run = decode_run,
};

/* decode_common reads the first two as DECODE_*. */
enum {
    DECODE_TILED_SAMPLES = DECODE_SAMPLES, DECODE_TILED_VAE = DECODE_VAE, DECODE_TILED_TILE_SIZE,
    DECODE_TILED_OVERLAP, DECODE_TILED_TEMPORAL_SIZE, DECODE_TILED_TEMPORAL_OVERLAP, DECODE_TILED_N
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
    int64_t tile = node_in_int_at(c, DECODE_TILED_TILE_SIZE);
    int64_t overlap = node_in_int_at(c, DECODE_TILED_OVERLAP);
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
    .n_inputs = DECODE_TILED_N,
    .outputs = image_outputs,
    .run = decode_tiled_run,
};

/* ---- VAEEncode ---- */

enum { ENCODE_VAE_PIXELS, ENCODE_VAE_VAE, ENCODE_VAE_N };
static const struct node_input_def vae_encode_inputs[] = {
    {.name = "pixels", .type = "IMAGE"}, {.name = "vae", .type = "VAE"}, NODE_INPUTS_END};
static const struct node_output_def latent_out[] = {{.type = "LATENT"}, NODE_OUTPUTS_END};

static int vae_encode_common(struct node_ctx *c, int tile, int overlap)
{
    const struct sd_vae *vae = vae_in(c, ENCODE_VAE_VAE);
    if (!vae)
        return ERR_INVALID;
    struct sd_latent *lat = NULL;
    struct err e = {0};
    int rc = sd_vae_encode_image(vae, c->env->mm, node_in_at(c, ENCODE_VAE_PIXELS), tile, overlap,
                                 &lat, &e);
    if (rc < 0)
        return node_fail_err(c, rc, &e);
    node_set_output(c, 0, sd_latent_value(lat));
    return 0;
}

static int vae_encode_run(struct node_ctx *c)
{
    return vae_encode_common(c, 0, 0);
}

const struct node_class sd_vae_encode = {
    .name = "VAEEncode",
    .display_name = "VAE Encode",
    .category = "latent",
    .inputs = vae_encode_inputs,
    .n_inputs = ENCODE_VAE_N,
    .outputs = latent_out,
    .run = vae_encode_run,
};

/* ---- VAEEncodeForInpaint ---- */

enum { INPAINT_PIXELS, INPAINT_VAE, INPAINT_MASK, INPAINT_GROW_MASK_BY, INPAINT_N };
static const struct node_input_def inpaint_inputs[] = {
    {.name = "pixels", .type = "IMAGE"},
    {.name = "vae", .type = "VAE"},
    {.name = "mask", .type = "MASK"},
    {.name = "grow_mask_by", .type = "INT", .def = NODE_I(6), .min = NODE_I(0), .max = NODE_I(64),
     .step = NODE_I(1)},
    NODE_INPUTS_END};
/* torch.round: half to even. */
static float round_even(float v)
{
    return nearbyintf(v);
}

/*
 * ComfyUI's VAEEncodeForInpaint: the mask resized (bilinear) to the image,
 * both cropped to multiples of 8, masked pixels set to grey (0.5) before
 * encoding (sd_inpaint_pixels.h), and the noise mask = the rounded mask grown
 * by a box filter of grow_mask_by pixels (clamped to 1).
 */
static int inpaint_run(struct node_ctx *c)
{
    const struct sd_vae *vae = sd_vae_of(node_in_at(c, INPAINT_VAE));
    int64_t g = node_in_int_at(c, INPAINT_GROW_MASK_BY);
    if (!vae)
        return node_fail(c, "RuntimeError", "input 'vae' is not a VAE");
    if (g < 0 || g > 64)
        return node_fail(c, "ValueError", "grow_mask_by %lld is not in 0..64", (long long)g);
    struct sd_inpaint_pixels ip;
    struct err e = {0};
    int rc = sd_inpaint_pixels_make(node_in_at(c, INPAINT_PIXELS), node_in_at(c, INPAINT_MASK),
                                    &ip, &e);
    if (rc < 0)
        return node_fail_err(c, rc, &e);
    int64_t mb = ip.mb, H = ip.h, W = ip.w;
    float *m = ip.mask;
    for (int64_t i = 0; i < mb * H * W; i++)
        m[i] = round_even(m[i]);
    struct sd_latent *lat = NULL;
    rc = sd_vae_encode_image(vae, c->env->mm, ip.grey, 0, 0, &lat, &e);
    if (rc < 0) {
        sd_inpaint_pixels_release(&ip);
        return node_fail_err(c, rc, &e);
    }
    /* Grow: conv2d with a g x g ones kernel, padding ceil((g - 1) / 2), cut to H x W. */
    lat->noise_mask = xmalloc((size_t)(mb * H * W) * sizeof *lat->noise_mask);
    lat->mb = mb;
    lat->mh = H;
    lat->mw = W;
    int64_t pad = (g - 1 + 1) / 2;
    for (int64_t b = 0; b < mb; b++)
        for (int64_t y = 0; y < H; y++)
            for (int64_t x = 0; x < W; x++) {
                float v;
                if (g == 0) {
                    v = m[(b * H + y) * W + x];
                } else {
                    v = 0.0f;
                    for (int64_t ky = 0; ky < g; ky++)
                        for (int64_t kx = 0; kx < g; kx++) {
                            int64_t sy = y - pad + ky, sx = x - pad + kx;
                            if (sy >= 0 && sy < H && sx >= 0 && sx < W)
                                v += m[(b * H + sy) * W + sx];
                        }
                    v = v > 1.0f ? 1.0f : v;
                }
                lat->noise_mask[(b * H + y) * W + x] = round_even(v);
            }
    sd_inpaint_pixels_release(&ip);
    node_set_output(c, 0, sd_latent_value(lat));
    return 0;
}

const struct node_class sd_vae_encode_for_inpaint = {
    .name = "VAEEncodeForInpaint",
    .display_name = "VAE Encode (for Inpainting)",
    .category = "latent/inpaint",
    .inputs = inpaint_inputs,
    .n_inputs = INPAINT_N,
    .outputs = latent_out,
    .run = inpaint_run,
};

/* ---- VAEEncodeTiled ---- */

/* vae_encode_common reads the first two as ENCODE_VAE_*. */
enum {
    ENCODE_TILED_PIXELS = ENCODE_VAE_PIXELS, ENCODE_TILED_VAE = ENCODE_VAE_VAE,
    ENCODE_TILED_TILE_SIZE, ENCODE_TILED_OVERLAP, ENCODE_TILED_TEMPORAL_SIZE,
    ENCODE_TILED_TEMPORAL_OVERLAP, ENCODE_TILED_N
};
static const struct node_input_def encode_tiled_inputs[] = {
    {.name = "pixels", .type = "IMAGE"},
    {.name = "vae", .type = "VAE"},
    {.name = "tile_size", .type = "INT", .def = NODE_I(512), .min = NODE_I(64),
     .max = NODE_I(4096), .step = NODE_I(64)},
    {.name = "overlap", .type = "INT", .def = NODE_I(64), .min = NODE_I(0), .max = NODE_I(4096),
     .step = NODE_I(32)},
    {.name = "temporal_size", .type = "INT", .def = NODE_I(64), .min = NODE_I(8),
     .max = NODE_I(4096), .step = NODE_I(4),
     .tooltip = "Only used for video VAEs: Amount of frames to encode at a time."},
    {.name = "temporal_overlap", .type = "INT", .def = NODE_I(8), .min = NODE_I(4),
     .max = NODE_I(4096), .step = NODE_I(4),
     .tooltip = "Only used for video VAEs: Amount of frames to overlap."},
    NODE_INPUTS_END};

static int vae_encode_tiled_run(struct node_ctx *c)
{
    int64_t tile = node_in_int_at(c, ENCODE_TILED_TILE_SIZE);
    int64_t overlap = node_in_int_at(c, ENCODE_TILED_OVERLAP);
    if (tile < 16 || overlap < 0 || tile > 4096 || overlap > 4096)
        return node_fail(c, "ValueError", "invalid tile size %lld / overlap %lld",
                         (long long)tile, (long long)overlap);
    return vae_encode_common(c, (int)tile, (int)overlap);
}

const struct node_class sd_vae_encode_tiled = {
    .name = "VAEEncodeTiled",
    .display_name = "VAE Encode (Tiled)",
    .category = "_for_testing",
    .inputs = encode_tiled_inputs,
    .n_inputs = ENCODE_TILED_N,
    .outputs = latent_out,
    .run = vae_encode_tiled_run,
};

/*
 * sd_gligen_nodes — GLIGENLoader and GLIGENTextBoxApply (ComfyUI nodes.py): load a GLIGEN
 * model (models/gligen/gligen.h) from models/gligen, and add a text box to every entry of
 * a conditioning (sd_gligen.h): the text's pooled CLIP embedding and the box in latent
 * units, after the boxes the entry had. KSampler runs it (sd_ksampler.c, sd_backend.c).
 */
#include <string.h>

#include "buf.h"
#include "node_files.h"
#include "node_registry.h"
#include "sd_backend.h"
#include "sd_gligen.h"
#include "sd_nodes.h"

/* ---- GLIGENLoader ---- */

enum { LOADER_GLIGEN_NAME, LOADER_N };
static const struct node_input_def loader_inputs[] = {
    {.name = "gligen_name", .type = NODE_COMBO, .options_folder = "gligen"},
    NODE_INPUTS_END};
static const struct node_output_def loader_outputs[] = {{.type = "GLIGEN"}, NODE_OUTPUTS_END};

static int loader_run(struct node_ctx *c)
{
    const char *name = node_in_str_at(c, LOADER_GLIGEN_NAME);
    struct buf path;
    buf_init(&path);
    if (node_files_find_model(c->env, "gligen", name, &path) < 0) {
        buf_release(&path);
        return node_fail_code(c, ERR_NOT_FOUND, "FileNotFoundError",
                              "Model in folder 'gligen' with filename '%s' not found.", name);
    }
    struct gligen *g = NULL;
    struct err e = {0};
    /* f32 storage, as the checkpoint loader's (sd15.md §8.5's CPU policy) */
    int rc = gligen_load(path.ptr, TENSOR_F32, &g, &e);
    buf_release(&path);
    if (rc < 0)
        return node_fail_code(c, rc, "RuntimeError", "ERROR: invalid GLIGEN model: %s", e.msg);
    node_set_output(c, 0, sd_gligen_model_value(g));
    gligen_unref(g);
    return 0;
}

static int loader_is_changed(struct node_ctx *c, struct buf *out)
{
    return sd__model_file_is_changed_at(c, "gligen", LOADER_GLIGEN_NAME, out);
}

const struct node_class sd_gligen_loader = {
    .name = "GLIGENLoader",
    .display_name = "GLIGENLoader",
    .category = "loaders",
    .inputs = loader_inputs,
    .n_inputs = LOADER_N,
    .outputs = loader_outputs,
    .run = loader_run,
    .is_changed = loader_is_changed,
};

/* ---- GLIGENTextBoxApply ---- */

#define BOX_INT(n, d, lo)                                                                          \
    {                                                                                              \
        .name = n, .type = "INT", .def = NODE_I(d), .min = NODE_I(lo), .max = NODE_I(16384),      \
        .step = NODE_I(8)                                                                          \
    }
enum { BOX_CONDITIONING_TO, BOX_CLIP, BOX_MODEL, BOX_TEXT, BOX_WIDTH, BOX_HEIGHT, BOX_X, BOX_Y,
       BOX_N };
static const struct node_input_def box_inputs[] = {
    {.name = "conditioning_to", .type = "CONDITIONING"},
    {.name = "clip", .type = "CLIP"},
    {.name = "gligen_textbox_model", .type = "GLIGEN"},
    {.name = "text", .type = "STRING", .multiline = 1, .dynamic_prompts = 1},
    BOX_INT("width", 64, 8),
    BOX_INT("height", 64, 8),
    BOX_INT("x", 0, 0),
    BOX_INT("y", 0, 0),
    NODE_INPUTS_END};
static const struct node_output_def box_outputs[] = {{.type = "CONDITIONING"},
                                                     NODE_OUTPUTS_END};

/* A copy of `in` whose entries each carry one more box (the pooled text p, in_dim wide). */
static int add_box(const struct sd_cond *in, struct gligen *g, const float *p, const int box[4],
                   struct sd_cond **out, struct err *e)
{
    struct sd_cond *c = sd_cond_clone(in);
    int rc = 0;
    for (int i = 0; i < c->n && rc == 0; i++) {
        struct sd_cond_entry *en = &c->entries[i];
        struct sd_gligen *made = NULL;
        if ((rc = sd_gligen_append(en->gligen, g, p, box[0], box[1], box[2], box[3], &made,
                                   e)) < 0)
            break;
        sd_gligen_unref(en->gligen);
        en->gligen = made;
    }
    if (rc < 0) {
        sd_cond_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

static int box_run(struct node_ctx *c)
{
    const struct sd_cond *to = sd_cond_of(node_in_at(c, BOX_CONDITIONING_TO));
    const struct sd_clip *clip = sd_clip_of(node_in_at(c, BOX_CLIP));
    struct gligen *g = sd_gligen_model_of(node_in_at(c, BOX_MODEL));
    if (!to)
        return node_fail(c, "RuntimeError", "input 'conditioning_to' is not a CONDITIONING");
    if (!clip)
        return node_fail(c, "RuntimeError", "input 'clip' is not a CLIP");
    if (!g)
        return node_fail(c, "RuntimeError", "input 'gligen_textbox_model' is not a GLIGEN");
    /* position_params: (cond_pooled, height // 8, width // 8, y // 8, x // 8) */
    int box[4] = {(int)(node_in_int_at(c, BOX_HEIGHT) / 8), (int)(node_in_int_at(c, BOX_WIDTH) / 8),
                  (int)(node_in_int_at(c, BOX_Y) / 8), (int)(node_in_int_at(c, BOX_X) / 8)};
    struct sd_cond *enc = NULL, *out = NULL;
    struct err e = {0};
    /* encode_from_tokens(return_pooled="unprojected"): CLIP-L's pooled output has no
     * projection here (text_encoder.h), so the entry's pooled vector is it */
    int rc = sd_clip_encode_text(clip, c->env ? c->env->mm : NULL, node_in_str_at(c, BOX_TEXT),
                                 &enc, &e);
    if (rc < 0)
        return node_fail_err(c, rc, &e);
    const struct sd_cond_entry *en = &enc->entries[0];
    if (!en->pooled || en->pooled_dim != g->a.in_dim) {
        int pd = en->pooled ? en->pooled_dim : 0;
        sd_cond_free(enc);
        return node_fail(c, "RuntimeError",
                         "this GLIGEN model takes %d-wide text embeddings but the CLIP's pooled "
                         "output is %d wide (a GLIGEN model for another model type?)",
                         g->a.in_dim, pd);
    }
    rc = add_box(to, g, en->pooled, box, &out, &e);
    sd_cond_free(enc);
    if (rc < 0)
        return node_fail_code(c, rc, "RuntimeError", "%s", e.msg);
    node_set_output(c, 0, sd_cond_value(out));
    return 0;
}

const struct node_class sd_gligen_textbox_apply = {
    .name = "GLIGENTextBoxApply",
    .display_name = "GLIGENTextBoxApply",
    .category = "conditioning/gligen",
    .inputs = box_inputs,
    .n_inputs = BOX_N,
    .outputs = box_outputs,
    .run = box_run,
};

/*
 * The Union ControlNet's own parts (see controlnet.h): the control-type embedding added
 * to the time embedding, union_controlnet_merge on the encoded hint, their tensors in
 * the layout, and ComfyUI's type list.
 *
 * cldm.py fixes the merge's width at 320 (num_trans_channel, num_proj_channel) because
 * the SDXL trunk it was made for is 320 wide; the guided hint it is added to is
 * model_ch wide, so the layout ties both to model_ch (a shrunk test file stays
 * consistent) and the loader checks it.
 */
#include <stdio.h>
#include <string.h>

#include "controlnet_impl.h"

const char *const controlnet_union_type_options[CONTROLNET_UNION_TYPES + 2] = {
    "auto", /* SetUnionControlNetType's first choice: no type */
    "openpose",
    "depth",
    "hed/pidi/scribble/ted",
    "canny/lineart/anime_lineart/mlsd",
    "normal",
    "segment",
    "tile",
    "repaint",
    NULL,
};
const char *const *const controlnet_union_type_names = controlnet_union_type_options + 1;

void controlnet__union_keys(struct key_walk *w, int model_ch, int union_types)
{
    int64_t c = model_ch, te = 4 * (int64_t)model_ch;
    key__layer(w, "control_add_embedding");
    key__wb(w, "control_add_embedding.linear_1",
            KEY_SHAPE(te, (int64_t)union_types * CONTROLNET_UNION_EMBED_DIM));
    key__wb(w, "control_add_embedding.linear_2", KEY_SHAPE(te, te));
    key__layer(w, "union_merge");
    key__emit(w, MODEL_INIT_EMBED, KEY_SHAPE(union_types, c), "task_embedding");
    key__norm(w, "transformer_layes.0.ln_1", c);
    key__wb(w, "transformer_layes.0.attn.in_proj", KEY_SHAPE(3 * c, c));
    key__wb(w, "transformer_layes.0.attn.out_proj", KEY_SHAPE(c, c));
    key__norm(w, "transformer_layes.0.ln_2", c);
    key__wb(w, "transformer_layes.0.mlp.c_fc", KEY_SHAPE(4 * c, c));
    key__wb(w, "transformer_layes.0.mlp.c_proj", KEY_SHAPE(c, 4 * c));
    key__wb(w, "spatial_ch_projs", KEY_SHAPE(c, c));
}

int controlnet__union_check_type(const struct controlnet *cn, int control_type, struct err *e)
{
    if (control_type < -1 || control_type >= CONTROLNET_UNION_TYPES)
        return err_set(e, ERR_INVALID, "unknown Union ControlNet control type %d", control_type);
    if (cn->union_types && control_type >= cn->union_types)
        return err_set(e, ERR_INVALID,
                       "Control type %s(%d) is out of range for the number of control "
                       "types(%d) supported.\nPlease consider using the ProMax ControlNet Union "
                       "model.\nhttps://huggingface.co/xinsir/controlnet-union-sdxl-1.0/tree/main",
                       controlnet_union_type_names[control_type], control_type, cn->union_types);
    return 0;
}

int controlnet__union_add_embedding(struct nn_w *w, struct dev *d, int union_types,
                                    int control_type, struct tensor *temb, struct err *e)
{
    const struct tensor *w1, *b1, *w2, *b2;
    struct tensor *emb = NULL, *flat = NULL, *h = NULL, *o = NULL;
    float types[CONTROLNET_UNION_TYPES] = {0};
    int64_t te = temb->shape[1];
    int rc;
    if (control_type >= 0) /* c_type[control_type] = 1.0 */
        types[control_type] = 1.0f;
    NN_W(w1, w, "control_add_embedding.linear_1.weight");
    NN_W(b1, w, "control_add_embedding.linear_1.bias");
    NN_W(w2, w, "control_add_embedding.linear_2.weight");
    NN_W(b2, w, "control_add_embedding.linear_2.bias");
    NN_TRY(nn__new(d, &emb, e, 2, (int64_t)union_types, (int64_t)CONTROLNET_UNION_EMBED_DIM));
    NN_TRY(tensor_timestep_embedding(emb, types, union_types, e));
    NN_TRY(tensor_reshape(emb, 2,
                          (const int64_t[]){1, (int64_t)union_types * CONTROLNET_UNION_EMBED_DIM},
                          &flat, e));
    NN_TRY(nn__new(d, &h, e, 2, (int64_t)1, te));
    NN_TRY(tensor_linear(h, flat, w1, b1, e));
    NN_TRY(tensor_silu(h, h, e));
    NN_TRY(nn__new(d, &o, e, 2, (int64_t)1, te));
    NN_TRY(tensor_linear(o, h, w2, b2, e));
    NN_TRY(tensor_add(temb, temb, o, e)); /* [1, TE] broadcast over the batch */
fail:
    tensor_free(emb);
    tensor_free(flat);
    tensor_free(h);
    tensor_free(o);
    return rc;
}

/* x [B, 1, C] += f(x) for the layer's two residual branches (pre-norm, as CLIP's). */
static int merge_layer(struct nn_w *w, struct dev *d, struct tensor *x, struct err *e)
{
    const struct tensor *l1w, *l1b, *inw, *inb, *ow, *ob, *l2w, *l2b, *fw, *fb, *pw, *pb;
    struct tensor *xn = NULL, *qkv = NULL, *q = NULL, *k = NULL, *v = NULL, *a = NULL,
                  *o = NULL, *f = NULL;
    int64_t b = x->shape[0], c = x->shape[2];
    int rc;
    NN_W(l1w, w, "transformer_layes.0.ln_1.weight");
    NN_W(l1b, w, "transformer_layes.0.ln_1.bias");
    NN_W(inw, w, "transformer_layes.0.attn.in_proj.weight");
    NN_W(inb, w, "transformer_layes.0.attn.in_proj.bias");
    NN_W(ow, w, "transformer_layes.0.attn.out_proj.weight");
    NN_W(ob, w, "transformer_layes.0.attn.out_proj.bias");
    NN_W(l2w, w, "transformer_layes.0.ln_2.weight");
    NN_W(l2b, w, "transformer_layes.0.ln_2.bias");
    NN_W(fw, w, "transformer_layes.0.mlp.c_fc.weight");
    NN_W(fb, w, "transformer_layes.0.mlp.c_fc.bias");
    NN_W(pw, w, "transformer_layes.0.mlp.c_proj.weight");
    NN_W(pb, w, "transformer_layes.0.mlp.c_proj.bias");
    /* x + attn(ln_1(x)): q, k, v split from one projection (OptimizedAttention) */
    NN_TRY(nn__new(d, &xn, e, 3, b, (int64_t)1, c));
    NN_TRY(tensor_layer_norm(xn, x, l1w, l1b, 1e-5f, e));
    NN_TRY(nn__new(d, &qkv, e, 3, b, (int64_t)1, 3 * c));
    NN_TRY(tensor_linear(qkv, xn, inw, inb, e));
    NN_TRY(tensor_slice(qkv, 2, 0, c, &q, e));
    NN_TRY(tensor_slice(qkv, 2, c, c, &k, e));
    NN_TRY(tensor_slice(qkv, 2, 2 * c, c, &v, e));
    NN_TRY(nn__new(d, &a, e, 3, b, (int64_t)1, c));
    NN_TRY(tensor_attention(a, q, k, v, CONTROLNET_UNION_HEADS, 0.0f, 0, e));
    NN_TRY(nn__new(d, &o, e, 3, b, (int64_t)1, c));
    NN_TRY(tensor_linear(o, a, ow, ob, e));
    NN_TRY(tensor_add(x, x, o, e));
    /* x + mlp(ln_2(x)), QuickGELU between */
    NN_TRY(tensor_layer_norm(xn, x, l2w, l2b, 1e-5f, e));
    NN_TRY(nn__new(d, &f, e, 3, b, (int64_t)1, 4 * c));
    NN_TRY(tensor_linear(f, xn, fw, fb, e));
    NN_TRY(tensor_quick_gelu(f, f, e));
    NN_TRY(tensor_linear(o, f, pw, pb, e));
    NN_TRY(tensor_add(x, x, o, e));
fail:
    tensor_free(xn);
    tensor_free(qkv);
    tensor_free(q);
    tensor_free(k);
    tensor_free(v);
    tensor_free(a);
    tensor_free(o);
    tensor_free(f);
    return rc;
}

int controlnet__union_merge(struct nn_w *w, struct dev *d, int control_type, struct tensor *g,
                            struct err *e)
{
    const struct tensor *task, *sw, *sb;
    struct tensor *g3 = NULL, *ones = NULL, *x = NULL, *row = NULL, *alpha = NULL, *a4 = NULL;
    int64_t b = g->shape[0], c = g->shape[1], hw = g->shape[2] * g->shape[3];
    int rc;
    NN_W(task, w, "task_embedding");
    if (task->shape[1] != c)
        return err_set(e, ERR_INVALID, "controlnet: task_embedding is %lld wide, the hint %lld",
                       (long long)task->shape[1], (long long)c);
    /* feat_seq = mean(cond, dims (2, 3)): a product with a row of 1/hw, [B, C, 1] */
    NN_TRY(tensor_reshape(g, 3, (const int64_t[]){b, c, hw}, &g3, e));
    NN_TRY(nn__new(d, &ones, e, 2, (int64_t)1, hw));
    NN_TRY(tensor_fill(ones, 1.0f / (float)hw, e));
    NN_TRY(nn__new(d, &x, e, 3, b, c, (int64_t)1));
    NN_TRY(tensor_linear(x, g3, ones, NULL, e));
    NN_TRY(tensor_reshape(x, 3, (const int64_t[]){b, 1, c}, &row, e)); /* a sequence of one */
    tensor_free(x);
    x = row;
    row = NULL;
    NN_TRY(tensor_slice(task, 0, control_type, 1, &row, e)); /* += task_embedding[type] */
    NN_TRY(tensor_add(x, x, row, e));
    NN_TRY(merge_layer(w, d, x, e));
    /* the layer released no weights of this scope: spatial_ch_projs is in the same one */
    NN_W(sw, w, "spatial_ch_projs.weight");
    NN_W(sb, w, "spatial_ch_projs.bias");
    NN_TRY(nn__new(d, &alpha, e, 3, b, (int64_t)1, c));
    NN_TRY(tensor_linear(alpha, x, sw, sb, e));
    NN_TRY(tensor_reshape(alpha, 4, (const int64_t[]){b, c, 1, 1}, &a4, e));
    NN_TRY(tensor_add(g, g, a4, e)); /* condition_list[0] + alpha, per channel */
fail:
    tensor_free(g3);
    tensor_free(ones);
    tensor_free(x);
    tensor_free(row);
    tensor_free(alpha);
    tensor_free(a4);
    return rc;
}

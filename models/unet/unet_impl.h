/*
 * Private to models/ (unet.c and the ControlNet, models/controlnet/): the UNet walk with
 * the hooks a ControlNet needs to run the UNet's input and middle blocks as its trunk.
 *
 * A ControlNet (ComfyUI's cldm.ControlNet) is the UNet's time embedding, input blocks
 * and middle block with other weights, plus a hint added after the first input block
 * and a 1x1 "zero conv" on every input block's output and on the middle's. Rather than
 * a second copy of the blocks, the walk stops after the middle block and hands each
 * of those outputs to the caller, with the walk's weight scope so that the caller's
 * weights are acquired in the same one-layer-at-a-time order (patcher.h).
 *
 * Threads: executor thread only.
 */
#ifndef LATENTD_MODELS_UNET_IMPL_H
#define LATENTD_MODELS_UNET_IMPL_H

#include "nn.h"
#include "unet.h"

struct unet_hooks {
    const char *prefix; /* weight key prefix ("control_model.", "") */
    /*
     * After input block i (0-based; h is the skip it pushes, and what the next block
     * reads: changes in place reach both). w is the walk's weight scope.
     */
    int (*on_skip)(void *user, struct nn_w *w, int i, struct tensor *h, struct err *e);
    /*
     * After the time embedding's second linear, before label_emb's part and the SiLU
     * (temb [B, 4 model_ch], changed in place): a Union ControlNet adds its
     * control-type embedding there (cldm.py: emb += control_add_embedding(...)).
     * Optional (NULL: nothing).
     */
    int (*on_temb)(void *user, struct nn_w *w, struct tensor *temb, struct err *e);
    /* After the middle block; the walk then ends (no output side, eps unused). */
    int (*on_middle)(void *user, struct nn_w *w, struct tensor *h, struct err *e);
    void *user;
};

/* A ResBlock's modules in ldm and diffusers naming ({"in_layers.0", "norm1"}, ...), for
 * the name maps of diffusers-format files (LoRA, ControlNet). */
#define UNET_RES_MODULES 6
extern const char *const unet__res_diffusers[UNET_RES_MODULES][2];

/*
 * The UNet walk (unet_eval's contract) with optional control residuals and hooks
 * (either NULL). With hooks the walk is a ControlNet trunk: eps may be NULL.
 */
int unet__eval(struct patcher *p, const struct unet_arch *a, const struct tensor *x,
               const float *t, const struct tensor *ctx, const struct tensor *y,
               const struct unet_control *control, const struct unet_patches *patches,
               const struct unet_hooks *hooks,
               struct tensor *eps, struct model_probe *probe, struct err *e);

#endif

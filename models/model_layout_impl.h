/*
 * Private to the layout walks (model_layout.c, text/, unet/ and vae/ *_layout.c):
 * a walk emits each tensor of one component with its prefix and patcher layer.
 */
#ifndef LATENTD_MODELS_MODEL_LAYOUT_IMPL_H
#define LATENTD_MODELS_MODEL_LAYOUT_IMPL_H

#include <stdint.h>

#include "model_config.h"

struct key_walk {
    void (*fn)(void *user, const struct model_key *k);
    void *user;
    size_t n;
    enum model_component comp;
    const char *prefix;
    char layer[48]; /* the layer the next keys belong to (key__layer) */
};

/* Set the patcher layer of the keys emitted next. */
void key__layer(struct key_walk *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* One tensor named prefix + fmt. */
void key__emit(struct key_walk *w, enum model_init init, int ndim, const int64_t *shape,
               const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* name.weight [shape] and name.bias [shape[0]]. */
void key__wb(struct key_walk *w, const char *name, int ndim, const int64_t *shape);
/* A norm's name.weight (gamma) and name.bias (beta), both [c]. */
void key__norm(struct key_walk *w, const char *name, int64_t c);
void key__name(char *out, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#define KEY_S(...) ((const int64_t[]){__VA_ARGS__})
#define KEY_SHAPE(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), KEY_S(__VA_ARGS__)

/* The per-component walks. */
void text__walk(struct key_walk *w, const struct text_arch *a);
void unet__walk(struct key_walk *w, const struct unet_arch *a);
/* The UNet's time embedding, input and middle blocks (a ControlNet's trunk); after(...)
 * follows each input block's last block (skip = its index) and the middle's (skip -1). */
struct unet_block;
void unet__walk_trunk(struct key_walk *w, const struct unet_arch *a,
                      void (*after)(struct key_walk *w, const struct unet_block *b, int skip,
                                    void *user),
                      void *user);
void vae__walk(struct key_walk *w, const struct vae_arch *a);

#endif

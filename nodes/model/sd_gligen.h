/*
 * sd_gligen — private to nodes/sd_*.c: the GLIGEN link type and the "gligen" entry a
 * conditioning carries (ComfyUI's ("position", gligen model, position params) tuple that
 * GLIGENTextBoxApply appends to), and its run during one UNet call (models/gligen).
 *
 *   GLIGEN   a loaded struct gligen (gligen.h), refcounted, shared by its values.
 *   entry    struct sd_gligen: the model and the text boxes (each a pooled CLIP
 *            embedding and a latent-unit box), immutable once made and refcounted, so
 *            conditioning copies share it; the sampler batches entries together only
 *            when they carry the same one.
 *
 * At each UNet call the position net turns the boxes into object tokens for the call's
 * latent size (Gligen.set_position, per call as ComfyUI's get_area_and_mult builds
 * it), and every transformer block's middle patch runs the fuser of its
 * SpatialTransformer on them.
 *
 * Threads: the executor thread; the refcounts may drop on any thread.
 */
#ifndef LATENTD_NODES_SD_GLIGEN_H
#define LATENTD_NODES_SD_GLIGEN_H

#include <stdatomic.h>

#include "gligen.h"
#include "node_value.h"

struct sd_gligen {
    struct gligen *g;              /* owned reference */
    int n;                         /* boxes, <= GLIGEN_MAX_OBJS */
    float *pooled;                 /* owned, [n, g->a.in_dim] */
    struct gligen_box box[GLIGEN_MAX_OBJS]; /* latent units; .pooled points into pooled */
    atomic_int _refs;
};

/* The GLIGEN value over g (a reference is taken) and its model (borrowed; NULL if v is
 * not one). */
struct value *sd_gligen_model_value(struct gligen *g);
struct gligen *sd_gligen_model_of(const struct value *v);

/*
 * GLIGENTextBoxApply's entry: prev's boxes (prev may be NULL) then one more, the pooled
 * text embedding `pooled` [g->a.in_dim] at (h, w, y, x) latent units, over model g (a
 * reference is taken: the new model replaces prev's, as ComfyUI's tuple does).
 * ERR_INVALID past GLIGEN_MAX_OBJS boxes; *out has one reference.
 */
int sd_gligen_append(const struct sd_gligen *prev, struct gligen *g, const float *pooled,
                     int h, int w, int y, int x, struct sd_gligen **out, struct err *e);
void sd_gligen_ref(struct sd_gligen *s);
void sd_gligen_unref(struct sd_gligen *s); /* NULL is a no-op */

/* One UNet call's GLIGEN work: the object tokens, on the model's device. */
struct sd_gligen_run {
    struct gligen *g;     /* borrowed */
    struct tensor *objs;  /* owned, [batch, GLIGEN_MAX_OBJS, key_dim] */
};

/* The object tokens of s for a call of `batch` samples over an h x w latent; the GLIGEN
 * model must be loaded. Release with sd_gligen_run_release (also after a failure). */
int sd_gligen_run_begin(const struct sd_gligen *s, int batch, int h, int w,
                        struct sd_gligen_run *run, struct err *e);
void sd_gligen_run_release(struct sd_gligen_run *run);

/* The UNet's middle patch (unet_patches.middle) for run (user: the run). */
int sd_gligen_run_middle(void *user, int st, struct tensor *x, struct err *e);

#endif

/*
 * sd_control — private to nodes/sd_*.c: the CONTROL_NET link type and the control a
 * conditioning entry carries (ComfyUI's ControlNet / T2IAdapter object after
 * set_cond_hint, comfy/controlnet.py), and its evaluation at one sampler step.
 *
 *   CONTROL_NET  struct sd_cnet: a ControlNet (models/controlnet/controlnet.h) or a
 *                T2I-Adapter (t2i_adapter.h), with the Union control type
 *                SetUnionControlNetType set (ComfyUI's copy + set_extra_arg). Immutable
 *                and refcounted; the model is shared between copies.
 *   control      struct sd_control: a CONTROL_NET with its hint image, strength and
 *                start/end percent, chained to the control the entry had before
 *                (previous_controlnet). Immutable once made (but for the caches below)
 *                and refcounted, so that conditioning copies share it: the sampler
 *                batches entries together only when they carry the same control
 *                (ComfyUI's objects_concatable).
 *
 * At each model call the chain is evaluated oldest first; a control whose percent
 * window excludes the step's sigma passes the previous residuals on (get_control).
 * As ControlBase's cond_hint, the hint is resized once per target size, not per step;
 * a T2I-Adapter's features, which depend on the hint alone, are computed once per size
 * too (T2IAdapter's control_input). Both caches are host memory, kept with the control
 * (ComfyUI drops them at cleanup; here a later sampling at the same size reuses them)
 * and guarded by the control's lock.
 *
 * Threads: the executor thread; sd_control_ref / sd_control_unref any thread.
 */
#ifndef LATENTD_NODES_SD_CONTROL_H
#define LATENTD_NODES_SD_CONTROL_H

#include <pthread.h>
#include <stdatomic.h>

#include "control_lora.h"
#include "controlnet.h"
#include "model_config.h"
#include "node_value.h"
#include "sampling_sched.h"
#include "t2i_adapter.h"

struct sd_cnet {
    struct controlnet *cn;     /* owned reference, or NULL */
    struct t2i_adapter *t2i;   /* owned reference, or NULL */
    struct control_lora *lora; /* owned reference, or NULL: exactly one of the three is set */
    int control_type;          /* a Union's type (0..7), -1: none ("auto") */
    int global_average_pooling; /* a "_shuffle" ControlNet: residuals are their spatial mean */
    atomic_int _refs;
    /* a Control-LoRA's ControlNet, made for one UNet (sd_control_prepare), under _lock */
    pthread_mutex_t _lock;
    struct controlnet *_made;          /* owned reference, or NULL */
    struct patcher_model *_made_for;   /* owned reference: the UNet weights it was made of */
};

/* A CONTROL_NET over cn, t2i or lora (a reference is taken) with control_type; one
 * reference. */
struct sd_cnet *sd_cnet_new(struct controlnet *cn, struct t2i_adapter *t2i,
                            struct control_lora *lora, int control_type);
void sd_cnet_unref(struct sd_cnet *n); /* NULL is a no-op */

/* The CONTROL_NET value (takes the reference) and its payload (borrowed; NULL if not one). */
struct value *sd_cnet_value(struct sd_cnet *n);
const struct sd_cnet *sd_cnet_of(const struct value *v);

/* The host copy of the features of one T2I-Adapter evaluation (slot i < n_input: input
 * block i, NULL where none; middle). */
struct sd_t2i_feats {
    float *input[UNET_MAX_BLOCKS]; /* owned, [hb, c, h, w] */
    int64_t shape[UNET_MAX_BLOCKS][4];
    int n_input;
    float *middle; /* owned, or NULL */
    int64_t mshape[4];
};

struct sd_control {
    struct sd_cnet *net;     /* owned reference */
    float *hint;             /* owned, [hb, hc, hh, hw]: the IMAGE moved to channels first */
    int hb, hc, hh, hw;
    float strength;
    double start, end;       /* timestep_percent_range */
    int apply_to_uncond;     /* ControlNetApply (OLD): also for negatives without one */
    struct sd_control *prev; /* owned reference, or NULL */
    atomic_int _refs;
    /* caches (see above), under _lock */
    pthread_mutex_t _lock;
    float *_resized;         /* owned, [hb, hc', _rh, _rw] (hc' 1 for a 1-channel adapter) */
    int _rh, _rw;
    struct sd_t2i_feats _feats; /* a T2I-Adapter's, for the _rh x _rw hint; valid with _have */
    int _have_feats;
};

/*
 * A control over `net` (a reference is taken) with the hint image [b, h, w, c] (channels
 * last, 0..1; the first min(c, hint channels) are kept, as cldm's conv needs, all of them
 * for a 1-channel T2I-Adapter, which takes their mean) and `prev` (a reference is taken;
 * may be NULL). ERR_DEVICE_OOM when the hint copy does not fit in host memory; *out has
 * one reference.
 */
int sd_control_new(const struct sd_cnet *net, const struct value *image, float strength,
                   double start, double end, struct sd_control *prev, struct sd_control **out,
                   struct err *e);
void sd_control_ref(struct sd_control *c);
void sd_control_unref(struct sd_control *c); /* NULL is a no-op */

/* ComfyUI's percent_to_sigma for a discrete (SD) model: 0 -> 999999999.9, 1 -> 0, else
 * the sigma at timestep (1 - percent) * 999. */
double sd_control_percent_to_sigma(const struct sampling_discrete *ms, double percent);

/* Whether c's window takes a step at sigma (get_control's timestep_range test). */
int sd_control_active(const struct sd_control *c, const struct sampling_discrete *ms,
                      float sigma);

/*
 * The chain's residuals for one model call: x, t, ctx, y as the UNet gets them (on the
 * ControlNets' device, y NULL without an ADM input), per_batch the latent batch (the
 * hint's broadcast unit: sample i takes hint image (i % per_batch) % hb). *out is
 * filled (empty when no control of the chain is active; release with
 * controlnet_out_release, also after a failure).
 */
int sd_control_eval(const struct sd_control *c, const struct sampling_discrete *ms, float sigma,
                    const struct tensor *x, const float *t, const struct tensor *ctx,
                    const struct tensor *y, int per_batch, struct controlnet_out *out,
                    struct err *e);

/* Make the ControlNets of the chain's Control-LoRAs for the UNet `unet` of `cfg` (once
 * per UNet weights: ControlLora.pre_run); a no-op for the other kinds. Before the calls
 * below, which take a Control-LoRA's made ControlNet. */
int sd_control_prepare(const struct sd_control *c, struct patcher *unet,
                       const struct model_config *cfg, struct err *e);

/* The model a control runs (the planner loads it with the UNet). */
struct patcher *sd_control_patcher(const struct sd_control *c);

/* Whether c's model fits a UNet of `cfg` (family and the widths it adds to); ERR_INVALID
 * with a message if not. */
int sd_control_fits(const struct sd_control *c, const struct model_config *cfg,
                    struct err *e);

/* Activation bytes of c's own evaluation at these latent shapes (plan). */
size_t sd_control_plan_bytes(const struct sd_control *c, int b, int h, int w, int t);

/* How many times a control's hint was resized (all controls, since start): for tests of
 * the once-per-size cache. */
long sd_control_resize_count(void);

#endif

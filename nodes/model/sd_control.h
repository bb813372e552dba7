/*
 * sd_control — private to nodes/sd_*.c: the CONTROL_NET link type and the control a
 * conditioning entry carries (ComfyUI's ControlNet object after set_cond_hint,
 * comfy/controlnet.py), and its evaluation at one sampler step.
 *
 *   CONTROL_NET  struct controlnet (models/controlnet/controlnet.h), refcounted.
 *   control      struct sd_control: a ControlNet with its hint image, strength and
 *                start/end percent, chained to the control the entry had before
 *                (previous_controlnet). Immutable once made and refcounted, so that
 *                conditioning copies share it: the sampler batches entries together
 *                only when they carry the same control (ComfyUI's objects_concatable).
 *
 * At each model call the chain is evaluated oldest first; a control whose percent
 * window excludes the step's sigma passes the previous residuals on (get_control).
 *
 * Threads: the executor thread; sd_control_ref / sd_control_unref any thread.
 */
#ifndef LATENTD_NODES_SD_CONTROL_H
#define LATENTD_NODES_SD_CONTROL_H

#include <stdatomic.h>

#include "controlnet.h"
#include "node_value.h"
#include "sampling_sched.h"

struct sd_control {
    struct controlnet *cn;   /* owned reference */
    float *hint;             /* owned, [hb, hc, hh, hw]: the IMAGE moved to channels first */
    int hb, hc, hh, hw;
    float strength;
    double start, end;       /* timestep_percent_range */
    int apply_to_uncond;     /* ControlNetApply (OLD): also for negatives without one */
    struct sd_control *prev; /* owned reference, or NULL */
    atomic_int _refs;
};

/*
 * A control over `cn` (a reference is taken) with the hint image [b, h, w, c] (channels
 * last, 0..1; the first hc = min(c, cn->hint_ch) channels are used, as cldm's conv needs)
 * and `prev` (a reference is taken; may be NULL). ERR_DEVICE_OOM when the hint copy does
 * not fit in host memory; *out has one reference.
 */
int sd_control_new(struct controlnet *cn, const struct value *image, float strength,
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

/* The CONTROL_NET value (takes the reference) and its payload (borrowed; NULL if not one). */
struct value *sd_controlnet_value(struct controlnet *cn);
struct controlnet *sd_controlnet_of(const struct value *v);

#endif

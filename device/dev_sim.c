/*
 * dev_sim.c — the simulated device: host memory behind a hard byte budget, with
 * one copy thread per copy stream (dev_hostq.c), so that every planner and
 * streaming decision runs, and overlaps for real, on a machine without a GPU.
 *
 * Its memory is host-addressable (CPU kernels compute on it); what makes it a
 * "device" is the budget, enforced exactly by device.c, and the asynchronous copy
 * streams. mem_info reports the budget as total and budget - used as free.
 */
#include "dev_backend.h"

#include <stdio.h>

extern const struct dev_ops dev__host_ops;

static struct dev_ops sim_ops;

static int sim_mem_info(struct dev *d, size_t *free_bytes, size_t *total_bytes)
{
    size_t used = atomic_load(&d->used);
    *total_bytes = d->budget;
    *free_bytes = d->budget > used ? d->budget - used : 0;
    return 0;
}

int dev__sim_open(struct dev *d, size_t sim_bytes, struct err *e)
{
    (void)e;
    /* Built at first open from the host ops: same memory and copies, other mem_info. */
    if (!sim_ops.alloc) {
        sim_ops = dev__host_ops;
        sim_ops.mem_info = sim_mem_info;
    }
    d->ops = &sim_ops;
    d->kind = DEV_KIND_SIM;
    if (sim_bytes < d->budget)
        d->budget = sim_bytes;
    snprintf(d->name, sizeof(d->name), "sim");
    d->impl = dev__hostq_new(1);
    return 0;
}

/*
 * mm_pages.c — which file pages of the weights stay mapped in this process (issue 15).
 *
 * On the cpu device weights are used in place from the checkpoint's mapping, and every
 * page a model has read counts in the process's RSS for as long as it stays mapped.
 * Before this, a txt2img run kept CLIP's, the UNet's and the VAE's pages mapped to the
 * end: the 256^2 VAE decode peaked at 2456 MiB, 2045 MiB of them file pages, with the
 * 1.6 GiB UNet idle (full-size SD1.5 f16, bench_txt2img's cold child, sampled from
 * /proc/PID/smaps_rollup).
 *
 * The rule, applied by mm_load_models once the node's models are loaded:
 *   - a model used in place (cpu device) that the node does not name has its pages
 *     unmapped: the UNet's phase carries no CLIP pages, the VAE's no UNet pages;
 *   - a model named by the node on a device with its own copies (cuda, sim) has its
 *     pages unmapped right after the upload, except those of layers the streamer reads
 *     from the host copy on every pass (direct streaming, no pack);
 *   - an unloaded model has its pages unmapped.
 * Only weights the loader declared file-backed are touched (patcher_model_set_file_backed,
 * util/pages.h's invariant). The pages stay in the page cache: using the model again maps
 * them back with minor faults and no I/O. That is the price of the rule: a second prompt
 * maps the CLIP and UNet pages again, measured for the UNet's 1.6 GiB at 0.09 s when the
 * file came into the page cache by being read (large folios) and 1.3-1.9 s on this
 * project's VM when it is there from being written (4 KiB pages; README, "Memory on the
 * CPU"). --highvram / --gpu-only (keep models loaded, as in ComfyUI) turn the rule off, as
 * do LATENTD_WEIGHT_PAGES=keep and mm_config.keep_weight_pages for A/B runs. Prefaulting
 * with MADV_POPULATE_READ was measured and does not help: the cost on this VM is the first
 * touch of each re-mapped page, not the fault.
 *
 * Threads: executor only (as the planner).
 */
#include <stdint.h>

#include "alloc.h"
#include "log.h"
#include "mm_plan.h"
#include "pages.h"

/* Unmap the pages of one run of addresses; a run is flushed when the next weight does
 * not continue it (weights of a layer are mostly adjacent in the file). */
struct run {
    uintptr_t a, b;
};

static void run_flush(struct run *r)
{
    if (r->b > r->a)
        (void)pages_drop((const void *)r->a, (size_t)(r->b - r->a)); /* advice only */
    r->a = r->b = 0;
}

size_t pm__drop_pages(struct patcher_model *m, const unsigned char *keep)
{
    struct run r = {0, 0};
    size_t bytes = 0;
    for (int i = 0; i < m->nlayers; i++) {
        if (keep && keep[i])
            continue;
        const struct pm_layer *L = &m->layers[i];
        for (int j = 0; j < L->nw; j++) {
            const struct pm_weight *w = &L->w[j];
            if (!w->file_pages)
                continue;
            uintptr_t a = (uintptr_t)w->host, b = a + w->host_bytes;
            if (r.b > r.a && a >= r.a && a <= r.b) {
                r.b = b > r.b ? b : r.b;
            } else {
                run_flush(&r);
                r.a = a;
                r.b = b;
            }
            bytes += w->host_bytes;
        }
    }
    run_flush(&r);
    return bytes;
}

size_t patcher_model_drop_pages(struct patcher_model *m)
{
    size_t n = pm__drop_pages(m, NULL);
    m->pages_live = 0;
    return n;
}

static int named(const struct mm_request *req, const struct patcher_model *m)
{
    for (int i = 0; i < req->n_models; i++)
        if (req->models[i] && req->models[i]->model == m)
            return 1;
    return 0;
}

void mm__drop_idle_pages(struct mm *mm, const struct mm_request *req)
{
    if (mm->cfg.keep_weight_pages)
        return;
    for (int i = 0; i < mm->nloaded; i++) {
        struct patcher_model *m = mm->loaded[i];
        if (!m->pages_live)
            continue;
        if (m->zero_copy) {
            if (named(req, m))
                continue;
            size_t n = patcher_model_drop_pages(m);
            if (n)
                log_info("unmapped the weight pages of '%s' (%zu MiB, kept in the page cache)",
                         m->name, n >> 20);
            continue;
        }
        if (!named(req, m))
            continue; /* dropped after its own upload already */
        /* Its device copies are filled: only direct streaming still reads the host. */
        int direct = m->st && mm__stream_pack_bytes(m->st) == 0;
        unsigned char *keep = NULL;
        if (direct) {
            keep = xcalloc((size_t)(m->nlayers ? m->nlayers : 1), 1);
            for (int l = 0; l < m->nlayers; l++)
                keep[l] = !m->layers[l].resident;
        }
        pm__drop_pages(m, keep);
        m->pages_live = direct;
        xfree(keep);
    }
}

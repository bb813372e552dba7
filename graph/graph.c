/*
 * The graph context: configuration, the node registry, the interrupt flag, the
 * output cache, and the small entry points of graph.h that are not validation or
 * execution (those live in graph_validate.c and graph_exec.c).
 */
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "graph_internal.h"
#include "memmgr.h"
#include "node_builtin.h"

struct graph_ctx *graph_new(const struct graph_config *cfg, struct err *e)
{
    if (!cfg)
        return err_set(e, ERR_INVALID, "no configuration"), NULL;
    struct graph_ctx *g = xcalloc(1, sizeof(*g));
    g->cfg = *cfg;
    if (g->cfg.cache_mode == GRAPH_CACHE_LRU && g->cfg.cache_lru_size <= 0) {
        xfree(g);
        err_set(e, ERR_INVALID, "cache size for '--cache-lru' must be positive");
        return NULL;
    }
    if (g->cfg.preview_size <= 0)
        g->cfg.preview_size = 512;
    g->env.models_dir = cfg->models_dir;
    g->env.input_dir = cfg->input_dir;
    g->env.output_dir = cfg->output_dir;
    g->env.temp_dir = cfg->temp_dir;
    g->env.disable_metadata = cfg->disable_metadata;
    /* With --preview-method none no binary frames go out, so samplers need not
     * build preview images at all (KSampler skips them when preview_size is 0). */
    g->env.preview_size = g->cfg.preview_method == GRAPH_PREVIEW_NONE ? 0 : g->cfg.preview_size;
    atomic_init(&g->interrupt, 0);
    /* The memory manager opens the compute device (memory/memmgr.h); nodes reach it
     * through node_env.mm. */
    struct mm *mm = NULL;
    if (mm_new(cfg->mm, &mm, e) < 0) {
        xfree(g);
        return NULL;
    }
    g->cfg.mm = NULL; /* borrowed for this call only */
    g->mm = mm;
    g->env.mm = mm;
    g->reg = node_registry_new();
    node_registry_add_builtins(g->reg);
    gcache_init(&g->cache);
    return g;
}

void graph_free(struct graph_ctx *g)
{
    if (!g)
        return;
    gcache_release(&g->cache);
    graph__instances_free(g);
    graph__run_arrays_free(g);
    node_registry_free(g->reg);
    mm_free(g->mm); /* after the cache: cached MODEL values may hold loaded models */
    xfree(g);
}

struct node_registry *graph_registry(struct graph_ctx *g)
{
    return g->reg;
}

void graph_interrupt(struct graph_ctx *g)
{
    atomic_store(&g->interrupt, 1);
}

void graph_free_memory(struct graph_ctx *g, int unload_models, int free_memory)
{
    if (free_memory)
        gcache_clear(&g->cache);
    if (unload_models)
        mm_unload_all(g->mm);
}

size_t graph_cache_count(struct graph_ctx *g)
{
    return g->cache.count;
}

/* MemTotal / MemAvailable from /proc/meminfo, bytes. */
static void ram_info(double *total, double *avail)
{
    *total = *avail = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return;
    char line[256];
    unsigned long long kb;
    while (fgets(line, sizeof(line), f)) {
        if (sscanf(line, "MemTotal: %llu kB", &kb) == 1)
            *total = (double)kb * 1024.0;
        else if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            *avail = (double)kb * 1024.0;
    }
    fclose(f);
}

cJSON *graph_device_stats(struct graph_ctx *g)
{
    /* comfy-api.md §3.9. CPU: vram = RAM. GPU and simulated devices: our
     * allocator's view (budget-capped); the "torch" pool is what we allocated. */
    struct dev *d = mm_device(g->mm);
    cJSON *o = cJSON_CreateObject();
    double total, avail, used = 0;
    if (dev_kind(d) == DEV_KIND_CPU) {
        ram_info(&total, &avail);
        cJSON_AddStringToObject(o, "name", "cpu");
        cJSON_AddStringToObject(o, "type", "cpu");
        cJSON_AddNullToObject(o, "index");
        used = avail;
    } else {
        struct mm_stats st;
        mm_stats(g->mm, &st);
        total = (double)st.vram_total;
        avail = (double)st.vram_free;
        used = (double)dev_bytes_used(d);
        const char *name = dev_name(d);
        if (dev_kind(d) == DEV_KIND_CUDA) {
            char buf[160];
            snprintf(buf, sizeof(buf), "%s : latentd", name);
            cJSON_AddStringToObject(o, "name", buf);
            cJSON_AddStringToObject(o, "type", "cuda");
            int idx = 0;
            if (sscanf(name, "cuda:%d", &idx) != 1)
                idx = 0;
            cJSON_AddNumberToObject(o, "index", idx);
        } else {
            cJSON_AddStringToObject(o, "name", name);
            cJSON_AddStringToObject(o, "type", "sim");
            cJSON_AddNullToObject(o, "index");
        }
    }
    cJSON_AddNumberToObject(o, "vram_total", total);
    cJSON_AddNumberToObject(o, "vram_free", avail);
    cJSON_AddNumberToObject(o, "torch_vram_total", dev_kind(d) == DEV_KIND_CPU ? total : used);
    cJSON_AddNumberToObject(o, "torch_vram_free", dev_kind(d) == DEV_KIND_CPU ? avail : 0);
    return o;
}

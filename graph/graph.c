/*
 * The graph context: configuration, the node registry, the interrupt flag, the
 * output cache, and the small entry points of graph.h that are not validation or
 * execution (those live in graph_validate.c and graph_exec.c).
 */
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "graph_internal.h"
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
    g->env.preview_size = g->cfg.preview_size;
    atomic_init(&g->interrupt, 0);
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
    node_registry_free(g->reg);
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
    (void)unload_models; /* TODO(graph): unload through memory/ once models exist */
    if (free_memory)
        gcache_clear(&g->cache);
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
    (void)g;
    /* CPU until the device layer is wired in: VRAM = RAM (comfy-api.md §3.9). */
    double total, avail;
    ram_info(&total, &avail);
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "name", "cpu");
    cJSON_AddStringToObject(d, "type", "cpu");
    cJSON_AddNullToObject(d, "index");
    cJSON_AddNumberToObject(d, "vram_total", total);
    cJSON_AddNumberToObject(d, "vram_free", avail);
    cJSON_AddNumberToObject(d, "torch_vram_total", total);
    cJSON_AddNumberToObject(d, "torch_vram_free", avail);
    return d;
}

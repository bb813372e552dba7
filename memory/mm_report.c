/*
 * mm_report.c — a node's memory plan and outcome as JSON (for /history meta or an
 * endpoint). Sizes in bytes, times in ms; names are plain model names (escaped).
 */
#include "mm_internal.h"

static void add_str(struct buf *b, const char *s)
{
    buf_addc(b, '"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            buf_printf(b, "\\%c", c);
        else if (c < 0x20)
            buf_printf(b, "\\u%04x", c);
        else
            buf_addc(b, (char)c);
    }
    buf_addc(b, '"');
}

void mm_report_json(const struct mm_report *r, struct buf *b)
{
    buf_adds(b, "{\"device\":");
    add_str(b, r->device);
    buf_printf(b,
               ",\"budget\":%zu,\"activation_bytes\":%zu,\"workspace_bytes\":%zu,"
               "\"patch_workspace_bytes\":%zu,\"bytes_unloaded\":%zu,\"models_unloaded\":%d,"
               "\"bytes_resident\":%zu,\"bytes_streamed\":%zu,\"bytes_loaded\":%zu,"
               "\"bytes_copied\":%zu,\"peak_bytes\":%zu,\"predicted_ms\":%.3f,"
               "\"load_ms\":%.3f,\"measured_ms\":%.3f,\"passes\":%d,\"measured_pass_ms\":%.3f,"
               "\"retried\":%s,\"models\":[",
               r->budget, r->activation_bytes, r->workspace_bytes, r->patch_workspace_bytes,
               r->bytes_unloaded, r->models_unloaded, r->bytes_resident, r->bytes_streamed,
               r->bytes_loaded, r->bytes_copied, r->peak_bytes, r->predicted_ms, r->load_ms,
               r->measured_ms, r->passes, r->measured_pass_ms, r->retried ? "true" : "false");
    for (int i = 0; i < r->n_models; i++) {
        const struct mm_model_plan *m = &r->models[i];
        buf_adds(b, i ? ",{\"name\":" : "{\"name\":");
        add_str(b, m->name);
        buf_printf(b,
                   ",\"layers\":%d,\"layers_resident\":%d,\"layers_streamed\":%d,"
                   "\"bytes_resident\":%zu,\"bytes_streamed\":%zu,\"ring_slots\":%d,"
                   "\"ring_bytes\":%zu,\"prefetch\":%d}",
                   m->layers, m->layers_resident, m->layers_streamed, m->bytes_resident,
                   m->bytes_streamed, m->ring_slots, m->ring_bytes, m->prefetch);
    }
    buf_adds(b, "]}");
}

/*
 * Static files: the web UI from the web root (--front-end-root, default: the source
 * tree's web/), including web/node_modules, because the UI loads litegraph from its npm
 * install ("node_modules/litegraph.js/build/litegraph.core.js" relative to /). For tools
 * that prefer a short path, /lib/litegraph/X maps to node_modules/litegraph.js/build/X.
 * Without a web/index.html, "/" serves a small placeholder page.
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "buf.h"
#include "srv_mime.h"
#include "srv_path.h"
#include "srv_req.h"

static const char placeholder[] =
    "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>latentd</title></head>\n"
    "<body><h1>latentd</h1><p>The ComfyUI-compatible API is up. No web UI is installed "
    "in the front-end root; the API lives under <code>/api/</code> "
    "(try <a href=\"/system_stats\">/system_stats</a>).</p></body></html>\n";

static int is_image_path(const char *p)
{
    static const char *const ext[] = {".png", ".jpg", ".jpeg", ".webp", ".bmp", ".tif",
                                      ".tiff", ".ppm", ".pgm", NULL};
    const char *dot = strrchr(p, '.');
    if (!dot)
        return 0;
    for (int i = 0; ext[i]; i++)
        if (strcasecmp(dot, ext[i]) == 0)
            return 1;
    return 0;
}

static void cache_headers(struct srv_req *r, const char *name, int found)
{
    size_t n = strlen(name);
    if (is_image_path(name)) {
        resp_header(r, "Cache-Control", found ? "public, max-age=86400" : "public, max-age=3600");
    } else if ((n > 3 && strcmp(name + n - 3, ".js") == 0) ||
               (n > 4 && strcmp(name + n - 4, ".css") == 0) ||
               (strncmp(name, "index", 5) == 0 && n > 5 && strcmp(name + n - 5, ".json") == 0)) {
        resp_header(r, "Cache-Control", "no-cache");
    }
}

void srv_static_serve(struct srv_req *r)
{
    const char *root = r->srv->cfg->web_dir;
    struct buf rel;
    buf_init(&rel);
    int start = 0;
    if (r->n_segs >= 2 && strcmp(r->segs[0], "lib") == 0 && strcmp(r->segs[1], "litegraph") == 0) {
        buf_adds(&rel, "node_modules/litegraph.js/build");
        start = 2;
    }
    for (int i = start; i < r->n_segs; i++) {
        const char *s = r->segs[i];
        /* A decoded segment may not smuggle a separator or climb. */
        if (strchr(s, '/') || strcmp(s, "..") == 0 || strcmp(s, ".") == 0) {
            buf_release(&rel);
            resp_error(r, 404, "not_found", "no such file");
            return;
        }
        if (!s[0])
            continue;
        if (rel.len)
            buf_addc(&rel, '/');
        buf_adds(&rel, s);
    }
    char *path = srv_path_join_inside(root, rel.len ? rel.ptr : NULL);
    struct stat st;
    int is_index = 0;
    if (path && stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        struct buf p;
        buf_init(&p);
        buf_printf(&p, "%s/index.html", path);
        xfree(path);
        path = srv_path_join_inside(root, p.ptr + strlen(root) + 1);
        buf_release(&p);
        is_index = 1;
    }
    const char *last = r->n_segs ? r->segs[r->n_segs - 1] : "";
    if (!path || stat(path, &st) < 0 || !S_ISREG(st.st_mode)) {
        if (r->n_segs == 0 || (r->n_segs == 1 && !r->segs[0][0])) {
            resp_bytes(r, 200, "text/html; charset=utf-8", placeholder, sizeof(placeholder) - 1);
            resp_header(r, "Cache-Control", "no-cache");
        } else {
            resp_error(r, 404, "not_found", "no such file");
            cache_headers(r, last, 0);
        }
        goto out;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        resp_error(r, 404, "not_found", "no such file");
        goto out;
    }
    const char *ct = srv_mime_type(path);
    if (strncmp(ct, "text/", 5) == 0 || strcmp(ct, "application/json") == 0) {
        char full[64];
        snprintf(full, sizeof(full), "%s; charset=utf-8", ct);
        resp_file(r, fd, (size_t)st.st_size, full);
    } else {
        resp_file(r, fd, (size_t)st.st_size, ct);
    }
    if (is_index) {
        resp_header(r, "Cache-Control", "no-cache");
        resp_header(r, "Pragma", "no-cache");
        resp_header(r, "Expires", "0");
    } else {
        cache_headers(r, last, 1);
    }
out:
    xfree(path);
    buf_release(&rel);
}

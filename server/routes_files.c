/*
 * File routes: GET /view, POST /upload/image, POST /upload/mask (comfy-api.md §3.7, 3.8).
 * Every path built from client input goes through srv_path (lexical + symlink checks).
 * Error responses of /view have empty bodies, as ComfyUI's do; upload errors carry JSON.
 */
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "afile.h"
#include "buf.h"
#include "alloc.h"
#include "log.h"
#include "srv_fs.h"
#include "srv_image.h"
#include "srv_mime.h"
#include "srv_path.h"
#include "srv_req.h"

static const char *type_dir(const struct srv_config *cfg, const char *type)
{
    if (strcmp(type, "output") == 0)
        return cfg->output_dir;
    if (strcmp(type, "input") == 0)
        return cfg->input_dir;
    if (strcmp(type, "temp") == 0)
        return cfg->temp_dir;
    return NULL;
}

/* Content-Disposition: filename="<base>", with characters that would break the quoted
 * string or the header line replaced. */
static void set_disposition(struct srv_req *r, const char *base)
{
    char disp[600];
    int n = snprintf(disp, sizeof(disp), "filename=\"");
    for (const char *p = base; *p && n < (int)sizeof(disp) - 3; p++)
        disp[n++] = (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20 || *p == 0x7f) ? '_' : *p;
    disp[n++] = '"';
    disp[n] = '\0';
    resp_header(r, "Content-Disposition", disp);
}

/* ---- GET /view ---------------------------------------------------------------------------- */

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

static void view_converted(struct srv_req *r, const char *path, const char *base,
                           const char *preview, const char *channel);

static void route_view(struct srv_req *r)
{
    const struct srv_config *cfg = r->srv->cfg;
    const char *fq = req_query(r, "filename");
    if (!fq) {
        resp_empty(r, 404);
        return;
    }
    char *filename = xstrdup(fq);
    const char *type = req_query(r, "type");
    if (!type || !type[0])
        type = "output";
    static const char *const tags[] = {" [output]", " [input]", " [temp]"};
    static const char *const tag_types[] = {"output", "input", "temp"};
    for (int i = 0; i < 3; i++)
        if (ends_with(filename, tags[i])) {
            filename[strlen(filename) - strlen(tags[i])] = '\0';
            type = tag_types[i];
        }
    char *dir = NULL, *path = NULL;
    if (!filename[0] || filename[0] == '/' || strstr(filename, "..")) {
        resp_empty(r, 400);
        goto out;
    }
    const char *root = type_dir(cfg, type);
    if (!root) {
        resp_empty(r, 400);
        goto out;
    }
    const char *sub = req_query(r, "subfolder");
    dir = srv_path_join_inside(root, sub && sub[0] ? sub : NULL);
    if (!dir) {
        resp_empty(r, 403);
        goto out;
    }
    const char *base = strrchr(filename, '/');
    base = base ? base + 1 : filename;
    if (!srv_path_is_plain_name(base)) {
        resp_empty(r, 400);
        goto out;
    }
    path = srv_path_join_inside(dir, base);
    if (!path) { /* a symlink that leads out of the root */
        resp_empty(r, 403);
        goto out;
    }
    struct stat st;
    /* A shared store: the file may have been made (or uploaded) through another process. */
    int found = stat(path, &st) == 0;
    if (!found && errno == ENOENT && srv_jobs_fetch_file(r->srv, type, sub ? sub : "", base) == 0)
        found = stat(path, &st) == 0;
    if (!found || !S_ISREG(st.st_mode)) {
        resp_empty(r, 404);
        goto out;
    }
    const char *preview = req_query(r, "preview");
    const char *channel = req_query(r, "channel");
    if ((preview && preview[0]) || (channel && channel[0] && strcmp(channel, "rgba") != 0)) {
        view_converted(r, path, base, preview, channel);
        goto out;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        resp_empty(r, 404);
        goto out;
    }
    const char *ct = srv_mime_type(base);
    /* Never let a stored file run as a page or script in the UI's origin. */
    if (!strcmp(ct, "text/html") || !strcmp(ct, "text/javascript") || !strcmp(ct, "text/css") ||
        !strcmp(ct, "image/svg+xml"))
        ct = "application/octet-stream";
    resp_file(r, fd, (size_t)st.st_size, ct);
    set_disposition(r, base);
out:
    xfree(path);
    xfree(dir);
    xfree(filename);
}

/* preview=<fmt>[;quality] and channel=rgb|a (comfy-api.md §3.7 steps 8-9). */
static void view_converted(struct srv_req *r, const char *path, const char *base,
                           const char *preview, const char *channel)
{
    struct srv_image img = {0};
    struct err e = {0};
    if (srv_image_load(path, &img, &e) < 0) {
        /* Not an image we can decode: ComfyUI would fail too; answer with the raw file. */
        resp_empty(r, 400);
        return;
    }
    int want_alpha_only = channel && strcmp(channel, "a") == 0;
    int drop_alpha = channel && strcmp(channel, "rgb") == 0;
    void *out = NULL;
    size_t n = 0;
    const char *ct;
    if (preview && preview[0] && !want_alpha_only) {
        int quality = 90;
        const char *semi = strrchr(preview, ';');
        if (semi && semi[1] && strspn(semi + 1, "0123456789") == strlen(semi + 1))
            quality = atoi(semi + 1);
        if (quality < 1)
            quality = 1;
        if (quality > 100)
            quality = 100;
        /* webp would need libwebp, which latentd does not link: every preview is JPEG, and
         * Content-Type says so (clients render by Content-Type). */
        srv_image_jpeg(&img, quality, &out, &n);
        ct = "image/jpeg";
    } else {
        if (want_alpha_only)
            srv_image_alpha_only(&img);
        else if (drop_alpha)
            img.channels = srv_image_drop_alpha(&img);
        srv_image_png(&img, 4, &out, &n);
        ct = "image/png";
    }
    srv_image_release(&img);
    if (!out) {
        resp_empty(r, 500);
        return;
    }
    resp_bytes(r, 200, ct, out, n);
    xfree(out);
    set_disposition(r, base);
}

/* ---- multipart ------------------------------------------------------------------------------ */

struct form {
    struct buf image;     /* the file part's bytes */
    char *image_name;     /* owned: its filename */
    int has_image;
    struct buf type, subfolder, overwrite, original_ref;
    int has_type, has_subfolder, has_overwrite, has_original_ref;
};

static enum MHD_Result form_iter(void *cls, enum MHD_ValueKind kind, const char *key,
                                 const char *filename, const char *content_type,
                                 const char *transfer_encoding, const char *data, uint64_t off,
                                 size_t size)
{
    struct form *f = cls;
    struct buf *dst = NULL;
    if (strcmp(key, "image") == 0) {
        if (!f->has_image) {
            f->has_image = 1;
            f->image_name = xstrdup(filename ? filename : "");
        }
        dst = &f->image;
    } else if (strcmp(key, "type") == 0) {
        f->has_type = 1;
        dst = &f->type;
    } else if (strcmp(key, "subfolder") == 0) {
        f->has_subfolder = 1;
        dst = &f->subfolder;
    } else if (strcmp(key, "overwrite") == 0) {
        f->has_overwrite = 1;
        dst = &f->overwrite;
    } else if (strcmp(key, "original_ref") == 0) {
        f->has_original_ref = 1;
        dst = &f->original_ref;
    }
    if (dst && size)
        buf_add(dst, data, size);
    return MHD_YES;
}

static void form_release(struct form *f)
{
    buf_release(&f->image);
    buf_release(&f->type);
    buf_release(&f->subfolder);
    buf_release(&f->overwrite);
    buf_release(&f->original_ref);
    xfree(f->image_name);
}

/* Parse the collected body as multipart/form-data; 0 or -1 with a 400 set. */
static int form_parse(struct srv_req *r, struct form *f)
{
    memset(f, 0, sizeof(*f));
    buf_init(&f->image);
    buf_init(&f->type);
    buf_init(&f->subfolder);
    buf_init(&f->overwrite);
    buf_init(&f->original_ref);
    const char *ct = req_header(r, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (!ct || strncasecmp(ct, "multipart/form-data", 19) != 0) {
        resp_error(r, 400, "invalid_upload", "expected a multipart/form-data body");
        return -1;
    }
    struct MHD_PostProcessor *pp = MHD_create_post_processor(r->conn, 64 * 1024, form_iter, f);
    if (!pp) {
        resp_error(r, 400, "invalid_upload", "malformed multipart/form-data (no boundary?)");
        return -1;
    }
    enum MHD_Result ok = MHD_post_process(pp, r->body.ptr, r->body.len);
    enum MHD_Result done = MHD_destroy_post_processor(pp);
    if (ok != MHD_YES || done != MHD_YES) {
        resp_error(r, 400, "invalid_upload", "malformed multipart/form-data body");
        return -1;
    }
    return 0;
}

/* ---- upload ------------------------------------------------------------------------------------ */

static int file_equals(const char *path, const void *data, size_t n)
{
    struct stat st;
    if (stat(path, &st) < 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size != n)
        return 0;
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return 0;
    char chunk[65536];
    size_t off = 0;
    int eq = 1;
    while (eq && off < n) {
        size_t k = fread(chunk, 1, sizeof(chunk), fp);
        if (k == 0 || memcmp(chunk, (const char *)data + off, k) != 0)
            eq = 0;
        off += k;
    }
    fclose(fp);
    return eq && off == n;
}

/*
 * Choose the stored name: overwrite in place, or ComfyUI's dedupe: an existing file with
 * the same bytes is reused (ComfyUI compares hashes — sha256 by default — which is the
 * same decision as comparing the bytes, so --default-hashing-function changes nothing
 * observable); otherwise "stem (i).ext". Returns the final name (caller frees) and sets
 * *write_needed.
 */
static char *pick_name(const char *dir, const char *name, const void *data, size_t n,
                       int overwrite, int *write_needed)
{
    *write_needed = 1;
    struct buf p;
    buf_init(&p);
    buf_printf(&p, "%s/%s", dir, name);
    if (overwrite) {
        buf_release(&p);
        return xstrdup(name);
    }
    const char *dot = strrchr(name, '.');
    size_t stem_len = dot && dot != name ? (size_t)(dot - name) : strlen(name);
    const char *ext = dot && dot != name ? dot : "";
    char *cur = xstrdup(name);
    for (int i = 1; access(p.ptr, F_OK) == 0; i++) {
        if (file_equals(p.ptr, data, n)) {
            *write_needed = 0;
            break;
        }
        xfree(cur);
        struct buf nb;
        buf_init(&nb);
        buf_printf(&nb, "%.*s (%d)%s", (int)stem_len, name, i, ext);
        cur = buf_detach(&nb, NULL);
        buf_reset(&p);
        buf_printf(&p, "%s/%s", dir, cur);
    }
    buf_release(&p);
    return cur;
}

struct upload_target {
    char *dir;   /* owned: absolute target dir */
    char *name;  /* owned: final name */
    const char *type;
    int write_needed;
};

/* Shared by image and mask uploads: validates fields and picks the target. 0 or -1 (400). */
static int upload_target(struct srv_req *r, struct form *f, const void *data, size_t n,
                         struct upload_target *t)
{
    memset(t, 0, sizeof(*t));
    if (!f->has_image || !f->image_name || !f->image_name[0]) {
        resp_error(r, 400, "invalid_upload", "missing 'image' file part");
        return -1;
    }
    t->type = f->has_type && f->type.len ? f->type.ptr : "input";
    const char *root = type_dir(r->srv->cfg, t->type);
    if (!root || (f->has_type && f->type.len && strlen(f->type.ptr) != f->type.len)) {
        resp_error(r, 400, "invalid_upload", "unknown upload type '%s'", t->type);
        return -1;
    }
    if (!srv_path_is_plain_name(f->image_name)) {
        resp_error(r, 400, "invalid_upload", "invalid file name '%s'", f->image_name);
        return -1;
    }
    if (memchr(f->subfolder.ptr, '\0', f->subfolder.len)) {
        resp_error(r, 400, "invalid_upload", "invalid subfolder");
        return -1;
    }
    if (srv_fs_mkdirs(root, 0755) < 0) {
        resp_error(r, 500, "internal_error", "cannot create '%s'", root);
        return -1;
    }
    t->dir = srv_path_join_inside(root, f->subfolder.len ? f->subfolder.ptr : NULL);
    if (!t->dir) {
        resp_error(r, 400, "invalid_upload", "subfolder '%s' escapes the %s directory",
                   f->subfolder.ptr, t->type);
        return -1;
    }
    if (srv_fs_mkdirs(t->dir, 0755) < 0) {
        resp_error(r, 400, "invalid_upload", "cannot create subfolder '%s'", f->subfolder.ptr);
        xfree(t->dir);
        t->dir = NULL;
        return -1;
    }
    int overwrite = f->has_overwrite &&
                    (strcmp(f->overwrite.ptr, "true") == 0 || strcmp(f->overwrite.ptr, "1") == 0);
    t->name = pick_name(t->dir, f->image_name, data, n, overwrite, &t->write_needed);
    return 0;
}

static void upload_respond(struct srv_req *r, struct form *f, struct upload_target *t)
{
    /* A shared store: prompts that name it may run on another machine. */
    srv_jobs_share_file(r->srv, t->type, f->subfolder.ptr, t->name);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", t->name);
    cJSON_AddStringToObject(o, "subfolder", f->subfolder.ptr);
    cJSON_AddStringToObject(o, "type", t->type);
    resp_json(r, 200, o);
}

static void route_upload_image(struct srv_req *r)
{
    struct form f;
    struct upload_target t = {0};
    if (form_parse(r, &f) < 0)
        goto out;
    if (upload_target(r, &f, f.image.ptr, f.image.len, &t) < 0)
        goto out;
    if (t.write_needed) {
        struct buf p;
        buf_init(&p);
        buf_printf(&p, "%s/%s", t.dir, t.name);
        int rc = afile_write(p.ptr, f.image.ptr, f.image.len, NULL);
        buf_release(&p);
        if (rc < 0) {
            resp_error(r, 500, "internal_error", "cannot write '%s': %s", t.name, strerror(errno));
            goto out;
        }
    }
    upload_respond(r, &f, &t);
out:
    xfree(t.dir);
    xfree(t.name);
    form_release(&f);
}

/*
 * /upload/mask: the original image (original_ref) gets the uploaded image's alpha channel
 * and is saved as PNG under the upload's name. A missing original writes nothing and still
 * answers 200, as ComfyUI does.
 */
static void route_upload_mask(struct srv_req *r)
{
    struct form f;
    struct upload_target t = {0};
    struct srv_image orig = {0}, mask = {0};
    cJSON *ref = NULL;
    char *odir = NULL, *opath = NULL;
    void *png = NULL;
    size_t png_n = 0;
    if (form_parse(r, &f) < 0)
        goto out;
    ref = f.has_original_ref ? cJSON_ParseWithLength(f.original_ref.ptr, f.original_ref.len) : NULL;
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(ref, "filename");
    if (!cJSON_IsObject(ref) || !cJSON_IsString(fn)) {
        resp_error(r, 400, "invalid_upload", "'original_ref' must be a JSON object with a filename");
        goto out;
    }
    const char *ofile = fn->valuestring;
    if (!ofile[0] || ofile[0] == '/' || strstr(ofile, "..")) {
        resp_error(r, 400, "invalid_upload", "invalid original filename '%s'", ofile);
        goto out;
    }
    const cJSON *ot = cJSON_GetObjectItemCaseSensitive(ref, "type");
    const cJSON *os = cJSON_GetObjectItemCaseSensitive(ref, "subfolder");
    const char *oroot = type_dir(r->srv->cfg, cJSON_IsString(ot) ? ot->valuestring : "output");
    if (!oroot) {
        resp_error(r, 400, "invalid_upload", "unknown original type");
        goto out;
    }
    odir = srv_path_join_inside(oroot, cJSON_IsString(os) ? os->valuestring : NULL);
    if (!odir) {
        resp_error(r, 400, "invalid_upload", "original subfolder escapes its directory");
        goto out;
    }
    const char *obase = strrchr(ofile, '/');
    obase = obase ? obase + 1 : ofile;
    opath = srv_path_join_inside(odir, obase);
    struct err e = {0};
    if (srv_image_decode(f.image.ptr, f.image.len, &mask, &e) < 0) {
        resp_error(r, 400, "invalid_upload", "%s", e.msg);
        goto out;
    }
    if (!opath || srv_image_load(opath, &orig, &e) < 0) {
        /* ComfyUI QUIRK: a missing original writes nothing, yet answers 200 */
        struct upload_target tt = {.name = f.image_name, .type = f.has_type && f.type.len ? f.type.ptr : "input"};
        upload_respond(r, &f, &tt);
        goto out;
    }
    if (orig.w != mask.w || orig.h != mask.h) {
        resp_error(r, 400, "invalid_upload", "mask is %dx%d but the original is %dx%d", mask.w,
                   mask.h, orig.w, orig.h);
        goto out;
    }
    srv_image_set_alpha_from(&orig, &mask);
    {
        /* Keep the original's text chunks (its prompt/workflow); zlib level 4 as ComfyUI. */
        size_t on = 0;
        char *obytes = NULL;
        struct buf ob;
        buf_init(&ob);
        if (buf_read_file(&ob, opath) == 0)
            obytes = buf_detach(&ob, &on);
        buf_release(&ob);
        struct srv_png_text *texts = NULL;
        int nt = obytes ? srv_png_text_read(obytes, on, &texts) : 0;
        srv_image_png_ex(&orig, 4, texts, nt, &png, &png_n);
        srv_png_text_free(texts, nt);
        xfree(obytes);
    }
    if (!png) {
        resp_error(r, 500, "internal_error", "cannot encode the mask");
        goto out;
    }
    if (upload_target(r, &f, png, png_n, &t) < 0)
        goto out;
    if (t.write_needed) {
        struct buf p;
        buf_init(&p);
        buf_printf(&p, "%s/%s", t.dir, t.name);
        int rc = afile_write(p.ptr, png, png_n, NULL);
        buf_release(&p);
        if (rc < 0) {
            resp_error(r, 500, "internal_error", "cannot write '%s': %s", t.name, strerror(errno));
            goto out;
        }
    }
    upload_respond(r, &f, &t);
out:
    xfree(png);
    srv_image_release(&orig);
    srv_image_release(&mask);
    xfree(opath);
    xfree(odir);
    cJSON_Delete(ref);
    xfree(t.dir);
    xfree(t.name);
    form_release(&f);
}

const struct srv_route srv_routes_files[] = {
    {"/view", SRV_GET, route_view, 0},
    {"/upload/image", SRV_POST, route_upload_image, 0},
    {"/upload/mask", SRV_POST, route_upload_mask, 0},
    {NULL, 0, NULL, 0},
};

/*
 * Per-user routes the browser frontend needs (comfy-api.md §3.12): /users, /settings,
 * /userdata, /v2/userdata. Single-user mode keeps everything under <user dir>/default/;
 * with --multi-user the `comfy-user` header picks a user created through POST /users.
 * Every path goes through srv_path_join_inside (403 when it escapes the user's folder).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "afile.h"
#include "buf.h"
#include "alloc.h"
#include "srv_fs.h"
#include "srv_mime.h"
#include "srv_path.h"
#include "srv_req.h"
#include "uuid.h"

/* Guards read-modify-write of settings and users files (leaf). */
static pthread_mutex_t user_lock = PTHREAD_MUTEX_INITIALIZER;

static char *read_text(const char *path, size_t *n_out)
{
    struct buf b;
    buf_init(&b);
    if (buf_read_file(&b, path) < 0) {
        buf_release(&b);
        return NULL;
    }
    if (n_out)
        *n_out = b.len;
    return buf_detach(&b, NULL);
}

static char *users_file(const struct srv_config *cfg)
{
    struct buf b;
    buf_init(&b);
    buf_printf(&b, "%s/users.json", cfg->user_dir);
    return buf_detach(&b, NULL);
}

static cJSON *load_users(const struct srv_config *cfg)
{
    char *path = users_file(cfg);
    char *t = read_text(path, NULL);
    xfree(path);
    cJSON *u = t ? cJSON_Parse(t) : NULL;
    xfree(t);
    if (!cJSON_IsObject(u)) {
        cJSON_Delete(u);
        u = cJSON_CreateObject();
    }
    return u;
}

/* The current user's root folder (created), or NULL with a 400 set. */
static char *user_root(struct srv_req *r)
{
    const struct srv_config *cfg = r->srv->cfg;
    const char *user = "default";
    cJSON *users = NULL;
    if (cfg->multi_user) {
        const char *h = req_header(r, "comfy-user");
        if (h && h[0]) {
            users = load_users(cfg);
            if (!cJSON_GetObjectItemCaseSensitive(users, h)) {
                cJSON_Delete(users);
                resp_error(r, 400, "unknown_user", "unknown user '%s'", h);
                return NULL;
            }
            user = h;
        }
    }
    char *root = srv_path_join_inside(cfg->user_dir, user);
    cJSON_Delete(users);
    if (!root) {
        resp_error(r, 400, "unknown_user", "invalid user");
        return NULL;
    }
    srv_fs_mkdirs(root, 0755);
    return root;
}

/* ---- /users ------------------------------------------------------------------------------ */

static void route_users_get(struct srv_req *r)
{
    const struct srv_config *cfg = r->srv->cfg;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "storage", "server");
    if (cfg->multi_user) {
        pthread_mutex_lock(&user_lock);
        cJSON_AddItemToObject(o, "users", load_users(cfg));
        pthread_mutex_unlock(&user_lock);
    } else {
        struct buf p;
        buf_init(&p);
        buf_printf(&p, "%s/default", cfg->user_dir);
        struct stat st;
        cJSON_AddBoolToObject(o, "migrated", stat(p.ptr, &st) == 0 && S_ISDIR(st.st_mode));
        buf_release(&p);
    }
    resp_json(r, 200, o);
}

static void route_users_post(struct srv_req *r)
{
    const struct srv_config *cfg = r->srv->cfg;
    int empty;
    cJSON *b = req_json(r, &empty);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(b, "username");
    if (!cJSON_IsString(name) || !name->valuestring[0]) {
        cJSON_Delete(b);
        resp_error(r, 400, "invalid_user", "body must be {\"username\": \"...\"}");
        return;
    }
    pthread_mutex_lock(&user_lock);
    cJSON *users = load_users(cfg);
    const cJSON *it;
    int dup = 0;
    cJSON_ArrayForEach(it, users)
    {
        if (cJSON_IsString(it) && strcmp(it->valuestring, name->valuestring) == 0)
            dup = 1;
    }
    if (dup) {
        pthread_mutex_unlock(&user_lock);
        cJSON_Delete(users);
        cJSON_Delete(b);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "error", "Duplicate username.");
        resp_json(r, 400, o);
        return;
    }
    /* ComfyUI: the id is the name with unsafe characters replaced, plus a uuid. */
    struct buf id;
    buf_init(&id);
    for (const char *p = name->valuestring; *p; p++)
        buf_addc(&id, (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                              (*p >= '0' && *p <= '9') || *p == '-' || *p == '_'
                          ? *p
                          : '_');
    char uuid[40];
    uuid4_format(uuid, 1);
    buf_printf(&id, "_%s", uuid);
    cJSON_AddStringToObject(users, id.ptr, name->valuestring);
    char *text = cJSON_Print(users);
    char *path = users_file(cfg);
    afile_write(path, text, strlen(text), NULL);
    xfree(path);
    cJSON_free(text);
    pthread_mutex_unlock(&user_lock);
    cJSON_Delete(users);
    cJSON_Delete(b);
    resp_json(r, 200, cJSON_CreateString(id.ptr));
    buf_release(&id);
}

/* ---- /settings ------------------------------------------------------------------------------ */

static char *settings_path(struct srv_req *r)
{
    char *root = user_root(r);
    if (!root)
        return NULL;
    struct buf b;
    buf_init(&b);
    buf_printf(&b, "%s/comfy.settings.json", root);
    xfree(root);
    return buf_detach(&b, NULL);
}

static cJSON *load_settings(const char *path)
{
    char *t = read_text(path, NULL);
    cJSON *s = t ? cJSON_Parse(t) : NULL;
    xfree(t);
    if (!cJSON_IsObject(s)) {
        cJSON_Delete(s);
        s = cJSON_CreateObject();
    }
    return s;
}

static void route_settings_get(struct srv_req *r)
{
    char *path = settings_path(r);
    if (!path)
        return;
    pthread_mutex_lock(&user_lock);
    cJSON *s = load_settings(path);
    pthread_mutex_unlock(&user_lock);
    xfree(path);
    if (r->n_segs == 2) {
        cJSON *v = cJSON_DetachItemFromObjectCaseSensitive(s, r->segs[1]);
        cJSON_Delete(s);
        resp_json(r, 200, v ? v : cJSON_CreateNull());
        return;
    }
    resp_json(r, 200, s);
}

static void route_settings_post(struct srv_req *r)
{
    int empty;
    cJSON *b = req_json(r, &empty);
    if (!b || (r->n_segs == 1 && !cJSON_IsObject(b))) {
        cJSON_Delete(b);
        resp_error(r, 400, "invalid_json",
                   r->n_segs == 1 ? "settings must be a JSON object" : "setting must be JSON");
        return;
    }
    char *path = settings_path(r);
    if (!path) {
        cJSON_Delete(b);
        return;
    }
    pthread_mutex_lock(&user_lock);
    cJSON *s = load_settings(path);
    if (r->n_segs == 2) {
        cJSON_DeleteItemFromObjectCaseSensitive(s, r->segs[1]);
        cJSON_AddItemToObject(s, r->segs[1], b);
        b = NULL;
    } else {
        cJSON *it = b->child;
        while (it) {
            cJSON *next = it->next;
            cJSON *item = cJSON_DetachItemViaPointer(b, it);
            cJSON_DeleteItemFromObjectCaseSensitive(s, item->string);
            cJSON_AddItemToObject(s, item->string, item);
            it = next;
        }
    }
    char *text = cJSON_Print(s);
    int rc = afile_write(path, text, strlen(text), NULL);
    cJSON_free(text);
    pthread_mutex_unlock(&user_lock);
    cJSON_Delete(s);
    cJSON_Delete(b);
    xfree(path);
    if (rc < 0)
        resp_error(r, 500, "internal_error", "cannot write settings");
    else
        resp_empty(r, 200);
}

/* ---- /userdata ------------------------------------------------------------------------------- */

static int query_bool(struct srv_req *r, const char *key, int dflt)
{
    const char *v = req_query(r, key);
    if (!v)
        return dflt;
    return strcmp(v, "true") == 0 || strcmp(v, "1") == 0;
}

static cJSON *file_info(const char *rel, const struct stat *st)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "path", rel);
    cJSON_AddNumberToObject(o, "size", (double)st->st_size);
    cJSON_AddNumberToObject(o, "modified", (double)st->st_mtim.tv_sec + st->st_mtim.tv_nsec / 1e9);
    cJSON_AddNumberToObject(o, "created", (double)st->st_ctim.tv_sec + st->st_ctim.tv_nsec / 1e9);
    return o;
}

static void route_userdata_list(struct srv_req *r)
{
    const char *d = req_query(r, "dir");
    if (!d) {
        resp_text(r, 400, "Directory must be provided");
        return;
    }
    char *root = user_root(r);
    if (!root)
        return;
    char *dir = srv_path_join_inside(root, d);
    xfree(root);
    if (!dir) {
        resp_empty(r, 403);
        return;
    }
    struct stat st;
    if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
        xfree(dir);
        resp_text(r, 404, "Directory not found");
        return;
    }
    int recurse = query_bool(r, "recurse", 0), full = query_bool(r, "full_info", 0),
        split = query_bool(r, "split", 0);
    struct srv_fs_list l = {0};
    srv_fs_walk(dir, recurse, 0, &l);
    srv_fs_list_sort(&l);
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < l.n; i++) {
        if (full) {
            cJSON_AddItemToArray(a, file_info(l.v[i].rel, &l.v[i].st));
        } else if (split) {
            cJSON *parts = cJSON_CreateArray();
            cJSON_AddItemToArray(parts, cJSON_CreateString(l.v[i].rel));
            char *copy = xstrdup(l.v[i].rel), *save = NULL;
            for (char *t = strtok_r(copy, "/", &save); t; t = strtok_r(NULL, "/", &save))
                cJSON_AddItemToArray(parts, cJSON_CreateString(t));
            xfree(copy);
            cJSON_AddItemToArray(a, parts);
        } else {
            cJSON_AddItemToArray(a, cJSON_CreateString(l.v[i].rel));
        }
    }
    srv_fs_list_release(&l);
    xfree(dir);
    resp_json(r, 200, a);
}

/* Resolve a {file} segment inside the user's folder; NULL with 403/400 set. */
static char *user_file(struct srv_req *r, const char *seg)
{
    char *root = user_root(r);
    if (!root)
        return NULL;
    char *p = seg[0] ? srv_path_join_inside(root, seg) : NULL;
    if (p && strcmp(p, root) == 0) {
        xfree(p);
        p = NULL;
    }
    xfree(root);
    if (!p)
        resp_empty(r, 403);
    return p;
}

static void route_userdata_get(struct srv_req *r)
{
    char *p = user_file(r, r->segs[1]);
    if (!p)
        return;
    struct stat st;
    int fd = stat(p, &st) == 0 && S_ISREG(st.st_mode) ? open(p, O_RDONLY | O_CLOEXEC) : -1;
    if (fd < 0)
        resp_empty(r, 404);
    else
        resp_file(r, fd, (size_t)st.st_size, srv_mime_type(p));
    xfree(p);
}

/* Relative path (to the user root) for responses. */
static void respond_saved(struct srv_req *r, const char *path, const char *rel)
{
    struct stat st;
    if (query_bool(r, "full_info", 0) && stat(path, &st) == 0)
        resp_json(r, 200, file_info(rel, &st));
    else
        resp_json(r, 200, cJSON_CreateString(rel));
}

static void route_userdata_post(struct srv_req *r)
{
    char *p = user_file(r, r->segs[1]);
    if (!p)
        return;
    /* ComfyUI: overwrite unless ?overwrite=false. */
    int overwrite = !(req_query(r, "overwrite") && strcmp(req_query(r, "overwrite"), "false") == 0);
    if (!overwrite && access(p, F_OK) == 0) {
        xfree(p);
        resp_text(r, 409, "File already exists");
        return;
    }
    char *slash = strrchr(p, '/');
    *slash = '\0';
    srv_fs_mkdirs(p, 0755);
    *slash = '/';
    if (afile_write(p, r->body.ptr, r->body.len, NULL) < 0) {
        resp_error(r, 500, "internal_error", "cannot write '%s': %s", r->segs[1], strerror(errno));
    } else {
        respond_saved(r, p, r->segs[1]);
    }
    xfree(p);
}

static void route_userdata_delete(struct srv_req *r)
{
    char *p = user_file(r, r->segs[1]);
    if (!p)
        return;
    struct stat st;
    if (stat(p, &st) < 0 || !S_ISREG(st.st_mode))
        resp_empty(r, 404);
    else if (unlink(p) < 0)
        resp_error(r, 500, "internal_error", "cannot delete '%s'", r->segs[1]);
    else
        resp_empty(r, 204);
    xfree(p);
}

static void route_userdata_move(struct srv_req *r)
{
    char *src = user_file(r, r->segs[1]);
    if (!src)
        return;
    char *dst = user_file(r, r->segs[3]);
    if (!dst) {
        xfree(src);
        return;
    }
    int overwrite = !(req_query(r, "overwrite") && strcmp(req_query(r, "overwrite"), "false") == 0);
    struct stat st;
    if (stat(src, &st) < 0 || !S_ISREG(st.st_mode)) {
        resp_text(r, 404, "Source file not found");
    } else if (!overwrite && access(dst, F_OK) == 0) {
        resp_text(r, 409, "Destination file already exists");
    } else {
        char *slash = strrchr(dst, '/');
        *slash = '\0';
        srv_fs_mkdirs(dst, 0755);
        *slash = '/';
        if (rename(src, dst) < 0)
            resp_error(r, 500, "internal_error", "cannot move: %s", strerror(errno));
        else
            respond_saved(r, dst, r->segs[3]);
    }
    xfree(src);
    xfree(dst);
}

static int v2_cmp(const void *a, const void *b)
{
    const struct srv_fs_entry *x = a, *y = b;
    int dx = S_ISDIR(x->st.st_mode), dy = S_ISDIR(y->st.st_mode);
    if (dx != dy)
        return dy - dx; /* directories first */
    return strcmp(x->rel, y->rel);
}

static void route_v2_userdata(struct srv_req *r)
{
    const char *rel = req_query(r, "path");
    char *root = user_root(r);
    if (!root)
        return;
    char *dir = srv_path_join_inside(root, rel && rel[0] ? rel : NULL);
    xfree(root);
    if (!dir) {
        resp_empty(r, 403);
        return;
    }
    struct stat st;
    if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
        xfree(dir);
        resp_text(r, 404, "Directory not found");
        return;
    }
    struct srv_fs_list l = {0};
    srv_fs_walk(dir, 0, 1, &l);
    if (l.n)
        qsort(l.v, l.n, sizeof(*l.v), v2_cmp);
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < l.n; i++) {
        cJSON *o = cJSON_CreateObject();
        struct buf p;
        buf_init(&p);
        if (rel && rel[0])
            buf_printf(&p, "%s/", rel);
        buf_adds(&p, l.v[i].rel);
        cJSON_AddStringToObject(o, "name", l.v[i].rel);
        cJSON_AddStringToObject(o, "path", p.ptr);
        buf_release(&p);
        int is_dir = S_ISDIR(l.v[i].st.st_mode);
        cJSON_AddStringToObject(o, "type", is_dir ? "directory" : "file");
        if (!is_dir) {
            cJSON_AddNumberToObject(o, "size", (double)l.v[i].st.st_size);
            cJSON_AddNumberToObject(o, "modified", (double)l.v[i].st.st_mtim.tv_sec +
                                                       l.v[i].st.st_mtim.tv_nsec / 1e9);
        }
        cJSON_AddItemToArray(a, o);
    }
    srv_fs_list_release(&l);
    xfree(dir);
    resp_json(r, 200, a);
}

const struct srv_route srv_routes_user[] = {
    {"/users", SRV_GET, route_users_get, 0},
    {"/users", SRV_POST, route_users_post, 0},
    {"/settings", SRV_GET, route_settings_get, 0},
    {"/settings", SRV_POST, route_settings_post, 0},
    {"/settings/*", SRV_GET, route_settings_get, 0},
    {"/settings/*", SRV_POST, route_settings_post, 0},
    {"/userdata", SRV_GET, route_userdata_list, 0},
    {"/userdata/*", SRV_GET, route_userdata_get, 0},
    {"/userdata/*", SRV_POST, route_userdata_post, 0},
    {"/userdata/*", SRV_DELETE, route_userdata_delete, 0},
    {"/userdata/*/move/*", SRV_POST, route_userdata_move, 0},
    {"/v2/userdata", SRV_GET, route_v2_userdata, 0},
    {NULL, 0, NULL, 0},
};

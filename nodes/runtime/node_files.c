#include "node_files.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "alloc.h"
#include "err.h"
#include "sha256.h"

const char *const node_model_exts[] = {".ckpt", ".pt", ".pt2", ".bin", ".pth",
                                       ".safetensors", ".pkl", ".sft", NULL};

/* Extensions whose MIME type is an image type (what LoadImage's listing accepts). */
static const char *const image_exts[] = {".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp",
                                         ".tif", ".tiff", ".ico", ".avif", ".jfif", NULL};

static int has_ext(const char *name, const char *const *exts, int nocase)
{
    size_t n = strlen(name);
    for (size_t i = 0; exts[i]; i++) {
        size_t m = strlen(exts[i]);
        if (n >= m && (nocase ? strcasecmp(name + n - m, exts[i]) : strcmp(name + n - m, exts[i])) == 0)
            return 1;
    }
    return 0;
}

/* Recursive walk; depth-limited so a symlink loop cannot hang a request. */
static void walk(const char *root, const char *rel, const char *const *exts,
                 struct node_strlist *out, int depth)
{
    if (depth > 16)
        return;
    struct buf dir;
    buf_init(&dir);
    buf_printf(&dir, "%s%s%s", root, *rel ? "/" : "", rel);
    DIR *d = opendir(dir.ptr);
    if (!d) {
        buf_release(&dir);
        return;
    }
    struct dirent *de;
    struct buf p, r;
    buf_init(&p);
    buf_init(&r);
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        buf_reset(&p);
        buf_printf(&p, "%s/%s", dir.ptr, de->d_name);
        buf_reset(&r);
        buf_printf(&r, "%s%s%s", rel, *rel ? "/" : "", de->d_name);
        struct stat st;
        if (stat(p.ptr, &st) < 0)
            continue;
        if (S_ISDIR(st.st_mode))
            walk(root, r.ptr, exts, out, depth + 1);
        else if (S_ISREG(st.st_mode) && has_ext(de->d_name, exts, 1))
            node_strlist_add(out, r.ptr);
    }
    closedir(d);
    buf_release(&p);
    buf_release(&r);
    buf_release(&dir);
}

static int folder_has_output_twin(const char *folder)
{
    return !strcmp(folder, "checkpoints") || !strcmp(folder, "loras") || !strcmp(folder, "vae");
}

void node_files_list_models(const struct node_env *env, const char *folder,
                            const char *const *exts, struct node_strlist *out)
{
    struct node_strlist tmp;
    node_strlist_init(&tmp);
    struct buf root;
    buf_init(&root);
    if (env->models_dir) {
        buf_printf(&root, "%s/%s", env->models_dir, folder);
        walk(root.ptr, "", exts ? exts : node_model_exts, &tmp, 0);
    }
    if (env->output_dir && folder_has_output_twin(folder)) {
        buf_reset(&root);
        buf_printf(&root, "%s/%s", env->output_dir, folder);
        walk(root.ptr, "", exts ? exts : node_model_exts, &tmp, 0);
    }
    buf_release(&root);
    node_strlist_sort(&tmp);
    for (size_t i = 0; i < tmp.n; i++)
        if (i == 0 || strcmp(tmp.items[i], tmp.items[i - 1]) != 0)
            node_strlist_add(out, tmp.items[i]);
    node_strlist_release(&tmp);
}

static int name_is_safe(const char *name)
{
    if (!name[0] || name[0] == '/' || strchr(name, '\\'))
        return 0;
    /* reject any ".." path component */
    const char *p = name;
    while (*p) {
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == 2 && p[0] == '.' && p[1] == '.')
            return 0;
        if (!e)
            break;
        p = e + 1;
    }
    return 1;
}

static int is_regular(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int node_files_find_model(const struct node_env *env, const char *folder, const char *name,
                          struct buf *path)
{
    buf_reset(path);
    if (!name_is_safe(name))
        return ERR_NOT_FOUND;
    if (env->models_dir) {
        buf_printf(path, "%s/%s/%s", env->models_dir, folder, name);
        if (is_regular(path->ptr))
            return 0;
    }
    if (env->output_dir && folder_has_output_twin(folder)) {
        buf_reset(path);
        buf_printf(path, "%s/%s/%s", env->output_dir, folder, name);
        if (is_regular(path->ptr))
            return 0;
    }
    buf_reset(path);
    return ERR_NOT_FOUND;
}

void node_files_list_input(const struct node_env *env, const char *const *exts, int nocase,
                           struct node_strlist *out)
{
    if (!env->input_dir)
        return;
    DIR *d = opendir(env->input_dir);
    if (!d)
        return;
    struct node_strlist tmp;
    node_strlist_init(&tmp);
    struct buf p;
    buf_init(&p);
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!has_ext(de->d_name, exts, nocase))
            continue;
        buf_reset(&p);
        buf_printf(&p, "%s/%s", env->input_dir, de->d_name);
        if (is_regular(p.ptr))
            node_strlist_add(&tmp, de->d_name);
    }
    closedir(d);
    buf_release(&p);
    node_strlist_sort(&tmp);
    for (size_t i = 0; i < tmp.n; i++)
        node_strlist_add(out, tmp.items[i]);
    node_strlist_release(&tmp);
}

void node_files_list_input_images(const struct node_env *env, struct node_strlist *out)
{
    node_files_list_input(env, image_exts, 1, out);
}

int node_files_validate_input(const struct node_env *env, const char *value, const char *kind,
                              struct buf *reason)
{
    struct buf path;
    buf_init(&path);
    int rc = node_files_resolve_input(env, value, &path);
    buf_release(&path);
    if (rc < 0)
        buf_printf(reason, "Invalid %s file: %s", kind, value);
    return rc < 0 ? rc : 0;
}

int node_files_resolve_input(const struct node_env *env, const char *name, struct buf *path)
{
    buf_reset(path);
    const char *base = env->input_dir;
    size_t n = strlen(name);
    static const struct {
        const char *tag;
        int which;
    } tags[] = {{" [output]", 1}, {" [input]", 0}, {" [temp]", 2}};
    char *plain = xstrdup(name);
    for (size_t t = 0; t < sizeof(tags) / sizeof(tags[0]); t++) {
        size_t m = strlen(tags[t].tag);
        if (n > m && strcmp(name + n - m, tags[t].tag) == 0) {
            plain[n - m] = '\0';
            base = tags[t].which == 1 ? env->output_dir
                   : tags[t].which == 2 ? env->temp_dir
                                        : env->input_dir;
            break;
        }
    }
    int rc = 0;
    if (!base || !name_is_safe(plain)) {
        rc = ERR_DENIED;
    } else {
        buf_printf(path, "%s/%s", base, plain);
        if (!is_regular(path->ptr))
            rc = ERR_NOT_FOUND;
    }
    xfree(plain);
    return rc;
}

int node_files_mkdirs(const char *path)
{
    char *p = xstrdup(path);
    int rc = 0;
    for (char *s = p + 1;; s++) {
        if (*s == '/' || *s == '\0') {
            char c = *s;
            *s = '\0';
            if (mkdir(p, 0755) < 0 && errno != EEXIST) {
                rc = ERR_IO;
                break;
            }
            *s = c;
            if (!c)
                break;
        }
    }
    xfree(p);
    return rc;
}

/* os.path.normpath for a relative path; returns 0, or -1 when it climbs out. */
int node_files_normalize_rel(const char *in, struct buf *out)
{
    if (in[0] == '/')
        return -1;
    char *tmp = xstrdup(in);
    char *parts[256];
    int n = 0, rc = 0;
    char *save;
    for (char *t = strtok_r(tmp, "/", &save); t; t = strtok_r(NULL, "/", &save)) {
        if (!strcmp(t, "."))
            continue;
        if (!strcmp(t, "..")) {
            if (n == 0) {
                rc = -1;
                break;
            }
            n--;
            continue;
        }
        if (n == 256) {
            rc = -1;
            break;
        }
        parts[n++] = t;
    }
    for (int i = 0; rc == 0 && i < n; i++)
        buf_printf(out, "%s%s", i ? "/" : "", parts[i]);
    xfree(tmp);
    return rc;
}

/* Next counter for `filename` in `dir` (comfy-api.md §8.1 step 4). */
int node_files_next_counter(const char *dir, const char *filename)
{
    DIR *d = opendir(dir);
    int best = 0;
    size_t fl = strlen(filename);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d))) {
            if (strncmp(de->d_name, filename, fl) != 0 || de->d_name[fl] != '_')
                continue;
            const char *s = de->d_name + fl + 1;
            const char *e = strchr(s, '_');
            size_t n = e ? (size_t)(e - s) : strlen(s);
            int digits = n > 0;
            for (size_t i = 0; i < n; i++)
                digits &= s[i] >= '0' && s[i] <= '9';
            int v = digits && n < 10 ? atoi(s) : 0;
            if (v > best)
                best = v;
        }
        closedir(d);
    }
    return best + 1;
}

int node_files_save_path(const struct node_env *env, const char *prefix,
                         struct node_save_path *out)
{
    struct buf norm;
    buf_init(&norm);
    buf_init(&out->dir);
    buf_init(&out->subfolder);
    buf_init(&out->filename);
    out->counter = 0;
    int rc = node_files_normalize_rel(prefix ? prefix : "", &norm) < 0 ? ERR_DENIED : 0;
    const char *n = norm.ptr;
    const char *slash = strrchr(n, '/');
    if (rc == 0) {
        buf_add(&out->subfolder, n, slash ? (size_t)(slash - n) : 0);
        buf_adds(&out->filename, slash ? slash + 1 : n);
        buf_printf(&out->dir, "%s%s%.*s", env->output_dir, slash ? "/" : "",
                   slash ? (int)(slash - n) : 0, n);
        if (node_files_mkdirs(out->dir.ptr) < 0)
            rc = ERR_IO;
    }
    if (rc == 0)
        out->counter = node_files_next_counter(out->dir.ptr, out->filename.ptr);
    buf_release(&norm);
    return rc;
}

void node_save_path_release(struct node_save_path *s)
{
    buf_release(&s->dir);
    buf_release(&s->subfolder);
    buf_release(&s->filename);
}

int node_files_input_sha256_hex(const struct node_env *env, const char *name, struct buf *out)
{
    struct buf path;
    buf_init(&path);
    int rc = node_files_resolve_input(env, name, &path);
    uint8_t digest[32];
    if (rc == 0)
        rc = sha256_file(path.ptr, digest);
    buf_release(&path);
    if (rc < 0)
        return rc;
    for (int i = 0; i < 32; i++)
        buf_printf(out, "%02x", digest[i]);
    return 0;
}

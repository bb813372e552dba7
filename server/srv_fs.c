#include "srv_fs.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "buf.h"

static void walk(const char *root, const char *rel, int depth, int recurse, int dirs,
                 struct srv_fs_list *out)
{
    struct buf dir;
    buf_init(&dir);
    buf_adds(&dir, root);
    if (rel[0]) {
        buf_addc(&dir, '/');
        buf_adds(&dir, rel);
    }
    DIR *d = opendir(dir.ptr);
    if (!d) {
        buf_release(&dir);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        struct buf full, r;
        buf_init(&full);
        buf_init(&r);
        buf_printf(&full, "%s/%s", dir.ptr, de->d_name);
        if (rel[0])
            buf_printf(&r, "%s/%s", rel, de->d_name);
        else
            buf_adds(&r, de->d_name);
        struct stat st;
        if (stat(full.ptr, &st) == 0) {
            int is_dir = S_ISDIR(st.st_mode);
            if (S_ISREG(st.st_mode) || (is_dir && dirs)) {
                if (out->n == out->cap) {
                    out->cap = out->cap ? out->cap * 2 : 32;
                    out->v = xrealloc(out->v, out->cap * sizeof(*out->v));
                }
                out->v[out->n].rel = xstrdup(r.ptr);
                out->v[out->n].st = st;
                out->n++;
            }
            if (is_dir && recurse && depth < 32)
                walk(root, r.ptr, depth + 1, recurse, dirs, out);
        }
        buf_release(&full);
        buf_release(&r);
    }
    closedir(d);
    buf_release(&dir);
}

void srv_fs_walk(const char *root, int recurse, int dirs, struct srv_fs_list *out)
{
    walk(root, "", 0, recurse, dirs, out);
}

void srv_fs_list_release(struct srv_fs_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        xfree(l->v[i].rel);
    xfree(l->v);
    memset(l, 0, sizeof(*l));
}

static int entry_cmp(const void *a, const void *b)
{
    return strcmp(((const struct srv_fs_entry *)a)->rel, ((const struct srv_fs_entry *)b)->rel);
}

void srv_fs_list_sort(struct srv_fs_list *l)
{
    if (l->n)
        qsort(l->v, l->n, sizeof(*l->v), entry_cmp);
}

int srv_fs_mkdirs(const char *path, int mode)
{
    char *p = xstrdup(path);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(p, (mode_t)mode) < 0 && errno != EEXIST) {
            int er = errno;
            xfree(p);
            errno = er;
            return -1;
        }
        *s = '/';
    }
    int rc = mkdir(p, (mode_t)mode) < 0 && errno != EEXIST ? -1 : 0;
    xfree(p);
    return rc;
}

void srv_fs_remove_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (d) {
            struct dirent *de;
            while ((de = readdir(d))) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                    continue;
                struct buf c;
                buf_init(&c);
                buf_printf(&c, "%s/%s", path, de->d_name);
                srv_fs_remove_tree(c.ptr);
                buf_release(&c);
            }
            closedir(d);
        }
        rmdir(path);
    } else {
        unlink(path);
    }
}

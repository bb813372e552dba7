/*
 * srv_fs — file-system helpers for the listing routes: recursive directory walks and
 * ComfyUI's model-folder table (comfy-api.md §3.11).
 * Threads: any thread; nothing is cached (listings reflect the disk at call time).
 */
#ifndef LATENTD_SERVER_SRV_FS_H
#define LATENTD_SERVER_SRV_FS_H

#include <stddef.h>
#include <sys/stat.h>

/* One file found by srv_fs_walk. */
struct srv_fs_entry {
    char *rel;       /* owned: path relative to the walked root, '/' separated */
    struct stat st;
};

struct srv_fs_list {
    struct srv_fs_entry *v; /* owned */
    size_t n, cap;
};

/*
 * Collect regular files under `root` (recursively when `recurse`, following symlinks
 * like os.walk(followlinks=True) but at most 32 levels deep). Appends to *out; a missing
 * root adds nothing. With `dirs`, directories are listed too (st tells which is which).
 */
void srv_fs_walk(const char *root, int recurse, int dirs, struct srv_fs_list *out);
void srv_fs_list_release(struct srv_fs_list *l);
/* Sort entries by rel (strcmp). */
void srv_fs_list_sort(struct srv_fs_list *l);

/* mkdir -p; 0 or -1 (errno set). */
int srv_fs_mkdirs(const char *path, int mode);
/* rm -rf of the contents and the directory itself; missing is fine. */
void srv_fs_remove_tree(const char *path);

#endif

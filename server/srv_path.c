#include "srv_path.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "alloc.h"
#include "buf.h"

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

char *srv_url_decode(const char *s, size_t n, int plus_space)
{
    char *out = xmalloc(n + 1);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '%') {
            if (i + 2 >= n) {
                xfree(out);
                return NULL;
            }
            int a = hexval((unsigned char)s[i + 1]), b = hexval((unsigned char)s[i + 2]);
            if (a < 0 || b < 0) {
                xfree(out);
                return NULL;
            }
            c = (char)(a * 16 + b);
            i += 2;
        } else if (c == '+' && plus_space) {
            c = ' ';
        }
        if (c == '\0') {
            xfree(out);
            return NULL;
        }
        out[o++] = c;
    }
    out[o] = '\0';
    return out;
}

char *srv_path_normalize(const char *p)
{
    int absolute = p[0] == '/';
    size_t n = strlen(p);
    /* Component stack as offsets into a copy. */
    char *copy = xstrdup(p);
    const char **parts = xmalloc((n / 2 + 2) * sizeof(*parts));
    size_t np = 0;
    char *save = NULL;
    for (char *tok = strtok_r(copy, "/", &save); tok; tok = strtok_r(NULL, "/", &save)) {
        if (strcmp(tok, ".") == 0)
            continue;
        if (strcmp(tok, "..") == 0) {
            if (np > 0 && strcmp(parts[np - 1], "..") != 0) {
                np--;
                continue;
            }
            if (absolute)
                continue; /* "/.." is "/" */
        }
        parts[np++] = tok;
    }
    struct buf b;
    buf_init(&b);
    if (absolute)
        buf_addc(&b, '/');
    for (size_t i = 0; i < np; i++) {
        if (i)
            buf_addc(&b, '/');
        buf_adds(&b, parts[i]);
    }
    if (b.len == 0)
        buf_addc(&b, '.');
    xfree(parts);
    xfree(copy);
    return buf_detach(&b, NULL);
}

int srv_path_is_under(const char *root, const char *path)
{
    size_t n = strlen(root);
    while (n > 1 && root[n - 1] == '/')
        n--;
    if (strncmp(root, path, n) != 0)
        return 0;
    if (n == 1 && root[0] == '/')
        return path[0] == '/';
    return path[n] == '\0' || path[n] == '/';
}

/* realpath of the deepest existing ancestor of `path`, with the missing tail re-appended. */
static char *resolve_existing(const char *path)
{
    char *cur = xstrdup(path);
    char *tail = xstrdup("");
    for (;;) {
        char real[PATH_MAX];
        if (realpath(cur, real)) {
            struct buf b;
            buf_init(&b);
            buf_adds(&b, real);
            if (tail[0]) {
                if (b.len == 0 || b.ptr[b.len - 1] != '/')
                    buf_addc(&b, '/');
                buf_adds(&b, tail);
            }
            xfree(cur);
            xfree(tail);
            return buf_detach(&b, NULL);
        }
        /* realpath failed on an entry that exists: a dangling symlink (or a loop). Its
         * target is unknown, and creating the file would follow it out of the root, so
         * refuse rather than treat it as missing (found by tests/fuzz/fuzz_srv_path). */
        struct stat st;
        if (lstat(cur, &st) == 0) {
            xfree(cur);
            xfree(tail);
            return NULL;
        }
        char *slash = strrchr(cur, '/');
        if (!slash || slash == cur) {
            xfree(cur);
            xfree(tail);
            return NULL;
        }
        struct buf t;
        buf_init(&t);
        buf_adds(&t, slash + 1);
        if (tail[0]) {
            buf_addc(&t, '/');
            buf_adds(&t, tail);
        }
        xfree(tail);
        tail = buf_detach(&t, NULL);
        *slash = '\0';
    }
}

char *srv_path_join_inside(const char *root, const char *rel)
{
    if (rel && memchr(rel, '\0', strlen(rel) + 1) != rel + strlen(rel))
        return NULL;
    char *nroot = srv_path_normalize(root);
    struct buf b;
    buf_init(&b);
    buf_adds(&b, nroot);
    if (rel && rel[0]) {
        if (rel[0] == '/') { /* an absolute component replaces the root in os.path.join */
            buf_release(&b);
            xfree(nroot);
            return NULL;
        }
        buf_addc(&b, '/');
        buf_adds(&b, rel);
    }
    char *joined = srv_path_normalize(b.ptr);
    buf_release(&b);
    if (!srv_path_is_under(nroot, joined))
        goto fail;
    char real_root[PATH_MAX];
    if (!realpath(nroot, real_root))
        goto fail;
    char *real = resolve_existing(joined);
    if (!real || !srv_path_is_under(real_root, real)) {
        xfree(real);
        goto fail;
    }
    xfree(real);
    xfree(nroot);
    return joined;
fail:
    xfree(joined);
    xfree(nroot);
    return NULL;
}

int srv_path_is_plain_name(const char *name)
{
    return name && name[0] && !strchr(name, '/') && strcmp(name, ".") != 0 &&
           strcmp(name, "..") != 0;
}

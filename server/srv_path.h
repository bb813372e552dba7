/*
 * srv_path — path safety for every route that turns client input into a file path
 * (/view, /upload/image, /upload/mask, /userdata, static files, model listings).
 *
 * The rule everywhere: a path built from client input must stay inside its root, both
 * lexically (no ".." climbing, no absolute component) and physically (a symlink inside the
 * root that points outside is refused). Functions are pure or only stat/realpath the file
 * system; none creates anything.
 * Threads: any thread.
 */
#ifndef LATENTD_SERVER_SRV_PATH_H
#define LATENTD_SERVER_SRV_PATH_H

#include <stddef.h>

/*
 * Percent-decode `s` (n bytes) into a new string; with `plus_space` a '+' becomes ' '
 * (query strings). Returns NULL when the result would contain a NUL byte or a malformed
 * escape ("%zz", "%4"). Caller frees with xfree.
 */
char *srv_url_decode(const char *s, size_t n, int plus_space);

/*
 * Lexical normalisation like Python's os.path.normpath: collapses "//", "/./" and
 * "a/../"; keeps leading ".." components of a relative path. Caller frees with xfree.
 */
char *srv_path_normalize(const char *p);

/* 1 when normalised `path` equals `root` or lies under it (both absolute, normalised). */
int srv_path_is_under(const char *root, const char *path);

/*
 * Join root and the client-supplied relative path `rel` (may be "" or NULL) and check
 * that the result stays inside root lexically AND physically: the deepest existing
 * ancestor of the result is realpath'ed and must still be under realpath(root). Returns
 * a new absolute path (caller frees with xfree) or NULL when it escapes.
 */
char *srv_path_join_inside(const char *root, const char *rel);

/* 1 when `name` is a plain file name: non-empty, no '/', no NUL, not "." or "..". */
int srv_path_is_plain_name(const char *name);

#endif

/*
 * fuzz_srv_path — the path safety functions every file route applies to client input
 * (server/srv_path.h): srv_url_decode, srv_path_normalize, srv_path_is_under,
 * srv_path_join_inside and srv_path_is_plain_name.
 *
 * Input: byte 0 chooses plus_space (bit 0); the rest is a raw, still percent-encoded
 * query value, handed over without a terminating NUL as MHD would give a slice.
 * The decoded value is joined to a temporary root holding a directory "sub", a symlink
 * "up" -> "/" (a physical escape) and a dangling symlink "dangle" -> a path outside
 * the root that does not exist (creating it would escape too).
 *
 * Contract checked: decode gives NULL or a string without NUL of at most n bytes;
 * normalize is idempotent, has no "." / empty components and keeps absolute paths
 * absolute without ".."; a joined path is absolute, normalised, under the root, and
 * every existing prefix of it resolves inside the root (check_physical); is_plain_name
 * agrees with its definition.
 * Every call's allocations are freed (alloc_live_count() balance).
 */
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "srv_path.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);

static char root[64];
static char up_path[128], dangle_path[128], sub_path[128];

static void teardown(void)
{
    unlink(up_path);
    unlink(dangle_path);
    rmdir(sub_path);
    rmdir(root);
}

static void setup(void)
{
    fuzz_quiet_logs();
    snprintf(root, sizeof(root), "/tmp/latentd-fuzz-path-XXXXXX");
    FUZZ_CHECK(mkdtemp(root) != NULL);
    snprintf(sub_path, sizeof(sub_path), "%s/sub", root);
    snprintf(up_path, sizeof(up_path), "%s/up", root);
    snprintf(dangle_path, sizeof(dangle_path), "%s/dangle", root);
    FUZZ_CHECK(mkdir(sub_path, 0755) == 0);
    FUZZ_CHECK(symlink("/", up_path) == 0);
    FUZZ_CHECK(symlink("/nonexistent-latentd-fuzz/escaped", dangle_path) == 0);
    atexit(teardown);
}

/* 1 when `path` is `dir` or lies below it. */
static int below(const char *dir, const char *path)
{
    size_t n = strlen(dir);
    return strncmp(dir, path, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/*
 * The physical rule, checked independently of srv_path.c: walking down from the root,
 * every prefix of `j` that exists (lstat) must resolve (realpath) to a place inside the
 * root. A symlink out ("up" to "/") is fine only when the path comes back inside; a
 * dangling one ("dangle") resolves nowhere and is never fine, since creating the file
 * would follow it.
 */
static void check_physical(const char *j)
{
    char real_root[PATH_MAX], real[PATH_MAX];
    FUZZ_CHECK(realpath(root, real_root) != NULL);
    char *p = xstrdup(j);
    for (size_t k = strlen(root); ; k++) {
        if (p[k] != '/' && p[k] != '\0')
            continue;
        char c = p[k];
        p[k] = '\0';
        struct stat st;
        int exists = lstat(p, &st) == 0;
        if (exists) {
            FUZZ_CHECK(realpath(p, real) != NULL);
            FUZZ_CHECK(below(real_root, real));
        }
        p[k] = c;
        if (!exists || c == '\0')
            break;
    }
    xfree(p);
}

static void check_normalized(const char *p, const char *norm)
{
    FUZZ_CHECK(norm[0] != '\0');
    FUZZ_CHECK((p[0] == '/') == (norm[0] == '/'));
    FUZZ_CHECK(strstr(norm, "//") == NULL && strstr(norm, "/./") == NULL);
    size_t len = strlen(norm);
    if (len > 1)
        FUZZ_CHECK(norm[len - 1] != '/' && strcmp(norm + len - 2, "/.") != 0);
    if (norm[0] == '/')
        FUZZ_CHECK(strcmp(norm, "/..") != 0 && strncmp(norm, "/../", 4) != 0);
    char *again = srv_path_normalize(norm);
    FUZZ_CHECK(strcmp(again, norm) == 0);
    xfree(again);
}

static void check_join(const char *rel)
{
    char *j = srv_path_join_inside(root, rel);
    if (!j)
        return;
    FUZZ_CHECK(j[0] == '/');
    FUZZ_CHECK(srv_path_is_under(root, j));
    check_physical(j);
    char *norm = srv_path_normalize(j);
    FUZZ_CHECK(strcmp(norm, j) == 0);
    xfree(norm);
    xfree(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    if (!root[0])
        setup();
    if (n < 1 || n > 4096)
        return 0;
    long live = alloc_live_count();
    int plus = data[0] & 1;
    /* An exact-size copy: a read past the slice is a heap overflow under ASan. */
    char *raw = xmalloc(n - 1 ? n - 1 : 1);
    memcpy(raw, data + 1, n - 1);
    char *dec = srv_url_decode(raw, n - 1, plus);
    if (dec) {
        size_t len = strlen(dec);
        FUZZ_CHECK(len <= n - 1);
        if (plus)
            FUZZ_CHECK(memchr(raw, '+', n - 1) == NULL || len < n - 1 || strchr(dec, ' '));
        char *norm = srv_path_normalize(dec);
        check_normalized(dec, norm);
        if (norm[0] == '/')
            FUZZ_CHECK(srv_path_is_under("/", norm));
        FUZZ_CHECK(srv_path_is_under(norm, norm));
        xfree(norm);
        check_join(dec);
        int plain = srv_path_is_plain_name(dec);
        FUZZ_CHECK(plain == (dec[0] && !strchr(dec, '/') && strcmp(dec, ".") && strcmp(dec, "..")));
        xfree(dec);
    } else {
        /* NULL only for a malformed escape or a NUL: there must be a '%' or a NUL byte. */
        FUZZ_CHECK(memchr(raw, '%', n - 1) != NULL || memchr(raw, '\0', n - 1) != NULL);
    }
    xfree(raw);
    FUZZ_CHECK(alloc_live_count() == live);
    return 0;
}

/* Unit tests for server/srv_path: decoding, normalisation, and the "stays inside its
 * root" rule, including symlinks that point out. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "harness.h"
#include "srv_path.h"

static char root[PATH_MAX];

static void check_inside(const char *rel, int want_inside)
{
    char *p = srv_path_join_inside(root, rel);
    ok((p != NULL) == want_inside, "join_inside('%s') %s", rel,
       want_inside ? "is allowed" : "is refused");
    xfree(p);
}

int main(void)
{
    char tmpl[] = "/tmp/latentd-path-XXXXXX";
    if (!mkdtemp(tmpl))
        SKIP("no temp dir");
    snprintf(root, sizeof(root), "%s/root", tmpl);
    mkdir(root, 0755);
    char p[PATH_MAX * 2];
    snprintf(p, sizeof(p), "%s/sub", root);
    mkdir(p, 0755);
    snprintf(p, sizeof(p), "%s/outside", tmpl);
    mkdir(p, 0755);
    char link[PATH_MAX * 2];
    snprintf(link, sizeof(link), "%s/escape", root);
    ok(symlink(p, link) == 0, "symlink to outside created");
    snprintf(link, sizeof(link), "%s/sub/etc", root);
    ok(symlink("/etc", link) == 0, "symlink to /etc created");
    snprintf(link, sizeof(link), "%s/inner", root);
    ok(symlink("sub", link) == 0, "symlink to inside created");
    /* A dangling symlink: writing through it would create a file outside the root. */
    char target[PATH_MAX * 2];
    snprintf(target, sizeof(target), "%s/outside/not-yet.png", tmpl);
    snprintf(link, sizeof(link), "%s/dangle.png", root);
    ok(symlink(target, link) == 0, "dangling symlink created");
    snprintf(link, sizeof(link), "%s/loop", root);
    ok(symlink("loop", link) == 0, "symlink loop created");

    /* decoding */
    char *d = srv_url_decode("a%2Fb+c%20d", 11, 1);
    EXPECT_STR(d, "a/b c d");
    xfree(d);
    d = srv_url_decode("a+b", 3, 0);
    EXPECT_STR(d, "a+b");
    xfree(d);
    ok(srv_url_decode("a%00b", 5, 0) == NULL, "%%00 is refused");
    ok(srv_url_decode("a%zzb", 5, 0) == NULL, "bad escape is refused");
    ok(srv_url_decode("a%4", 3, 0) == NULL, "truncated escape is refused");

    /* normalisation */
    const char *norm[][2] = {{"a/./b//c/", "a/b/c"}, {"a/../../b", "../b"}, {"/a/../..", "/"},
                             {"", "."},             {"./", "."},           {"/x/y/../z", "/x/z"}};
    for (size_t i = 0; i < sizeof(norm) / sizeof(norm[0]); i++) {
        char *n = srv_path_normalize(norm[i][0]);
        EXPECT_STR(n, norm[i][1]);
        xfree(n);
    }
    ok(srv_path_is_under("/a/b", "/a/b/c"), "/a/b/c under /a/b");
    ok(!srv_path_is_under("/a/b", "/a/bc"), "/a/bc not under /a/b");
    ok(srv_path_is_under("/a/b", "/a/b"), "root is under itself");

    /* allowed */
    check_inside(NULL, 1);
    check_inside("", 1);
    check_inside("sub", 1);
    check_inside("sub/new/deeper", 1);
    check_inside("sub/../sub", 1);
    check_inside("inner", 1);
    check_inside("missing/file.png", 1);
    /* refused: the traversal variants */
    const char *bad[] = {
        "..", "../", "../x", "../../etc/passwd", "sub/../../x", "sub/../../../etc", "/etc",
        "/etc/passwd", "//etc", "escape", "escape/file", "escape/../../x", "sub/etc",
        "sub/etc/passwd", "./../x", "sub/./../..", "a/b/../../../c", "....//../../x",
        "sub/..//../x", "../root/../../x", "inner/../../x", "sub/../..", "dangle.png",
        "loop", "loop/x",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        check_inside(bad[i], 0);
    /* "..." and "...." are ordinary names, not traversal */
    check_inside("...", 1);

    ok(srv_path_is_plain_name("a.png"), "plain name");
    ok(!srv_path_is_plain_name("a/b.png"), "slash is not plain");
    ok(!srv_path_is_plain_name(".."), ".. is not plain");
    ok(!srv_path_is_plain_name(""), "empty is not plain");

    char cmd[PATH_MAX * 2];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpl);
    if (system(cmd) != 0)
        printf("# cleanup failed\n");
    EXPECT_EQ(alloc_live_count(), 0);
    return harness_done();
}

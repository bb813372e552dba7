#include "harness.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "afile.h"
#include "alloc.h"
#include "buf.h"
#include "bytesize.h"
#include "clock.h"
#include "err.h"
#include "log.h"
#include "pynum.h"
#include "uuid.h"

static void test_err(void)
{
    struct err e = {0};
    EXPECT_EQ(err_set(&e, ERR_IO, "cannot open '%s'", "a.png"), ERR_IO);
    EXPECT_STR(e.msg, "cannot open 'a.png'");
    /* The first message wins; context is added with err_prefix. */
    err_set(&e, ERR_INVALID, "second");
    EXPECT_EQ(e.code, ERR_IO);
    err_prefix(&e, "node %d", 3);
    EXPECT_STR(e.msg, "node 3: cannot open 'a.png'");
    EXPECT_STR(err_str(ERR_DEVICE_OOM), "ERR_DEVICE_OOM");
    EXPECT_EQ(err_set(NULL, ERR_BUSY, "ignored"), ERR_BUSY);
}

static void test_buf(void)
{
    struct buf b;
    buf_init(&b);
    for (int i = 0; i < 1000; i++)
        buf_printf(&b, "%d,", i);
    ok(b.len == strlen(b.ptr), "buf stays NUL-terminated (len %zu)", b.len);
    ok(strncmp(b.ptr, "0,1,2,", 6) == 0, "buf content starts right");
    ok(strcmp(b.ptr + b.len - 4, "999,") == 0, "buf content ends right");
    size_t n;
    char *s = buf_detach(&b, &n);
    EXPECT_EQ(n, strlen(s));
    xfree(s);
    buf_release(&b);
}

static void test_read_file(void)
{
    char path[] = "/tmp/latentd_test_util_XXXXXX";
    int fd = mkstemp(path);
    ok(fd >= 0, "temp file created");
    /* More than one read chunk, with a NUL inside. */
    static char data[100000];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (char)(i * 7);
    ok(write(fd, data, sizeof(data)) == (ssize_t)sizeof(data), "temp file written");
    close(fd);
    struct buf b;
    buf_init(&b);
    buf_adds(&b, "x");
    EXPECT_EQ(buf_read_file(&b, path), 0);
    EXPECT_EQ(b.len, 1 + sizeof(data));
    ok(b.ptr[0] == 'x' && memcmp(b.ptr + 1, data, sizeof(data)) == 0, "content appended intact");
    unlink(path);
    EXPECT_EQ(buf_read_file(&b, path), -1);
    EXPECT_EQ(b.len, 1 + sizeof(data));
    buf_release(&b);
    /* An empty buf holds no memory: dropping it (or a detached one) leaks nothing. */
    long live = alloc_live_count();
    buf_init(&b);
    char *s = buf_detach(&b, NULL);
    EXPECT_STR(s, "");
    xfree(s);
    EXPECT_EQ(alloc_live_count(), live);
}

/* Entries of `dir` other than "." and "..". */
static int dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *de; d && (de = readdir(d));)
        n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
    if (d)
        closedir(d);
    return n;
}

static void test_afile(void)
{
    char dir[] = "/tmp/latentd-afile-XXXXXX";
    ok(mkdtemp(dir) != NULL, "temp dir");
    char path[256], sub[256];
    snprintf(path, sizeof(path), "%s/out.bin", dir);
    snprintf(sub, sizeof(sub), "%s/sub", dir);
    struct err e = {0};
    EXPECT_EQ(afile_write(path, "abc", 3, &e), 0);
    struct buf b;
    buf_init(&b);
    EXPECT_EQ(buf_read_file(&b, path), 0);
    EXPECT_STR(b.ptr, "abc");
    /* Replaced whole, and only the target is left in the folder. */
    EXPECT_EQ(afile_write(path, "defg", 4, &e), 0);
    buf_reset(&b);
    buf_read_file(&b, path);
    EXPECT_STR(b.ptr, "defg");
    EXPECT_EQ(dir_entries(dir), 1);
    /* Aborted: the old file is untouched, no temporary is left. */
    struct afile af;
    EXPECT_EQ(afile_open(&af, path, &e), 0);
    fputs("partial", af.fp);
    afile_abort(&af);
    buf_reset(&b);
    buf_read_file(&b, path);
    EXPECT_STR(b.ptr, "defg");
    EXPECT_EQ(dir_entries(dir), 1);
    /* A commit that cannot rename (the target is a folder) fails and cleans up. */
    mkdir(sub, 0755);
    EXPECT_EQ(afile_write(sub, "x", 1, &e), ERR_IO);
    ok(strstr(e.msg, "cannot write") != NULL, "message: %s", e.msg);
    EXPECT_EQ(dir_entries(dir), 2);
    EXPECT_EQ(dir_entries(sub), 0);
    /* Writing into a missing folder fails at open. */
    err_clear(&e);
    char missing[300];
    snprintf(missing, sizeof(missing), "%s/none/x", dir);
    EXPECT_EQ(afile_write(missing, "x", 1, &e), ERR_IO);
    rmdir(sub);
    unlink(path);
    ok(rmdir(dir) == 0, "nothing else was left in the folder");
    buf_release(&b);
}

static void test_log(void)
{
    enum log_level l;
    EXPECT_EQ(log_parse_level("debug", &l), 0);
    EXPECT_EQ(l, LOG_DEBUG);
    EXPECT_EQ(log_parse_level("LOUD", &l), -1);
}

/* Request-sized allocations fail with ERR_DEVICE_OOM and a torch-shaped message. */
static void test_alloc_try(void)
{
    long live = alloc_live_count();
    struct err e = {0};
    void *p = (void *)1;
    ok(alloc_host_available() > ALLOC_HOST_MARGIN, "host memory available: %zu",
       alloc_host_available());
    EXPECT_EQ(alloc_host_check(1 << 20, NULL), 0);
    EXPECT_EQ(xtry_malloc((size_t)1 << 62, &p, &e), ERR_DEVICE_OOM);
    ok(p == NULL, "no pointer on failure");
    ok(strstr(e.msg, "Allocation on device cpu") && strstr(e.msg, "tried to allocate 4294967296.00 GiB"),
       "message in the OOM shape: %s", e.msg);
    err_clear(&e);
    EXPECT_EQ(xtry_calloc(SIZE_MAX / 2, 4, &p, &e), ERR_DEVICE_OOM); /* count * size overflows */
    EXPECT_EQ(xtry_malloc_aligned(64, SIZE_MAX - 8, &p, NULL), ERR_DEVICE_OOM);
    if (alloc_host_available() < ((size_t)200 << 30)) {
        err_clear(&e);
        EXPECT_EQ(alloc_host_check_n((size_t)1 << 36, 4, &e), ERR_DEVICE_OOM);
        ok(strstr(e.msg, "tried to allocate 256.00 GiB (274877906944 bytes) with "),
           "EmptyLatentImage's 256 GiB: %s", e.msg);
    }
    EXPECT_EQ(alloc_live_count(), live);
    float *f;
    EXPECT_EQ(xtry_calloc(100, sizeof(float), (void **)&f, NULL), 0);
    ok(f && f[0] == 0.0f && f[99] == 0.0f, "calloc'd memory is zeroed");
    xfree(f);
    EXPECT_EQ(xtry_malloc_aligned(256, 1000, &p, NULL), 0);
    ok(((uintptr_t)p & 255) == 0, "aligned try allocation is aligned");
    xfree_aligned(p);
    EXPECT_EQ(alloc_live_count(), live);
}

/* "THPeligible: 1" in /proc/self/smaps for the mapping that holds p: 1, 0, or -1 unknown. */
static int thp_eligible(const void *p)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    char line[512], perms[8];
    int in = 0, r = -1, v;
    unsigned long lo, hi;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3) /* a mapping's first line */
            in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        else if (in && sscanf(line, "THPeligible: %d", &v) == 1) {
            r = v;
            break;
        }
    }
    fclose(f);
    return r;
}

/* The kernel's THP mode is "always" or "madvise" (a bracketed choice in the file). */
static int thp_on(void)
{
    char buf[128] = "";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return strstr(buf, "[always]") || strstr(buf, "[madvise]");
}

/* xtry_map: page-aligned blocks, huge-page-aligned and THP-advised from ALLOC_HUGE. */
static void test_alloc_map(void)
{
    long live = alloc_live_count();
    long psz = sysconf(_SC_PAGESIZE);
    unsigned char *p = NULL, *h = NULL;
    EXPECT_EQ(xtry_map(ALLOC_HUGE / 2 + 100, (void **)&p, NULL), 0);
    ok(p && ((uintptr_t)p & (uintptr_t)(psz - 1)) == 0, "small mapping page-aligned");
    ok(p[0] == 0 && p[ALLOC_HUGE / 2 + 99] == 0, "mapped memory starts zeroed");
    p[ALLOC_HUGE / 2 + 99] = 7;
    EXPECT_EQ(alloc_live_count(), live + 1);
    size_t hn = 3 * ALLOC_HUGE + 12345;
    EXPECT_EQ(xtry_map(hn, (void **)&h, NULL), 0);
    ok(h && ((uintptr_t)h & (ALLOC_HUGE - 1)) == 0, "large mapping aligned to a huge page");
    memset(h, 1, hn);
    if (thp_on())
        ok(thp_eligible(h) == 1, "large mapping advised for huge pages (THPeligible %d)",
           thp_eligible(h));
    xunmap(h, hn);
    xunmap(p, ALLOC_HUGE / 2 + 100);
    xunmap(NULL, 5);
    EXPECT_EQ(alloc_live_count(), live);
    struct err e = {0};
    void *q = (void *)1;
    EXPECT_EQ(xtry_map((size_t)1 << 62, &q, &e), ERR_DEVICE_OOM);
    ok(q == NULL && strstr(e.msg, "Allocation on device cpu"), "huge map refused: %s", e.msg);
    EXPECT_EQ(alloc_live_count(), live);
}

/* xmap_grow: contents kept, the old block's pages moved (its addresses unmapped, not
 * copied and freed later), one live block throughout, nothing changed when it fails. */
static void test_alloc_map_grow(void)
{
    long live = alloc_live_count();
    long psz = sysconf(_SC_PAGESIZE);
    unsigned char *p = NULL, vec[1];
    size_t n = 0, sizes[2] = {3 * ALLOC_HUGE + 5, 5 * ALLOC_HUGE};
    EXPECT_EQ(xmap_grow((void **)&p, &n, ALLOC_HUGE / 2 + 100, NULL), 0);
    ok(p && n == ALLOC_HUGE / 2 + 100 && p[n - 1] == 0, "first grow maps %zu zeroed bytes", n);
    p[0] = 3;
    p[n - 1] = 4;
    EXPECT_EQ(alloc_live_count(), live + 1);
    for (int i = 0; i < 2; i++) {
        unsigned char *old = p;
        size_t was = n;
        EXPECT_EQ(xmap_grow((void **)&p, &n, sizes[i], NULL), 0);
        ok(p != old && n == sizes[i] && ((uintptr_t)p & (ALLOC_HUGE - 1)) == 0,
           "grown to %zu bytes, huge-page aligned", n);
        ok(p[0] == 3 && p[was - 1] == 4 && p[n - 1] == 0, "contents kept, the rest zeroed");
        ok(mincore(old, (size_t)psz, vec) == -1 && errno == ENOMEM,
           "the old block's addresses are unmapped");
        EXPECT_EQ(alloc_live_count(), live + 1);
        p[n - 1] = 4;
    }
    struct err e = {0};
    unsigned char *keep = p;
    EXPECT_EQ(xmap_grow((void **)&p, &n, (size_t)1 << 62, &e), ERR_DEVICE_OOM);
    ok(p == keep && n == sizes[1] && p[0] == 3, "a failed grow leaves the block as it was");
    xunmap(p, n);
    EXPECT_EQ(alloc_live_count(), live);
}

/* Under RLIMIT_AS a size that would pass MemAvailable is refused before malloc. */
static void test_alloc_rlimit(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit rl;
        long pages = 0;
        FILE *f = fopen("/proc/self/statm", "r");
        if (!f || fscanf(f, "%ld", &pages) != 1)
            _exit(77);
        fclose(f);
        rl.rlim_cur = rl.rlim_max = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + (512 << 20);
        if (setrlimit(RLIMIT_AS, &rl) != 0)
            _exit(77);
        void *p;
        struct err e = {0};
        int rc = xtry_malloc((size_t)1 << 30, &p, &e);
        _exit(rc == ERR_DEVICE_OOM && alloc_host_available() <= ((size_t)512 << 20) ? 0 : 1);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    ok(WIFEXITED(st) && (WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == 77),
       "1 GiB refused under a 512 MiB address-space limit (status %d)", st);
}

static void test_bytesize(void)
{
    size_t v = 0;
    EXPECT_OK(bytesize_parse("1073741824", &v));
    EXPECT_EQ(v, (size_t)1073741824);
    EXPECT_OK(bytesize_parse("512M", &v));
    EXPECT_EQ(v, (size_t)512 << 20);
    EXPECT_OK(bytesize_parse("1.5GiB", &v));
    EXPECT_EQ(v, (size_t)3 << 29);
    EXPECT_OK(bytesize_parse("64k", &v));
    EXPECT_EQ(v, (size_t)64 << 10);
    const char *bad[] = {"", "12Q", "-5", "G", " 5", "inf", "5G trailing"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        EXPECT_EQ(bytesize_parse(bad[i], &v), ERR_INVALID);
}

static void test_pynum(void)
{
    const struct { double d; const char *s; } f[] = {
        {8.0, "8.0"}, {0.1, "0.1"}, {1e-5, "1e-05"}, {1e16, "1e+16"}, {-0.0, "-0.0"},
        {123.456, "123.456"}, {1.5e-7, "1.5e-07"}, {1e15, "1000000000000000.0"},
    };
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
        struct buf b;
        buf_init(&b);
        pynum_format_float(f[i].d, &b);
        ok(!strcmp(b.ptr, f[i].s), "repr(%.17g) = %s (got %s)", f[i].d, f[i].s, b.ptr);
        buf_release(&b);
    }
    double d = 0;
    EXPECT_OK(pynum_parse_float(" 1_000.5 ", &d));
    ok(d == 1000.5, "float(' 1_000.5 ') = 1000.5");
    EXPECT_OK(pynum_parse_float("-Infinity", &d));
    ok(isinf(d) && d < 0, "float('-Infinity') = -inf");
    const char *bad[] = {"", "0x10", "1__0", "1e", "nan(1)", "1 2", "_1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ok(pynum_parse_float(bad[i], &d) < 0, "float('%s') is a ValueError", bad[i]);
}

static void test_clock_uuid(void)
{
    int64_t a = clock_mono_ms();
    ok(clock_mono_ms() >= a && clock_wall_ms() > 1600000000000ll, "clocks read sensibly");
    char u[UUID_STR_SIZE], h[UUID_STR_SIZE];
    uuid4_format(u, 1);
    uuid4_format(h, 0);
    ok(strlen(u) == 36 && u[14] == '4' && strlen(h) == 32, "uuid4 forms (%s, %s)", u, h);
}

int main(void)
{
    long live0 = alloc_live_count();
    test_err();
    test_buf();
    test_log();
    test_read_file();
    test_afile();
    test_alloc_try();
    test_alloc_rlimit();
    test_alloc_map();
    test_alloc_map_grow();
    test_bytesize();
    test_pynum();
    test_clock_uuid();
    void *p = xmalloc_aligned(64, 100);
    ok(((uintptr_t)p & 63) == 0, "aligned allocation is aligned");
    xfree_aligned(p);
    EXPECT_EQ(alloc_live_count(), live0);
    return harness_done();
}

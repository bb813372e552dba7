/*
 * test_device — the device layer (device/): spec parsing, exact accounting and
 * budget enforcement, peak tracking, no leaks over many cycles, async copies ordered
 * by events on the sim device (copy threads), and the same API on cpu (and on CUDA
 * when a GPU is present).
 */
#include <pthread.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"
#include "device.h"
#include "harness.h"

static void test_open_errors(void)
{
    struct dev *d = NULL;
    struct err e = {0};
    EXPECT_EQ(dev_open("bogus", 0, &d, &e), ERR_INVALID);
    ok(d == NULL && strstr(e.msg, "bogus") != NULL, "unknown device message: %s", e.msg);
    err_clear(&e);
    EXPECT_EQ(dev_open("sim:lots", 0, &d, &e), ERR_INVALID);
    ok(strstr(e.msg, "sim:lots") != NULL, "bad sim size message: %s", e.msg);
    err_clear(&e);
    EXPECT_EQ(dev_open("sim", 0, &d, &e), ERR_INVALID);
    err_clear(&e);
    EXPECT_EQ(dev_open("cuda:x", 0, &d, &e), ERR_INVALID);
    err_clear(&e);
    if (dev_cuda_count() == 0) {
        int rc = dev_open("cuda", 0, &d, &e);
        ok(rc == ERR_UNSUPPORTED || rc == ERR_NOT_FOUND, "cuda without a GPU fails (%d: %s)",
           rc, e.msg);
        err_clear(&e);
        EXPECT_OK(dev_open("auto", 0, &d, &e));
        EXPECT_EQ(dev_kind(d), DEV_KIND_CPU);
        dev_close(d);
    }
}

static void test_budget_exact(void)
{
    struct dev *d;
    struct err e = {0};
    EXPECT_OK(dev_open("sim:1M", 0, &d, &e));
    EXPECT_EQ(dev_kind(d), DEV_KIND_SIM);
    EXPECT_EQ(dev_bytes_budget(d), 1 << 20);
    void *a, *b, *c;
    EXPECT_OK(dev_alloc(d, 600000, &a));
    ok(((uintptr_t)a & 255) == 0, "allocation is 256-byte aligned");
    EXPECT_EQ(dev_bytes_used(d), 600000);
    /* 600000 + 448577 = 1048577: one byte over. */
    EXPECT_EQ(dev_alloc(d, 448577, &b), ERR_DEVICE_OOM);
    ok(b == NULL, "failed alloc sets NULL");
    EXPECT_EQ(dev_bytes_used(d), 600000);
    EXPECT_OK(dev_alloc(d, 448576, &b)); /* exactly the budget */
    EXPECT_EQ(dev_bytes_used(d), 1 << 20);
    EXPECT_EQ(dev_alloc(d, 1, &c), ERR_DEVICE_OOM);
    EXPECT_EQ(dev_alloc(d, SIZE_MAX, &c), ERR_DEVICE_OOM);
    size_t fr, tot;
    EXPECT_OK(dev_mem_info(d, &fr, &tot));
    EXPECT_EQ(fr, 0);
    EXPECT_EQ(tot, 1 << 20);
    memset(a, 1, 600000); /* the memory is real and host-addressable */
    memset(b, 2, 448576);
    dev_free(d, a);
    EXPECT_EQ(dev_bytes_used(d), 448576);
    EXPECT_EQ(dev_bytes_peak(d), 1 << 20);
    dev_peak_reset(d);
    EXPECT_EQ(dev_bytes_peak(d), 448576);
    dev_free(d, b);
    dev_free(d, NULL);
    EXPECT_EQ(dev_bytes_used(d), 0);
    dev_close(d);

    /* A caller budget below the sim size wins; cpu honours a budget too. */
    EXPECT_OK(dev_open("sim:1G", 4096, &d, &e));
    EXPECT_EQ(dev_bytes_budget(d), 4096);
    EXPECT_EQ(dev_alloc(d, 4097, &a), ERR_DEVICE_OOM);
    dev_close(d);
    EXPECT_OK(dev_open("cpu", 8192, &d, &e));
    EXPECT_OK(dev_alloc(d, 8192, &a));
    EXPECT_EQ(dev_alloc(d, 1, &b), ERR_DEVICE_OOM);
    EXPECT_OK(dev_mem_info(d, &fr, &tot));
    EXPECT_EQ(tot, 8192);
    EXPECT_EQ(fr, 0);
    dev_free(d, a);
    dev_close(d);
}

static void test_no_leak_cycles(const char *spec)
{
    long live0 = alloc_live_count();
    struct dev *d;
    struct err e = {0};
    EXPECT_OK(dev_open(spec, 0, &d, &e));
    void *p[8];
    int fails = 0;
    for (int i = 0; i < 1000; i++) {
        for (int j = 0; j < 8; j++)
            fails += dev_alloc(d, (size_t)(j + 1) * 4099 + (size_t)i, &p[j]) < 0;
        for (int j = 7; j >= 0; j -= 2)
            dev_free(d, p[j]);
        for (int j = 0; j < 8; j += 2)
            dev_free(d, p[j]);
    }
    EXPECT_EQ(fails, 0);
    EXPECT_EQ(dev_bytes_used(d), 0);
    EXPECT_EQ(dev_alloc_count(d), 0);
    ok(dev_bytes_peak(d) >= 8 * 4099, "peak covers one round (%zu)", dev_bytes_peak(d));
    dev_close(d);
    EXPECT_EQ(alloc_live_count(), live0);
}

/*
 * Ordering on sim: a big copy on stream A, event after it; stream B waits on the
 * event and then copies A's destination onward. B's result must be A's data, which
 * only holds if the wait really orders B after A (B's thread would otherwise copy
 * stale bytes: the destination starts zeroed).
 */
static void test_async_order(const char *spec)
{
    struct dev *d;
    struct err e = {0};
    EXPECT_OK(dev_open(spec, 0, &d, &e));
    size_t n = 32u << 20;
    unsigned char *host, *back;
    int pinned;
    EXPECT_OK(dev_host_alloc(d, n, (void **)&host, &pinned));
    EXPECT_OK(dev_host_alloc(d, n, (void **)&back, &pinned));
    for (size_t i = 0; i < n; i++)
        host[i] = (unsigned char)(i * 7 + 3);
    memset(back, 0, n);
    void *d1, *d2;
    EXPECT_OK(dev_alloc(d, n, &d1));
    EXPECT_OK(dev_alloc(d, n, &d2));
    if (dev_is_host(d)) {
        memset(d1, 0, n);
        memset(d2, 0, n);
    }
    struct dev_stream *sa, *sb;
    struct dev_event *ea, *eb, *never;
    EXPECT_OK(dev_stream_new(d, &sa));
    EXPECT_OK(dev_stream_new(d, &sb));
    EXPECT_OK(dev_event_new(d, &ea));
    EXPECT_OK(dev_event_new(d, &eb));
    EXPECT_OK(dev_event_new(d, &never));
    EXPECT_EQ(dev_event_query(never), 1); /* never recorded: complete, as in CUDA */

    for (int round = 0; round < 3; round++) {
        EXPECT_OK(dev_copy_async(d, sa, DEV_COPY_H2D, d1, host, n));
        EXPECT_OK(dev_event_record(ea, sa));
        EXPECT_OK(dev_stream_wait_event(sb, ea));
        EXPECT_OK(dev_copy_async(d, sb, DEV_COPY_D2D, d2, d1, n));
        EXPECT_OK(dev_copy_async(d, sb, DEV_COPY_D2H, back, d2, n));
        EXPECT_OK(dev_event_record(eb, sb));
        /* The compute stream waits too: afterwards the caller may read. */
        EXPECT_OK(dev_stream_wait_event(dev_compute_stream(d), eb));
        EXPECT_OK(dev_event_sync(eb));
        EXPECT_EQ(dev_event_query(eb), 1);
        EXPECT_EQ(dev_event_query(ea), 1);
        ok(memcmp(back, host, n) == 0, "%s round %d: copy chain ordered by events", spec,
           round);
        memset(back, 0, n);
        host[round] ^= 0xff;
    }

    /* A stream waiting on an event recorded on another, later-fed stream. */
    EXPECT_OK(dev_event_record(ea, dev_compute_stream(d)));
    EXPECT_OK(dev_stream_wait_event(sb, ea));
    EXPECT_OK(dev_stream_sync(sb));
    EXPECT_OK(dev_stream_sync(sa));

    dev_event_free(never);
    dev_event_free(ea);
    dev_event_free(eb);
    dev_stream_free(sa);
    /* sb is left for dev_close to free. */
    dev_free(d, d1);
    dev_free(d, d2);
    dev_host_free(d, host);
    dev_host_free(d, back);
    EXPECT_EQ(dev_bytes_used(d), 0);
    dev_close(d);
}

/* On sim an async copy returns before it is done: the copy thread runs it. */
static void test_sim_overlap(void)
{
    struct dev *d;
    struct err e = {0};
    EXPECT_OK(dev_open("sim:512M", 0, &d, &e));
    size_t n = 64u << 20;
    void *src, *dst;
    int pinned;
    EXPECT_OK(dev_host_alloc(d, n, &src, &pinned));
    EXPECT_EQ(pinned, 1);
    memset(src, 5, n);
    EXPECT_OK(dev_alloc(d, n, &dst));
    struct dev_stream *s;
    struct dev_event *ev;
    EXPECT_OK(dev_stream_new(d, &s));
    EXPECT_OK(dev_event_new(d, &ev));
    /* Several copies queued; the event completes only after all of them. */
    for (int i = 0; i < 8; i++)
        EXPECT_OK(dev_copy_async(d, s, DEV_COPY_H2D, dst, src, n));
    EXPECT_OK(dev_event_record(ev, s));
    int pending_seen = dev_event_query(ev) == 0;
    EXPECT_OK(dev_event_sync(ev));
    ok(pending_seen, "event pending right after queuing 512 MiB of copies");
    EXPECT_EQ(dev_event_query(ev), 1);
    ok(((unsigned char *)dst)[n - 1] == 5, "copies landed");
    dev_event_free(ev);
    dev_stream_free(s);
    dev_free(d, dst);
    dev_host_free(d, src);
    dev_close(d);
}

/* The budget on CUDA: exact accounting of what callers asked for, whatever the
 * sub-allocator rounds to, and empty blocks go back to the driver. */
static void test_cuda_budget(void)
{
    struct dev *d;
    struct err e = {0};
    EXPECT_OK(dev_open("cuda:0", 1 << 20, &d, &e));
    void *a, *b, *c;
    EXPECT_OK(dev_alloc(d, 1000, &a));
    EXPECT_OK(dev_alloc(d, (1 << 20) - 1000, &b));
    EXPECT_EQ(dev_bytes_used(d), 1 << 20);
    EXPECT_EQ(dev_alloc(d, 1, &c), ERR_DEVICE_OOM);
    size_t fr0, fr1, tot;
    EXPECT_OK(dev_mem_info(d, &fr0, &tot));
    EXPECT_EQ(fr0, 0); /* budget-capped */
    dev_free(d, a);
    dev_free(d, b);
    EXPECT_EQ(dev_bytes_used(d), 0);
    EXPECT_OK(dev_mem_info(d, &fr1, &tot));
    EXPECT_EQ(fr1, 1 << 20);
    dev_close(d);
}

int main(void)
{
    long live0 = alloc_live_count();
    test_open_errors();
    test_budget_exact();
    test_no_leak_cycles("sim:64M");
    test_no_leak_cycles("cpu");
    test_async_order("sim:256M");
    test_async_order("cpu");
    test_sim_overlap();
    if (dev_cuda_count() > 0) {
        test_cuda_budget();
        test_no_leak_cycles("cuda:0");
        test_async_order("cuda:0");
    } else {
        printf("# no CUDA GPU: cuda cases skipped\n");
    }
    EXPECT_EQ(alloc_live_count(), live0);
    return harness_done();
}

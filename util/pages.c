/*
 * pages.c — madvise and /proc/self/pagemap over page-aligned covers (see pages.h).
 */
#include "pages.h"

#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

static size_t page_size(void)
{
    static size_t ps;
    if (!ps) {
        long v = sysconf(_SC_PAGESIZE);
        ps = v > 0 ? (size_t)v : 4096;
    }
    return ps;
}

/* The page-aligned cover of [p, p + n): *start and the number of bytes. */
static size_t cover(const void *p, size_t n, uintptr_t *start)
{
    size_t ps = page_size();
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)(ps - 1);
    uintptr_t b = ((uintptr_t)p + n + ps - 1) & ~(uintptr_t)(ps - 1);
    *start = a;
    return (size_t)(b - a);
}

int pages_drop(const void *p, size_t n)
{
    if (!p || !n)
        return 0;
    uintptr_t a;
    size_t len = cover(p, n, &a);
    return madvise((void *)a, len, MADV_DONTNEED) == 0 ? 0 : -1;
}

size_t pages_mapped_bytes(const void *p, size_t n)
{
    if (!p || !n)
        return 0;
    uintptr_t a;
    size_t len = cover(p, n, &a), ps = page_size(), mapped = 0;
    int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return (size_t)-1;
    uint64_t ent[512];
    size_t npages = len / ps;
    for (size_t i = 0; i < npages;) {
        size_t k = npages - i < 512 ? npages - i : 512;
        off_t off = (off_t)((a / ps + i) * sizeof(uint64_t));
        ssize_t got = pread(fd, ent, k * sizeof(uint64_t), off);
        if (got != (ssize_t)(k * sizeof(uint64_t))) {
            close(fd);
            return (size_t)-1;
        }
        for (size_t j = 0; j < k; j++)
            mapped += (ent[j] >> 63) ? ps : 0; /* bit 63: present */
        i += k;
    }
    close(fd);
    return mapped;
}

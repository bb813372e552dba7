/*
 * pages — this process's view of a range of a file mapping: dropping its pages and
 * counting the ones mapped.
 *
 * Why: model weights are borrowed from read-only file mappings (models/safetensors.h),
 * and every page of such a mapping that this process has read counts in its RSS until
 * it is unmapped. pages_drop() unmaps them (madvise MADV_DONTNEED): a clean file page
 * stays in the page cache, so the next read maps it again with a minor fault and no
 * I/O. The contents never change.
 *
 * Invariant the caller keeps: the range lies in a read-only file mapping (PROT_READ,
 * never written). On anonymous or written private memory MADV_DONTNEED throws the data
 * away (the next read sees zeros or the file's bytes). Ranges are widened to whole
 * pages: the pages at the ends may hold a neighbour's bytes, which is harmless under
 * the invariant (the neighbour's next read maps them again).
 *
 * Threads: any. Dropping while another thread reads the range is safe (that read
 * faults the page back in).
 */
#ifndef LATENTD_UTIL_PAGES_H
#define LATENTD_UTIL_PAGES_H

#include <stddef.h>

/* Unmap the pages covering [p, p + n) from this process (see above). Returns 0, or
 * -1 if madvise refused (then nothing is promised about the range). n = 0: no-op. */
int pages_drop(const void *p, size_t n);

/* Bytes of the pages covering [p, p + n) that are mapped in this process now (read
 * from /proc/self/pagemap: present in the page table), or (size_t)-1 when that file
 * cannot be read. For tests and figures: it costs a read of 8 bytes per page. */
size_t pages_mapped_bytes(const void *p, size_t n);

#endif

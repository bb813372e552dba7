/*
 * strhash — FNV-1a (64-bit), the one string hash of the project's hash tables
 * (prompt node ids, node classes, weight names, the tokenizer's vocabulary) and
 * of the checkpoint generator's per-tensor seeds.
 *
 * Values are stable across runs and builds: gen_ckpt derives its random
 * weights from them, so changing this function changes every generated
 * checkpoint (and the committed reference fixtures made from them).
 * Pure functions; any thread.
 */
#ifndef LATENTD_UTIL_STRHASH_H
#define LATENTD_UTIL_STRHASH_H

#include <stddef.h>
#include <stdint.h>

#define STRHASH_OFFSET 0xcbf29ce484222325ull /* FNV-1a 64-bit offset basis */
#define STRHASH_PRIME 0x100000001b3ull

static inline uint64_t strhash_bytes(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = STRHASH_OFFSET;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * STRHASH_PRIME;
    return h;
}

/* Of a NUL-terminated string (the NUL not included). */
static inline uint64_t strhash(const char *s)
{
    uint64_t h = STRHASH_OFFSET;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * STRHASH_PRIME;
    return h;
}

#endif

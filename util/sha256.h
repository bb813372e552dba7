/*
 * sha256 — SHA-256 (FIPS 180-4) of memory and of files.
 *
 * Used for IS_CHANGED fingerprints (LoadImage re-runs when the file's bytes
 * change) and anywhere a content hash is wanted. Threads: any; the context
 * belongs to its caller.
 */
#ifndef LATENTD_UTIL_SHA256_H
#define LATENTD_UTIL_SHA256_H

#include <stddef.h>
#include <stdint.h>

struct sha256 {
    uint32_t h[8];
    uint64_t len;     /* bytes hashed so far */
    uint8_t buf[64];
    size_t nbuf;
};

void sha256_init(struct sha256 *s);
void sha256_update(struct sha256 *s, const void *data, size_t n);
void sha256_final(struct sha256 *s, uint8_t out[32]);

/* Hash a whole file. Returns 0, or ERR_IO when it cannot be read. */
int sha256_file(const char *path, uint8_t out[32]);

#endif

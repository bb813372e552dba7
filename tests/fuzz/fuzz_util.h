/*
 * fuzz_util — small helpers shared by the libFuzzer drivers in tests/fuzz/.
 *
 * A driver is one LLVMFuzzerTestOneInput(): it builds everything it needs for the
 * input, runs the parser, checks the parser's contract with FUZZ_CHECK (a broken
 * contract aborts, which libFuzzer reports as a crash) and frees everything again,
 * so that LeakSanitizer and the alloc_live_count() balance both apply per input.
 * Long-lived state (a loaded tokenizer, a graph context) is created once on first
 * use and released at exit.
 *
 * Threads: single-threaded, like libFuzzer's -jobs=1 runs.
 */
#ifndef LATENTD_TESTS_FUZZ_UTIL_H
#define LATENTD_TESTS_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "log.h"

#define FUZZ_CHECK(x)                                                                  \
    do {                                                                               \
        if (!(x)) {                                                                    \
            fprintf(stderr, "fuzz check failed: %s (%s:%d)\n", #x, __FILE__, __LINE__); \
            abort();                                                                   \
        }                                                                              \
    } while (0)

/* The input as a NUL-terminated string (xmalloc'ed, caller frees with xfree). Bytes
 * after an embedded NUL are kept but invisible to C string parsers. */
static inline char *fuzz_strndup(const uint8_t *data, size_t n)
{
    char *s = xmalloc(n + 1);
    memcpy(s, data, n);
    s[n] = '\0';
    return s;
}

/* Quiet logging once: parsers warn about bad input, which would flood the fuzzer's output
 * and slow it down. LATENTD_FUZZ_LOG=1 keeps the messages for debugging a finding. */
static inline void fuzz_quiet_logs(void)
{
    if (!getenv("LATENTD_FUZZ_LOG"))
        log_set_level(LOG_CRITICAL);
}

#endif

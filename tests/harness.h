/*
 * harness — a tiny TAP-style test harness (libuv test/task.h in spirit).
 *
 * Usage: one test program per module; each check prints "ok N - what" or
 * "not ok N - what" with both values; main() returns harness_done(), which is
 * non-zero if any check failed. A test that cannot run here (no GPU, missing
 * optional tool) calls SKIP("why"), which exits 77 (CTest SKIP_RETURN_CODE).
 */
#ifndef LATENTD_TESTS_HARNESS_H
#define LATENTD_TESTS_HARNESS_H

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int harness__n, harness__failed;

#define ok(cond, ...)                                                                  \
    do {                                                                               \
        int ok__c = !!(cond);                                                          \
        harness__n++;                                                                  \
        if (!ok__c)                                                                    \
            harness__failed++;                                                         \
        printf("%sok %d - ", ok__c ? "" : "not ", harness__n);                         \
        printf(__VA_ARGS__);                                                           \
        printf(ok__c ? "\n" : "  (%s:%d)\n", __FILE__, __LINE__);                      \
    } while (0)

#define EXPECT_EQ(a, b)                                                                \
    do {                                                                               \
        long long ea__ = (long long)(a), eb__ = (long long)(b);                        \
        ok(ea__ == eb__, "%s == %s (got %lld, want %lld)", #a, #b, ea__, eb__);        \
    } while (0)

#define EXPECT_STR(a, b)                                                               \
    do {                                                                               \
        const char *ea__ = (a), *eb__ = (b);                                           \
        ok(ea__ && eb__ && strcmp(ea__, eb__) == 0, "%s == \"%s\" (got \"%s\")", #a,    \
           eb__ ? eb__ : "(null)", ea__ ? ea__ : "(null)");                            \
    } while (0)

#define EXPECT_OK(expr)                                                                \
    do {                                                                               \
        long long eo__ = (long long)(expr);                                            \
        ok(eo__ >= 0, "%s succeeds (got %lld)", #expr, eo__);                          \
    } while (0)

#define EXPECT_NEAR(a, b, tol)                                                         \
    do {                                                                               \
        double en_a = (double)(a), en_b = (double)(b);                                 \
        ok(fabs(en_a - en_b) <= (tol), "%s ~= %s (got %.9g, want %.9g, tol %g)", #a,   \
           #b, en_a, en_b, (double)(tol));                                             \
    } while (0)

#define SKIP(...)                                                                      \
    do {                                                                               \
        printf("1..0 # SKIP ");                                                        \
        printf(__VA_ARGS__);                                                           \
        printf("\n");                                                                  \
        exit(77);                                                                      \
    } while (0)

/* The unit tests' random values: xorshift64 on *state (seeded nonzero by the caller, one
 * stream per test program so its data never depends on another's), 24 bits in [-1, 1). */
static inline float harness_frand(uint64_t *state)
{
    uint64_t r = *state;
    r ^= r << 13;
    r ^= r >> 7;
    r ^= r << 17;
    *state = r;
    return (float)((r >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static inline int harness_done(void)
{
    printf("1..%d\n", harness__n);
    if (harness__failed)
        printf("# %d of %d checks failed\n", harness__failed, harness__n);
    return harness__failed ? 1 : 0;
}

#endif

/*
 * safetensors_guard.c — SIGBUS on a registered file mapping becomes a flag
 * (see safetensors_guard.h).
 */
#include "safetensors_guard.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

/*
 * A slot is free while base == 0. len is written before base (release) and read
 * after it (acquire), so the handler never pairs a new base with an old length.
 */
struct guard_slot {
    _Atomic uintptr_t base;
    _Atomic size_t len;
    atomic_int hit;
};

static struct guard_slot slots[ST_GUARD_SLOTS];

/*
 * The handler is not instrumented by ASan: under ASan each thread takes signals on
 * an alternate stack the sanitizer carved from memory its shadow marks as heap
 * redzone, so the handler's first read of the kernel's siginfo there was reported as
 * a heap-buffer-overflow and the report itself faulted ("nested bug"), killing the
 * server that the handler exists to keep alive. It only reads siginfo and the slots.
 */
#if defined(__SANITIZE_ADDRESS__)
#define GUARD_NO_ASAN __attribute__((no_sanitize_address))
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GUARD_NO_ASAN __attribute__((no_sanitize_address))
#endif
#endif
#ifndef GUARD_NO_ASAN
#define GUARD_NO_ASAN
#endif
static struct sigaction prev_action; /* written once, before any slot is used */
static pthread_once_t install_once = PTHREAD_ONCE_INIT;
static int installed;

/* Hand a fault that is not ours to whoever handled SIGBUS before us. */
GUARD_NO_ASAN static void chain(int sig, siginfo_t *info, void *uctx)
{
    if (prev_action.sa_flags & SA_SIGINFO) {
        prev_action.sa_sigaction(sig, info, uctx);
        return;
    }
    if (prev_action.sa_handler != SIG_DFL && prev_action.sa_handler != SIG_IGN) {
        prev_action.sa_handler(sig);
        return;
    }
    /* Default action: restore it and return; the fault repeats and kills as before. */
    sigaction(SIGBUS, &prev_action, NULL);
}

GUARD_NO_ASAN static void on_sigbus(int sig, siginfo_t *info, void *uctx)
{
    uintptr_t a = (uintptr_t)info->si_addr;
    for (int i = 0; i < ST_GUARD_SLOTS; i++) {
        uintptr_t base = atomic_load_explicit(&slots[i].base, memory_order_acquire);
        size_t len = atomic_load_explicit(&slots[i].len, memory_order_relaxed);
        if (!base || a < base || a - base >= len)
            continue;
        /* Zeros over the whole mapping, not just this page: the rest of the file is
         * as untrustworthy, and one fault per mapping keeps the handler rare. Two
         * threads may both get here; mapping zeros twice is harmless. */
        void *p = mmap((void *)base, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                       -1, 0);
        if (p == MAP_FAILED)
            break; /* cannot repair: let the previous handler (or death) have it */
        atomic_store(&slots[i].hit, 1);
        return;
    }
    chain(sig, info, uctx);
}

static void install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_sigbus;
    /* SA_ONSTACK: the faulting thread may be running a kernel whose rsp points into the
     * heap (oneDNN's JIT sgemm); its frame must go to the thread's alternate stack, which
     * tensor/cpu gives every thread before calling such code (util/altstack.h). */
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    installed = sigaction(SIGBUS, &sa, &prev_action) == 0;
}

int st__guard_add(void *base, size_t len)
{
    pthread_once(&install_once, install);
    if (!installed || !base || !len)
        return -1;
    for (int i = 0; i < ST_GUARD_SLOTS; i++) {
        uintptr_t expect = 0;
        /* Claim with a placeholder so that no other adder takes the slot, and the
         * handler, seeing base 1 with len 0, matches nothing. */
        if (!atomic_compare_exchange_strong(&slots[i].base, &expect, (uintptr_t)1))
            continue;
        atomic_store(&slots[i].hit, 0);
        atomic_store_explicit(&slots[i].len, len, memory_order_relaxed);
        atomic_store_explicit(&slots[i].base, (uintptr_t)base, memory_order_release);
        return i;
    }
    return -1;
}

void st__guard_remove(int slot)
{
    if (slot < 0 || slot >= ST_GUARD_SLOTS)
        return;
    atomic_store_explicit(&slots[slot].len, 0, memory_order_relaxed);
    atomic_store_explicit(&slots[slot].base, 0, memory_order_release);
}

int st__guard_hit(int slot)
{
    return slot >= 0 && slot < ST_GUARD_SLOTS && atomic_load(&slots[slot].hit);
}

/*
 * altstack — see altstack.h.
 */
#include "altstack.h"

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

/* Room for the kernel's frame (AVX-512 xsave state is ~2.7 KiB; AMX tiles add 8 KiB)
 * and a handler that calls mmap or chains to another; a guard page below catches an
 * overflow instead of letting it write into whatever lies there. */
#define ALTSTACK_SIZE (64 * 1024)

static _Thread_local int state; /* 0 unknown, 1 present, -1 failed */
static pthread_key_t key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static int key_ok;

static size_t guard_size(void)
{
    long pg = sysconf(_SC_PAGESIZE);
    return pg > 0 ? (size_t)pg : 4096;
}

/* Thread exit: stop using the stack before unmapping it. */
static void release(void *base)
{
    stack_t off = {.ss_flags = SS_DISABLE};
    sigaltstack(&off, NULL);
    munmap(base, ALTSTACK_SIZE + guard_size());
}

static void make_key(void)
{
    key_ok = pthread_key_create(&key, release) == 0;
}

int altstack_ensure(void)
{
    if (state)
        return state > 0 ? 0 : -1;
    stack_t cur;
    if (sigaltstack(NULL, &cur) == 0 && !(cur.ss_flags & SS_DISABLE)) {
        state = 1; /* someone else's (ASan's): keep it */
        return 0;
    }
    pthread_once(&key_once, make_key);
    size_t guard = guard_size();
    void *base = key_ok ? mmap(NULL, ALTSTACK_SIZE + guard, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                        : MAP_FAILED;
    if (base == MAP_FAILED) {
        state = -1;
        return -1;
    }
    stack_t ss = {.ss_sp = (uint8_t *)base + guard, .ss_size = ALTSTACK_SIZE, .ss_flags = 0};
    if (mprotect(base, guard, PROT_NONE) != 0 || sigaltstack(&ss, NULL) != 0) {
        munmap(base, ALTSTACK_SIZE + guard);
        state = -1;
        return -1;
    }
    pthread_setspecific(key, base);
    state = 1;
    return 0;
}

int altstack_present(void)
{
    stack_t cur;
    return sigaltstack(NULL, &cur) == 0 && !(cur.ss_flags & SS_DISABLE);
}

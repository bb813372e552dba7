/*
 * altstack — a per-thread alternate signal stack.
 *
 * Why: a handler runs on the interrupted thread's stack pointer unless it was
 * installed with SA_ONSTACK and the thread has an alternate stack. Some compute
 * kernels point rsp away from the thread's stack: oneDNN's JIT sgemm, for K > 2048,
 * does `mov rsp, workspace` and uses a heap buffer as its stack. A SIGBUS taken there
 * (a model file truncated under its mapping, see models/safetensors_guard.h) had the
 * kernel push its ~2.5 KiB frame (registers, AVX-512 state) onto the heap below that
 * buffer, over other allocations' headers: glibc aborted later, somewhere else.
 *
 * So every thread that calls into such code calls altstack_ensure() first (tensor/cpu
 * does, before oneDNN and BLAS), and SIGBUS is handled with SA_ONSTACK. A thread that
 * already has an alternate stack (ASan gives each thread one) keeps it.
 *
 * Threads: per-thread state; the stack is unmapped when its thread exits.
 */
#ifndef LATENTD_UTIL_ALTSTACK_H
#define LATENTD_UTIL_ALTSTACK_H

/* Give the calling thread an alternate signal stack if it has none. Cheap after the
 * first call (one thread-local test). Returns 0, or -1 if none could be set up (then
 * signals use the interrupted stack, as without this module). */
int altstack_ensure(void);

/* 1 if the calling thread has an alternate signal stack (ours or another's). */
int altstack_present(void);

#endif

/*
 * safetensors_guard — private to safetensors*.c: turns a SIGBUS in a mapped model
 * file into a flag instead of a dead process.
 *
 * A read of a MAP_PRIVATE file mapping past the file's current end (another process
 * truncated it, or `cp` is rewriting it in place) or of a page the disk cannot return
 * raises SIGBUS in whichever thread touched it: model code, a BLAS worker, a copy.
 * Such reads happen anywhere compute happens, so there is no scope to siglongjmp out
 * of. Instead every mapping st_open() makes is registered here, and one process-wide
 * handler, when the faulting address lies inside a registered mapping, maps anonymous
 * zero pages over that whole mapping and marks it hit. The faulting instruction then
 * re-runs, reads zeros, and the computation ends normally with wrong numbers that
 * nobody sees: st_check() reports the hit, and the model's users fail the node
 * before returning anything computed from the file (patcher_acquire, the loaders).
 * Faults outside registered mappings go to the handler installed before ours
 * (ASan's, or the default action: the process dies with SIGBUS as before).
 *
 * Under ASan the handler coexists with ASan's own: with the default
 * ASAN_OPTIONS handle_sigbus=1 ASan lets us install ours and we chain to it; with
 * handle_sigbus=2 (exclusive) ASan keeps SIGBUS and a shrunk file still kills.
 *
 * The handler is installed with SA_ONSTACK: the faulting thread may be inside a kernel
 * that uses a heap buffer as its stack (oneDNN's sgemm), and the frame pushed below rsp
 * there corrupted the heap. Threads that call such code get an alternate stack first
 * (util/altstack.h).
 *
 * Threads: add/remove from any thread (lock-free slots); the handler runs in the
 * faulting thread and only reads the slots, calls mmap and sets a flag.
 */
#ifndef LATENTD_MODELS_SAFETENSORS_GUARD_H
#define LATENTD_MODELS_SAFETENSORS_GUARD_H

#include <stddef.h>

#define ST_GUARD_SLOTS 256 /* mappings open at once: one per cached model file */

/* Register [base, base + len) (page-aligned base). Returns a slot >= 0, or -1 when
 * all slots are in use or the handler cannot be installed. */
int st__guard_add(void *base, size_t len);
/* Forget a slot before its mapping is unmapped. -1 is a no-op. */
void st__guard_remove(int slot);
/* 1 if a SIGBUS hit the slot's mapping (its pages are zeros since). */
int st__guard_hit(int slot);

#endif

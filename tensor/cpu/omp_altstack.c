/*
 * omp_altstack — an alternate signal stack in each of OpenMP's worker threads.
 *
 * oneDNN (Debian's build) runs its parallel regions on libgomp's threads, which we do
 * not create. Before a oneDNN call that may read a model file's mapping in parallel,
 * one empty parallel region of the same width runs altstack_ensure() in every thread
 * of the caller's team (util/altstack.h says why). libgomp keeps a team's threads for
 * the calling thread's later regions, so this is done once per caller and width.
 * Built with -fopenmp (tensor/CMakeLists.txt) where oneDNN is.
 */
#include "../tensor_impl.h"

#include "altstack.h"

void cpu_omp_altstacks(int threads)
{
    static _Thread_local int done; /* the widest team prepared from this thread */
    altstack_ensure();
    if (threads <= done)
        return;
#ifdef _OPENMP
#pragma omp parallel num_threads(threads)
    altstack_ensure();
#endif
    done = threads;
}

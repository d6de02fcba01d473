/* Time and CPU affinity. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <time.h>

#include "native.h"

uint64_t cb_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double cb_span_seconds(const uint64_t *start, const uint64_t *end, size_t nthreads)
{
    uint64_t first = UINT64_MAX, last = 0;
    for (size_t i = 0; i < nthreads; i++) {
        first = start[i] < first ? start[i] : first;
        last = end[i] > last ? end[i] : last;
    }
    return (double)(last - first) * 1e-9;
}

int cb_pin_self(const int *cpus, size_t ncpus)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    for (size_t i = 0; i < ncpus; i++) {
        if (cpus[i] < 0 || cpus[i] >= CPU_SETSIZE)
            return EINVAL;
        CPU_SET(cpus[i], &set);
    }
    /* pid 0: the calling thread only, not the whole process. */
    return sched_setaffinity(0, sizeof set, &set) == 0 ? 0 : errno;
}

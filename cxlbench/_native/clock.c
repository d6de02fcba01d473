/* Time and CPU affinity. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>

#include "native.h"

uint64_t cb_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t cb_clock_ns(clockid_t id)
{
    struct timespec ts;
    if (clock_gettime(id, &ts) != 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t cb_thread_cpu_ns(void)
{
    return cb_clock_ns(CLOCK_THREAD_CPUTIME_ID);
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

int cb_start_pinned(pthread_t *tid, int cpu, void *(*fn)(void *), void *arg)
{
    pthread_attr_t attr;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_attr_init(&attr);
    pthread_attr_setaffinity_np(&attr, sizeof set, &set);   /* starts on its CPU */
    int err = pthread_create(tid, &attr, fn, arg);
    pthread_attr_destroy(&attr);
    return err;
}

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

void cb_pass_seconds(const uint64_t *start, const uint64_t *end, size_t nthreads, int passes,
                     double *seconds_out)
{
    for (int it = 0; it < passes; it++) {
        const uint64_t *s = start + (size_t)it * nthreads, *e = end + (size_t)it * nthreads;
        uint64_t first = UINT64_MAX, last = 0;
        for (size_t i = 0; i < nthreads; i++) {
            first = s[i] < first ? s[i] : first;
            last = e[i] > last ? e[i] : last;
        }
        seconds_out[it] = (double)(last - first) * 1e-9;
    }
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

void cb_pass_held(const uint64_t *start, const uint64_t *end, const uint64_t *cpu,
                  size_t nthreads, int passes, double *held_out)
{
    for (int it = 0; it < passes; it++) {
        size_t row = (size_t)it * nthreads;
        double least = 1.0;
        for (size_t i = 0; i < nthreads; i++) {
            uint64_t wall = end[row + i] - start[row + i];
            /* The CPU stamps are taken just outside the wall stamps, so a thread
             * that ran throughout reads a hair over 1: that is 1. */
            double held = wall ? (double)cpu[row + i] / (double)wall : 1.0;
            least = held < least ? held : least;
        }
        held_out[it] = least;
    }
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

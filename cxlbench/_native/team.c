/* A team of pinned threads that run timed passes together: the threading and
 * timing under cb_stream and cb_lines. Every pass starts at a barrier; its time
 * runs from the earliest thread leaving the barrier to the last thread
 * finishing. Asked, each thread also reads its CPU clock around its own pass,
 * so the share of it the thread really held its CPU is known without counting
 * the barrier waits. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "native.h"

struct team {
    void (*pass)(void *job, size_t thread);
    void *job;
    size_t nthreads;
    int passes;
    /* start gate: threads wait here until all exist (or creation failed) */
    pthread_mutex_t lock;
    pthread_cond_t opened;
    int go, abort;
    pthread_barrier_t barrier;      /* starts every pass */
    uint64_t *start, *end;          /* [pass * nthreads + thread], ns */
    uint64_t *cpu;                  /* same shape: the thread's CPU time over it; NULL: not asked */
};

struct member {
    struct team *team;
    size_t id;
    pthread_t tid;
};

static void *member_main(void *arg)
{
    struct member *me = arg;
    struct team *x = me->team;

    pthread_mutex_lock(&x->lock);
    while (!x->go)
        pthread_cond_wait(&x->opened, &x->lock);
    pthread_mutex_unlock(&x->lock);
    if (x->abort)
        return NULL;

    for (int it = 0; it < x->passes; it++) {
        pthread_barrier_wait(&x->barrier);
        /* CPU clock outside the wall stamps: the timed interval stays as it was. */
        uint64_t c0 = x->cpu ? cb_thread_cpu_ns() : 0;
        uint64_t t0 = cb_now_ns();
        x->pass(x->job, me->id);
        uint64_t t1 = cb_now_ns();
        uint64_t c1 = x->cpu ? cb_thread_cpu_ns() : 0;
        size_t slot = (size_t)it * x->nthreads + me->id;
        x->start[slot] = t0;
        x->end[slot] = t1;
        if (x->cpu)
            x->cpu[slot] = c1 - c0;
    }
    return NULL;
}

static void open_gate(struct team *x, int abort)
{
    pthread_mutex_lock(&x->lock);
    x->go = 1;
    x->abort = abort;
    pthread_cond_broadcast(&x->opened);
    pthread_mutex_unlock(&x->lock);
}

/* Each pass: from its first thread's start to its last thread's end. */
static void pass_seconds(const uint64_t *start, const uint64_t *end, size_t nthreads,
                         int passes, double *seconds_out)
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

/* Each pass: the least, over threads, of its CPU time over its own [start, end]. */
static void pass_held(const uint64_t *start, const uint64_t *end, const uint64_t *cpu,
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

/* The slowest thread's CPU time in each pass. */
static void most_cpu(const uint64_t *cpu, size_t nthreads, int passes, double *out)
{
    for (int it = 0; it < passes; it++) {
        uint64_t most = 0;
        for (size_t i = 0; i < nthreads; i++) {
            uint64_t c = cpu[(size_t)it * nthreads + i];
            most = c > most ? c : most;
        }
        out[it] = (double)most * 1e-9;
    }
}

int cb_team_run(const int *cpus, size_t nthreads, int passes,
                void (*pass)(void *job, size_t thread), void *job,
                double *seconds_out, double *held_out, double *cpu_seconds_out)
{
    if (nthreads == 0 || passes <= 0)
        return EINVAL;
    for (size_t i = 0; i < nthreads; i++)
        if (cpus[i] < 0 || cpus[i] >= CPU_SETSIZE)
            return EINVAL;

    struct team x = { .pass = pass, .job = job, .nthreads = nthreads, .passes = passes };
    struct member *members = calloc(nthreads, sizeof *members);
    x.start = calloc((size_t)passes * nthreads, sizeof *x.start);
    x.end = calloc((size_t)passes * nthreads, sizeof *x.end);
    int want_cpu = held_out || cpu_seconds_out;
    if (want_cpu)
        x.cpu = calloc((size_t)passes * nthreads, sizeof *x.cpu);
    int err = 0;
    if (!members || !x.start || !x.end || (want_cpu && !x.cpu)) {
        err = ENOMEM;
        goto out_free;
    }
    if ((err = pthread_mutex_init(&x.lock, NULL)) != 0)
        goto out_free;
    if ((err = pthread_cond_init(&x.opened, NULL)) != 0)
        goto out_lock;
    if ((err = pthread_barrier_init(&x.barrier, NULL, (unsigned)nthreads)) != 0)
        goto out_cond;

    size_t created = 0;
    for (size_t i = 0; i < nthreads; i++) {
        members[i].team = &x;
        members[i].id = i;
        err = cb_start_pinned(&members[i].tid, cpus[i], member_main, &members[i]);
        if (err)
            break;
        created++;
    }
    open_gate(&x, err != 0);
    for (size_t i = 0; i < created; i++)
        pthread_join(members[i].tid, NULL);

    if (!err) {
        pass_seconds(x.start, x.end, nthreads, passes, seconds_out);
        if (held_out)
            pass_held(x.start, x.end, x.cpu, nthreads, passes, held_out);
        if (cpu_seconds_out)
            most_cpu(x.cpu, nthreads, passes, cpu_seconds_out);
    }
    pthread_barrier_destroy(&x.barrier);
out_cond:
    pthread_cond_destroy(&x.opened);
out_lock:
    pthread_mutex_destroy(&x.lock);
out_free:
    free(members);
    free(x.start);
    free(x.end);
    free(x.cpu);
    return err;
}

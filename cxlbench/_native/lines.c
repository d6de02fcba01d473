/* Timed passes of a line op (lineops.h) over a buffer: the write-penalty
 * kernels (issue 3). Read, full-line write, read:write mixes, read-modify-
 * write, partial-line writes, regular or non-temporal, by one pinned thread
 * per CPU over contiguous slices; the threading and timing are cb_stream's. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>

#include "lineops.h"

int cb_line_op_check(const struct cb_line_op *op)
{
    if (op->reads + op->writes == 0 || op->reads > 1024 || op->writes > 1024)
        return EINVAL;
    if (op->writes && !op->rmw &&
        (op->write_bytes < 4 || op->write_bytes > CB_LINE || op->write_bytes % 4))
        return EINVAL;
    if (op->rmw && op->write_bytes != CB_LINE)
        return EINVAL;           /* a read-modify-write covers the whole line */
    if (op->nt && !CB_HAVE_NT)
        return ENOTSUP;
    return 0;
}

double cb_line_op_bytes(const struct cb_line_op *op)
{
    double per_write = op->rmw ? 2.0 * CB_LINE : (double)op->write_bytes;
    return ((double)op->reads * CB_LINE + (double)op->writes * per_write) /
           (double)(op->reads + op->writes);
}

/* One pass over lines [lo, hi): line k of the slice is line k % group of a group. */
static uint64_t pass(const struct cb_line_op *op, uintptr_t lo, uintptr_t hi)
{
    const unsigned group = op->reads + op->writes;
    const cb_v16 v = V16_SET64(op->value);
    struct cb_acc s;
    acc_zero(&s);
    unsigned j = 0;
    if (op->writes == 0) {                    /* pure reads: no per-line dispatch */
        for (uintptr_t p = lo; p < hi; p += CB_LINE)
            line_read(p, &s);
    } else if (op->reads == 0 && !op->rmw && op->write_bytes == CB_LINE) {
        for (uintptr_t p = lo; p < hi; p += CB_LINE)
            line_store(p, v, op->nt);
    } else {
        for (uintptr_t p = lo; p < hi; p += CB_LINE) {
            line_op(op, p, j, v, &s);
            if (++j == group)
                j = 0;
        }
    }
    if (op->nt && op->writes)
        NT_FENCE();               /* drain the write-combining buffers inside the timed region */
    return acc_sum(&s);
}

struct lines_ctx {
    const struct cb_line_op *op;
    int iterations;
    size_t nthreads;
    pthread_mutex_t lock;
    pthread_cond_t opened;
    int go, abort;
    pthread_barrier_t barrier;
    uint64_t *start, *end;        /* [iteration * nthreads + thread] */
    uint64_t *cpu;                /* [iteration * nthreads + thread]: the thread's CPU time */
    uint64_t *sums;               /* [thread] */
};

struct lines_thread {
    struct lines_ctx *ctx;
    size_t id;
    uintptr_t lo, hi;
    pthread_t tid;
};

static void *lines_worker(void *arg)
{
    struct lines_thread *t = arg;
    struct lines_ctx *x = t->ctx;
    pthread_mutex_lock(&x->lock);
    while (!x->go)
        pthread_cond_wait(&x->opened, &x->lock);
    pthread_mutex_unlock(&x->lock);
    if (x->abort)
        return NULL;
    uint64_t sum = 0;
    for (int it = 0; it < x->iterations; it++) {
        pthread_barrier_wait(&x->barrier);
        uint64_t c0 = cb_thread_cpu_ns(), t0 = cb_now_ns();
        sum = pass(x->op, t->lo, t->hi);
        uint64_t t1 = cb_now_ns(), c1 = cb_thread_cpu_ns();
        x->start[(size_t)it * x->nthreads + t->id] = t0;
        x->end[(size_t)it * x->nthreads + t->id] = t1;
        x->cpu[(size_t)it * x->nthreads + t->id] = c1 - c0;
    }
    x->sums[t->id] = sum;
    return NULL;
}

int cb_lines(const struct cb_line_op *op, uintptr_t buf, size_t bytes, const int *cpus,
             size_t nthreads, int iterations, double *seconds_out, double *cpu_seconds_out,
             uint64_t *sum_out)
{
    int err = cb_line_op_check(op);
    if (err)
        return err;
    if (buf % CB_LINE || bytes % CB_LINE || bytes == 0 || nthreads == 0 || iterations <= 0)
        return EINVAL;
    for (size_t i = 0; i < nthreads; i++)
        if (cpus[i] < 0 || cpus[i] >= CPU_SETSIZE)
            return EINVAL;

    struct lines_ctx x = { .op = op, .iterations = iterations, .nthreads = nthreads };
    struct lines_thread *threads = calloc(nthreads, sizeof *threads);
    x.start = calloc((size_t)iterations * nthreads, sizeof *x.start);
    x.end = calloc((size_t)iterations * nthreads, sizeof *x.end);
    x.cpu = calloc((size_t)iterations * nthreads, sizeof *x.cpu);
    x.sums = calloc(nthreads, sizeof *x.sums);
    if (!threads || !x.start || !x.end || !x.cpu || !x.sums) {
        err = ENOMEM;
        goto out_free;
    }
    pthread_mutex_init(&x.lock, NULL);
    pthread_cond_init(&x.opened, NULL);
    pthread_barrier_init(&x.barrier, NULL, (unsigned)nthreads);

    /* Slices of whole groups, so line i of the buffer is line i % group of its
     * group whatever the number of threads. */
    size_t group = op->reads + op->writes;
    size_t nlines = bytes / CB_LINE;
    size_t ngroups = (nlines + group - 1) / group;
    size_t chunk = (ngroups + nthreads - 1) / nthreads * group;   /* lines per thread */
    size_t created = 0;
    for (size_t i = 0; i < nthreads; i++) {
        struct lines_thread *t = &threads[i];
        size_t lo = i * chunk < nlines ? i * chunk : nlines;
        size_t hi = (i + 1) * chunk < nlines ? (i + 1) * chunk : nlines;
        t->ctx = &x;
        t->id = i;
        t->lo = buf + lo * CB_LINE;
        t->hi = buf + hi * CB_LINE;
        err = cb_start_pinned(&t->tid, cpus[i], lines_worker, t);
        if (err)
            break;
        created++;
    }
    pthread_mutex_lock(&x.lock);
    x.go = 1;
    x.abort = err != 0;
    pthread_cond_broadcast(&x.opened);
    pthread_mutex_unlock(&x.lock);
    for (size_t i = 0; i < created; i++)
        pthread_join(threads[i].tid, NULL);

    if (!err) {
        cb_pass_seconds(x.start, x.end, nthreads, iterations, seconds_out);
        for (int it = 0; cpu_seconds_out && it < iterations; it++) {
            uint64_t most = 0;
            for (size_t i = 0; i < nthreads; i++) {
                uint64_t c = x.cpu[(size_t)it * nthreads + i];
                most = c > most ? c : most;
            }
            cpu_seconds_out[it] = (double)most * 1e-9;
        }
        if (sum_out) {
            uint64_t sum = 0;
            for (size_t i = 0; i < nthreads; i++)
                sum += x.sums[i];
            *sum_out = sum;
        }
    }
    pthread_barrier_destroy(&x.barrier);
    pthread_cond_destroy(&x.opened);
    pthread_mutex_destroy(&x.lock);
out_free:
    free(threads);
    free(x.start);
    free(x.end);
    free(x.cpu);
    free(x.sums);
    return err;
}

/* Streaming kernels (STREAM's copy/scale/add/triad plus read and write) run
 * by one pinned thread per CPU, each over its own contiguous slice. Every
 * iteration starts at a barrier; its time runs from the earliest thread
 * leaving the barrier to the last thread finishing. Asked, each thread also
 * reads its CPU clock around its own kernel interval, so what share of it the
 * thread really held its CPU is known without counting the barrier waits. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "native.h"

const struct cb_kernel_info cb_kernels[CB_NKERNELS] = {
    /* name      reads writes  a  b  c */
    [CB_READ]  = { "read",  1, 0,  1, 0, 0 },
    [CB_WRITE] = { "write", 0, 1,  1, 0, 0 },
    [CB_COPY]  = { "copy",  1, 1,  1, 0, 1 },
    [CB_SCALE] = { "scale", 1, 1,  0, 1, 1 },
    [CB_ADD]   = { "add",   2, 1,  1, 1, 1 },
    [CB_TRIAD] = { "triad", 2, 1,  1, 1, 1 },
};

/* ---- the kernels, once per instruction set ------------------------------ */

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

/* Baseline: SSE2 is part of x86-64, so this copy runs on every x86 CPU. */
#define ISA(name) name##_sse2
#define KATTR
#define VN 2
#define NT_STORE(p, v) _mm_stream_pd((p), (__m128d)(v))
#define STORE_FENCE() _mm_sfence()
#include "stream_kernels.h"
#undef ISA
#undef KATTR
#undef VN
#undef NT_STORE

/* AVX2: compiled for AVX2 whatever the build flags, chosen at run time only
 * on a CPU that has it, so the module still loads on older CPUs. */
#define ISA(name) name##_avx2
#define KATTR __attribute__((target("avx2")))
#define VN 4
#define NT_STORE(p, v) _mm256_stream_pd((p), (__m256d)(v))
#include "stream_kernels.h"
#undef ISA
#undef KATTR
#undef VN
#undef NT_STORE
#undef STORE_FENCE

#else /* other architectures: generic vectors, non-temporal stores are plain stores */

#define ISA(name) name##_generic
#define KATTR
#define VN 2
#define NT_STORE(p, v) (*(vec_generic *)(p) = (v))
#define STORE_FENCE() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#include "stream_kernels.h"
#undef ISA
#undef KATTR
#undef VN
#undef NT_STORE
#undef STORE_FENCE
#endif

typedef double (*kernel_fn)(enum cb_kernel, double *, double *, double *, size_t, double, int);

static kernel_fn pick_kernel(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2"))
        return kernel_avx2;
    return kernel_sse2;
#else
    return kernel_generic;
#endif
}

const char *cb_stream_isa(void)
{
#if defined(__x86_64__) || defined(__i386__)
    return pick_kernel() == kernel_avx2 ? "avx2" : "sse2";
#else
    return "generic";
#endif
}

/* ---- threads -------------------------------------------------------------- */

struct stream_ctx {
    kernel_fn fn;
    enum cb_kernel kernel;
    double *a, *b, *c;
    double scalar;
    int nt, iterations;
    size_t nthreads;
    /* start gate: threads wait here until all exist (or creation failed) */
    pthread_mutex_t lock;
    pthread_cond_t opened;
    int go, abort;
    pthread_barrier_t barrier;      /* starts every iteration */
    uint64_t *start, *end;          /* [iteration * nthreads + thread], ns */
    uint64_t *cpu;                  /* same shape: the thread's CPU time over it; NULL: not asked */
    double *sums;                   /* [thread]: read kernel's sum, last iteration */
};

struct stream_thread {
    struct stream_ctx *ctx;
    size_t id, lo, hi;
    pthread_t tid;
};

static double *at(double *p, size_t i)
{
    return p ? p + i : NULL;
}

static void *stream_worker(void *arg)
{
    struct stream_thread *t = arg;
    struct stream_ctx *x = t->ctx;

    pthread_mutex_lock(&x->lock);
    while (!x->go)
        pthread_cond_wait(&x->opened, &x->lock);
    pthread_mutex_unlock(&x->lock);
    if (x->abort)
        return NULL;

    double sum = 0;
    for (int it = 0; it < x->iterations; it++) {
        pthread_barrier_wait(&x->barrier);
        /* CPU clock outside the wall stamps: the timed interval stays as it was. */
        uint64_t c0 = x->cpu ? cb_thread_cpu_ns() : 0;
        uint64_t t0 = cb_now_ns();
        sum = x->fn(x->kernel, at(x->a, t->lo), at(x->b, t->lo), at(x->c, t->lo),
                    t->hi - t->lo, x->scalar, x->nt);
        uint64_t t1 = cb_now_ns();
        uint64_t c1 = x->cpu ? cb_thread_cpu_ns() : 0;
        size_t slot = (size_t)it * x->nthreads + t->id;
        x->start[slot] = t0;
        x->end[slot] = t1;
        if (x->cpu)
            x->cpu[slot] = c1 - c0;
    }
    x->sums[t->id] = sum;
    return NULL;
}

static void open_gate(struct stream_ctx *x, int abort)
{
    pthread_mutex_lock(&x->lock);
    x->go = 1;
    x->abort = abort;
    pthread_cond_broadcast(&x->opened);
    pthread_mutex_unlock(&x->lock);
}

int cb_stream(enum cb_kernel kernel, double *a, double *b, double *c, size_t n,
              const int *cpus, size_t nthreads, int nt, int iterations, double scalar,
              double *seconds_out, double *held_out, double *sum_out)
{
    if ((unsigned)kernel >= CB_NKERNELS || nthreads == 0 || iterations <= 0)
        return EINVAL;
    const struct cb_kernel_info *info = &cb_kernels[kernel];
    if ((info->uses_a && !a) || (info->uses_b && !b) || (info->uses_c && !c))
        return EINVAL;
    for (size_t i = 0; i < nthreads; i++)
        if (cpus[i] < 0 || cpus[i] >= CPU_SETSIZE)
            return EINVAL;

    struct stream_ctx x = {
        .fn = pick_kernel(), .kernel = kernel, .a = a, .b = b, .c = c,
        .scalar = scalar, .nt = nt, .iterations = iterations, .nthreads = nthreads,
    };
    struct stream_thread *threads = calloc(nthreads, sizeof *threads);
    x.start = calloc((size_t)iterations * nthreads, sizeof *x.start);
    x.end = calloc((size_t)iterations * nthreads, sizeof *x.end);
    x.sums = calloc(nthreads, sizeof *x.sums);
    if (held_out)
        x.cpu = calloc((size_t)iterations * nthreads, sizeof *x.cpu);
    int err = 0;
    if (!threads || !x.start || !x.end || !x.sums || (held_out && !x.cpu)) {
        err = ENOMEM;
        goto out_free;
    }
    pthread_mutex_init(&x.lock, NULL);
    pthread_cond_init(&x.opened, NULL);
    pthread_barrier_init(&x.barrier, NULL, (unsigned)nthreads);

    /* Contiguous slices, each starting on a 64-byte line boundary so no two
     * threads write the same cache line. */
    size_t chunk = (n + nthreads - 1) / nthreads;
    chunk = (chunk + 7) / 8 * 8;
    size_t created = 0;
    for (size_t i = 0; i < nthreads; i++) {
        struct stream_thread *t = &threads[i];
        t->ctx = &x;
        t->id = i;
        t->lo = i * chunk < n ? i * chunk : n;
        t->hi = (i + 1) * chunk < n ? (i + 1) * chunk : n;

        err = cb_start_pinned(&t->tid, cpus[i], stream_worker, t);
        if (err)
            break;
        created++;
    }
    open_gate(&x, err != 0);
    for (size_t i = 0; i < created; i++)
        pthread_join(threads[i].tid, NULL);

    if (!err) {
        cb_pass_seconds(x.start, x.end, nthreads, iterations, seconds_out);
        if (held_out)
            cb_pass_held(x.start, x.end, x.cpu, nthreads, iterations, held_out);
        if (sum_out) {
            double sum = 0;
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

/* Streaming kernels (STREAM's copy/scale/add/triad plus read and write) run
 * by one pinned thread per CPU, each over its own contiguous slice; team.c
 * starts the threads and times their passes. */
#define _GNU_SOURCE
#include <errno.h>
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

/* ---- one pass of one thread's slice; the team (team.c) times it -------- */

struct stream_job {
    kernel_fn fn;
    enum cb_kernel kernel;
    double *a, *b, *c;
    double scalar;
    int nt;
    size_t n, chunk;                /* elements; each thread's slice, whole 64-byte lines */
    double *sums;                   /* [thread]: read kernel's sum, last pass */
};

static double *at(double *p, size_t i)
{
    return p ? p + i : NULL;
}

static void stream_pass(void *job, size_t thread)
{
    struct stream_job *x = job;
    size_t lo = thread * x->chunk < x->n ? thread * x->chunk : x->n;
    size_t hi = lo + x->chunk < x->n ? lo + x->chunk : x->n;
    x->sums[thread] = x->fn(x->kernel, at(x->a, lo), at(x->b, lo), at(x->c, lo), hi - lo,
                            x->scalar, x->nt);
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

    /* Contiguous slices, each starting on a 64-byte line boundary so no two
     * threads write the same cache line. */
    size_t chunk = (n + nthreads - 1) / nthreads;
    struct stream_job x = {
        .fn = pick_kernel(), .kernel = kernel, .a = a, .b = b, .c = c,
        .scalar = scalar, .nt = nt, .n = n, .chunk = (chunk + 7) / 8 * 8,
        .sums = calloc(nthreads, sizeof *x.sums),
    };
    if (!x.sums)
        return ENOMEM;
    int err = cb_team_run(cpus, nthreads, iterations, stream_pass, &x, seconds_out, held_out,
                          NULL);
    if (!err && sum_out) {
        double sum = 0;
        for (size_t i = 0; i < nthreads; i++)
            sum += x.sums[i];
        *sum_out = sum;
    }
    free(x.sums);
    return err;
}

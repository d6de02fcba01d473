/* AdamW on fp32 buffers, torch.optim.AdamW's arithmetic step for step:
 *
 *   p *= 1 - lr * weight_decay                      (decoupled weight decay)
 *   m += (1 - beta1) * (g - m)                      (torch's lerp)
 *   v  = beta2 * v + (1 - beta2) * g * g
 *   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 *
 * The update streams p, g, m, v once (28 bytes a parameter with the caller's
 * copies), so it runs at memory speed when every CPU the calling thread may use
 * takes a contiguous slice: one pinned thread per allowed CPU, AVX-512 or AVX2 where the
 * CPU has it. Python checks the result against torch's own AdamW before using it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "native.h"

struct adamw {
    float *p, *m, *v;
    const float *g;
    float decay, b1, b2, one_b1, one_b2, step_size, bc2_sqrt, eps;
};

struct adamw_slice {
    const struct adamw *a;
    size_t lo, hi;
    pthread_t tid;
};

static void update_scalar(const struct adamw *a, size_t lo, size_t hi)
{
    for (size_t i = lo; i < hi; i++) {
        float g = a->g[i];
        float m = a->m[i] + a->one_b1 * (g - a->m[i]);
        float v = a->b2 * a->v[i] + a->one_b2 * g * g;
        float denom = sqrtf(v) / a->bc2_sqrt + a->eps;
        a->m[i] = m;
        a->v[i] = v;
        a->p[i] = a->p[i] * a->decay - a->step_size * (m / denom);
    }
}

#if defined(__x86_64__) || defined(__i386__)
/* The same operations in the same order, eight at a time; the moment's lerp as
 * one fused multiply-add, as ATen's vectorised lerp computes it. */
__attribute__((target("avx2,fma")))
static void update_avx2(const struct adamw *a, size_t lo, size_t hi)
{
    const __m256 decay = _mm256_set1_ps(a->decay), b2 = _mm256_set1_ps(a->b2);
    const __m256 one_b1 = _mm256_set1_ps(a->one_b1), one_b2 = _mm256_set1_ps(a->one_b2);
    const __m256 step = _mm256_set1_ps(a->step_size), bc2 = _mm256_set1_ps(a->bc2_sqrt);
    const __m256 eps = _mm256_set1_ps(a->eps);
    size_t i = lo;
    for (; i + 8 <= hi; i += 8) {
        __m256 g = _mm256_loadu_ps(a->g + i), m = _mm256_loadu_ps(a->m + i);
        __m256 v = _mm256_loadu_ps(a->v + i), p = _mm256_loadu_ps(a->p + i);
        m = _mm256_fmadd_ps(one_b1, _mm256_sub_ps(g, m), m);
        v = _mm256_add_ps(_mm256_mul_ps(b2, v), _mm256_mul_ps(_mm256_mul_ps(one_b2, g), g));
        __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v), bc2), eps);
        p = _mm256_sub_ps(_mm256_mul_ps(p, decay), _mm256_mul_ps(step, _mm256_div_ps(m, denom)));
        _mm256_storeu_ps(a->m + i, m);
        _mm256_storeu_ps(a->v + i, v);
        _mm256_storeu_ps(a->p + i, p);
    }
    update_scalar(a, i, hi);
}
/* Sixteen at a time where the CPU has AVX-512: on one core the update is bound by
 * its two divisions and a square root per vector, not by memory, so twice the
 * width is worth up to twice the rate (at all cores memory binds either way). */
__attribute__((target("avx512f")))
static void update_avx512(const struct adamw *a, size_t lo, size_t hi)
{
    const __m512 decay = _mm512_set1_ps(a->decay), b2 = _mm512_set1_ps(a->b2);
    const __m512 one_b1 = _mm512_set1_ps(a->one_b1), one_b2 = _mm512_set1_ps(a->one_b2);
    const __m512 step = _mm512_set1_ps(a->step_size), bc2 = _mm512_set1_ps(a->bc2_sqrt);
    const __m512 eps = _mm512_set1_ps(a->eps);
    size_t i = lo;
    for (; i + 16 <= hi; i += 16) {
        __m512 g = _mm512_loadu_ps(a->g + i), m = _mm512_loadu_ps(a->m + i);
        __m512 v = _mm512_loadu_ps(a->v + i), p = _mm512_loadu_ps(a->p + i);
        m = _mm512_fmadd_ps(one_b1, _mm512_sub_ps(g, m), m);
        v = _mm512_add_ps(_mm512_mul_ps(b2, v), _mm512_mul_ps(_mm512_mul_ps(one_b2, g), g));
        __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(v), bc2), eps);
        p = _mm512_sub_ps(_mm512_mul_ps(p, decay), _mm512_mul_ps(step, _mm512_div_ps(m, denom)));
        _mm512_storeu_ps(a->m + i, m);
        _mm512_storeu_ps(a->v + i, v);
        _mm512_storeu_ps(a->p + i, p);
    }
    update_scalar(a, i, hi);
}
#endif

static void update(const struct adamw *a, size_t lo, size_t hi)
{
#if defined(__x86_64__) || defined(__i386__)
    if (__builtin_cpu_supports("avx512f")) {
        update_avx512(a, lo, hi);
        return;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        update_avx2(a, lo, hi);
        return;
    }
#endif
    update_scalar(a, lo, hi);
}

static void *slice_worker(void *arg)
{
    struct adamw_slice *s = arg;
    update(s->a, s->lo, s->hi);
    return NULL;
}

/* Below this many parameters a slice is not worth a thread start (~20 us). */
#define MIN_SLICE (1u << 16)

int cb_adamw(float *p, const float *g, float *m, float *v, size_t n, uint64_t step,
             double lr, double beta1, double beta2, double eps, double weight_decay)
{
    if (step == 0)
        return EINVAL;
    struct adamw a = {
        .p = p, .g = g, .m = m, .v = v,
        .decay = (float)(1.0 - lr * weight_decay), .b2 = (float)beta2,
        .one_b1 = (float)(1.0 - beta1), .one_b2 = (float)(1.0 - beta2),
        .step_size = (float)(lr / (1.0 - pow(beta1, (double)step))),
        .bc2_sqrt = (float)sqrt(1.0 - pow(beta2, (double)step)), .eps = (float)eps,
    };
    __builtin_cpu_init();
    /* The caller takes slice 0 where it runs now; helpers go to the other CPUs. */
    cpu_set_t allowed;
    int here = sched_getcpu(), cpus[CPU_SETSIZE], ncpus = 1;
    cpus[0] = here;
    if (sched_getaffinity(0, sizeof allowed, &allowed) == 0)
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &allowed) && c != here)
                cpus[ncpus++] = c;
    size_t nthreads = ncpus > 0 ? (size_t)ncpus : 1;
    if (nthreads > n / MIN_SLICE)
        nthreads = n / MIN_SLICE > 0 ? n / MIN_SLICE : 1;
    if (nthreads == 1) {
        update(&a, 0, n);
        return 0;
    }
    struct adamw_slice *slices = calloc(nthreads, sizeof *slices);
    if (!slices)
        return ENOMEM;
    size_t chunk = (n + nthreads - 1) / nthreads;
    chunk = (chunk + 15) / 16 * 16;             /* slices start on 64-byte lines */
    size_t started = 0;
    int err = 0;
    for (size_t i = 1; i < nthreads; i++) {
        struct adamw_slice *s = &slices[i];
        s->a = &a;
        s->lo = i * chunk < n ? i * chunk : n;
        s->hi = (i + 1) * chunk < n ? (i + 1) * chunk : n;
        err = cb_start_pinned(&s->tid, cpus[i], slice_worker, s);
        if (err)
            break;
        started = i;
    }
    /* A thread that could not start leaves its slices to the caller. */
    update(&a, 0, chunk < n ? chunk : n);
    if (err)
        update(&a, (started + 1) * chunk < n ? (started + 1) * chunk : n, n);
    for (size_t i = 1; i <= started; i++)
        pthread_join(slices[i].tid, NULL);
    free(slices);
    return 0;
}

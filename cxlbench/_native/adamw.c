/* AdamW on fp32 buffers, torch.optim.AdamW's arithmetic step for step:
 *
 *   p *= 1 - lr * weight_decay                      (decoupled weight decay)
 *   m += (1 - beta1) * (g - m)                      (torch's lerp)
 *   v  = beta2 * v + (1 - beta2) * g * g
 *   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 *
 * The update streams p, g, m, v once (28 bytes a parameter with the caller's
 * copies), so it runs at memory speed when each OpenMP thread takes a contiguous
 * slice, AVX-512 or AVX2 where the CPU has it. Python checks the result against
 * torch's own AdamW before using it.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "native.h"

struct adamw {
    float *p, *m, *v;
    const float *g;
    float decay, b2, one_b1, one_b2, step_size, bc2_sqrt, eps;
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

enum isa { SCALAR, AVX2, AVX512 };

/* The widest the CPU has; CXLBENCH_ADAMW_ISA=avx2 or scalar caps it, so that the
 * tests check every path on a CPU that would never take the narrower ones. */
static enum isa pick_isa(void)
{
    enum isa best = SCALAR;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        best = AVX2;
    if (__builtin_cpu_supports("avx512f"))
        best = AVX512;
#endif
    const char *cap = getenv("CXLBENCH_ADAMW_ISA");
    if (cap && strcmp(cap, "scalar") == 0)
        return SCALAR;
    if (cap && strcmp(cap, "avx2") == 0 && best > AVX2)
        return AVX2;
    return best;
}

static void update(const struct adamw *a, enum isa isa, size_t lo, size_t hi)
{
#if defined(__x86_64__) || defined(__i386__)
    if (isa == AVX512) {
        update_avx512(a, lo, hi);
        return;
    }
    if (isa == AVX2) {
        update_avx2(a, lo, hi);
        return;
    }
#endif
    update_scalar(a, lo, hi);
}

/* Below this many parameters a slice is not worth waking a thread for. */
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
    enum isa isa = pick_isa();
    /* OpenMP, not threads of our own: the caller is torch's training step, and
     * torch's OpenMP workers spin on every CPU for a while after each operator.
     * A thread of ours pinned beside a spinner waited ~1 ms a call (4 M params:
     * 2 545 vs 1 470 us). libgomp is loaded once per process (torch's wheels
     * carry it as libgomp.so.1, its soname), so this region runs on torch's own,
     * already-awake workers, as many as torch.set_num_threads asked for. A torch
     * with a renamed copy would mean two runtimes; the engine measures each AdamW
     * in place before choosing, so that would cost speed, never a wrong choice. */
#ifdef _OPENMP
    size_t most = n / MIN_SLICE > 0 ? n / MIN_SLICE : 1;
    int nthreads = omp_get_max_threads();
    if ((size_t)nthreads > most)
        nthreads = (int)most;
    #pragma omp parallel num_threads(nthreads)
    {
        size_t t = (size_t)omp_get_thread_num(), k = (size_t)omp_get_num_threads();
        size_t chunk = ((n + k - 1) / k + 15) / 16 * 16;   /* slices start on 64-byte lines */
        size_t lo = t * chunk < n ? t * chunk : n, hi = lo + chunk < n ? lo + chunk : n;
        update(&a, isa, lo, hi);
    }
#else
    update(&a, isa, 0, n);                       /* built without OpenMP (the QEMU guest's) */
#endif
    return 0;
}

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
 *
 * A GPU's offload step hands bf16 gradients and wants the updated parameters back
 * in bf16: cb_adamw_bf16 widens as it reads and narrows as it writes, in the same
 * pass (28 bytes a parameter instead of 40 with a widening pass before and a
 * narrowing pass after; DeepSpeed's CPU Adam fuses its fp16 copy the same way).
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
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
    const float *g;                 /* fp32 gradients, or NULL and ... */
    const uint16_t *g16;            /* ... bf16 gradients, widened as they are read */
    uint16_t *copy16;               /* NULL, or where the updated p also goes in bf16 */
    int stream;                     /* write copy16 with streaming stores (see narrow8) */
    float decay, b2, one_b1, one_b2, step_size, bc2_sqrt, eps;
};

/* bf16 is the high half of an fp32: widening is exact. Narrowing rounds to the
 * nearest even, NaN to a quiet NaN, as torch's scalar conversion does (its vector
 * code writes NaN as 0xffff: also a NaN). */
static inline float bf16_to_f32(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline uint16_t f32_to_bf16(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    if (f != f)
        return 0x7FC0;
    return (uint16_t)((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
}

static void update_scalar(const struct adamw *a, size_t lo, size_t hi)
{
    for (size_t i = lo; i < hi; i++) {
        float g = a->g16 ? bf16_to_f32(a->g16[i]) : a->g[i];
        float m = a->m[i] + a->one_b1 * (g - a->m[i]);
        float v = a->b2 * a->v[i] + a->one_b2 * g * g;
        float denom = sqrtf(v) / a->bc2_sqrt + a->eps;
        float p = a->p[i] * a->decay - a->step_size * (m / denom);
        a->m[i] = m;
        a->v[i] = v;
        a->p[i] = p;
        if (a->copy16)
            a->copy16[i] = f32_to_bf16(p);
    }
}

#if defined(__x86_64__) || defined(__i386__)
/* The same operations in the same order, eight at a time; the moment's lerp as
 * one fused multiply-add, as ATen's vectorised lerp computes it. */
__attribute__((target("avx2,fma")))
static inline __m256 load8(const struct adamw *a, size_t i)
{
    if (!a->g16)
        return _mm256_loadu_ps(a->g + i);
    __m128i h = _mm_loadu_si128((const __m128i *)(a->g16 + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* f32_to_bf16, eight at a time. The copy is read next by the GPU's DMA, not by
 * this CPU: a streaming store writes its lines without first reading them (an
 * ordinary store's read for ownership adds 2 bytes a parameter to the 28 the
 * update moves), where the caller has checked the alignment they need. */
__attribute__((target("avx2,fma")))
static inline void narrow8(uint16_t *out, __m256 p, int stream)
{
    __m256i bits = _mm256_castps_si256(p);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))), 16);
    __m256 nan = _mm256_cmp_ps(p, p, _CMP_UNORD_Q);
    r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC0), _mm256_castps_si256(nan));
    __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    if (stream)
        _mm_stream_si128((__m128i *)out, packed);
    else
        _mm_storeu_si128((__m128i *)out, packed);
}

__attribute__((target("avx2,fma")))
static void update_avx2(const struct adamw *a, size_t lo, size_t hi)
{
    const __m256 decay = _mm256_set1_ps(a->decay), b2 = _mm256_set1_ps(a->b2);
    const __m256 one_b1 = _mm256_set1_ps(a->one_b1), one_b2 = _mm256_set1_ps(a->one_b2);
    const __m256 step = _mm256_set1_ps(a->step_size), bc2 = _mm256_set1_ps(a->bc2_sqrt);
    const __m256 eps = _mm256_set1_ps(a->eps);
    size_t i = lo;
    for (; i + 8 <= hi; i += 8) {
        __m256 g = load8(a, i), m = _mm256_loadu_ps(a->m + i);
        __m256 v = _mm256_loadu_ps(a->v + i), p = _mm256_loadu_ps(a->p + i);
        m = _mm256_fmadd_ps(one_b1, _mm256_sub_ps(g, m), m);
        v = _mm256_add_ps(_mm256_mul_ps(b2, v), _mm256_mul_ps(_mm256_mul_ps(one_b2, g), g));
        __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v), bc2), eps);
        p = _mm256_sub_ps(_mm256_mul_ps(p, decay), _mm256_mul_ps(step, _mm256_div_ps(m, denom)));
        _mm256_storeu_ps(a->m + i, m);
        _mm256_storeu_ps(a->v + i, v);
        _mm256_storeu_ps(a->p + i, p);
        if (a->copy16)
            narrow8(a->copy16 + i, p, a->stream);
    }
    if (a->stream)
        _mm_sfence();               /* the streamed lines are visible before the copy is shipped */
    update_scalar(a, i, hi);
}
/* Sixteen at a time where the CPU has AVX-512: on one core the update is bound by
 * its two divisions and a square root per vector, not by memory, so twice the
 * width is worth up to twice the rate (at all cores memory binds either way). */
__attribute__((target("avx512f")))
static inline __m512 load16(const struct adamw *a, size_t i)
{
    if (!a->g16)
        return _mm512_loadu_ps(a->g + i);
    __m256i h = _mm256_loadu_si256((const __m256i *)(a->g16 + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* f32_to_bf16, sixteen at a time (AVX-512F alone: no AVX512_BF16 needed) */
__attribute__((target("avx512f")))
static inline void narrow16(uint16_t *out, __m512 p, int stream)
{
    __m512i bits = _mm512_castps_si512(p);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
    __mmask16 nan = _mm512_cmp_ps_mask(p, p, _CMP_UNORD_Q);
    r = _mm512_mask_blend_epi32(nan, r, _mm512_set1_epi32(0x7FC0));
    if (stream)
        _mm256_stream_si256((__m256i *)out, _mm512_cvtepi32_epi16(r));
    else
        _mm256_storeu_si256((__m256i *)out, _mm512_cvtepi32_epi16(r));
}

__attribute__((target("avx512f")))
static void update_avx512(const struct adamw *a, size_t lo, size_t hi)
{
    const __m512 decay = _mm512_set1_ps(a->decay), b2 = _mm512_set1_ps(a->b2);
    const __m512 one_b1 = _mm512_set1_ps(a->one_b1), one_b2 = _mm512_set1_ps(a->one_b2);
    const __m512 step = _mm512_set1_ps(a->step_size), bc2 = _mm512_set1_ps(a->bc2_sqrt);
    const __m512 eps = _mm512_set1_ps(a->eps);
    size_t i = lo;
    for (; i + 16 <= hi; i += 16) {
        __m512 g = load16(a, i), m = _mm512_loadu_ps(a->m + i);
        __m512 v = _mm512_loadu_ps(a->v + i), p = _mm512_loadu_ps(a->p + i);
        m = _mm512_fmadd_ps(one_b1, _mm512_sub_ps(g, m), m);
        v = _mm512_add_ps(_mm512_mul_ps(b2, v), _mm512_mul_ps(_mm512_mul_ps(one_b2, g), g));
        __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(v), bc2), eps);
        p = _mm512_sub_ps(_mm512_mul_ps(p, decay), _mm512_mul_ps(step, _mm512_div_ps(m, denom)));
        _mm512_storeu_ps(a->m + i, m);
        _mm512_storeu_ps(a->v + i, v);
        _mm512_storeu_ps(a->p + i, p);
        if (a->copy16)
            narrow16(a->copy16 + i, p, a->stream);
    }
    if (a->stream)
        _mm_sfence();
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

/* CXLBENCH_ADAMW_STORES=plain writes the bf16 copy with ordinary stores, so that
 * the tests check both paths and an A/B can time them. */
static int streaming_wanted(void)
{
    const char *s = getenv("CXLBENCH_ADAMW_STORES");
    return !(s && strcmp(s, "plain") == 0);
}

static void update(const struct adamw *a, enum isa isa, int stream, size_t lo, size_t hi)
{
#if defined(__x86_64__) || defined(__i386__)
    /* a slice streams where its vectors' stores land aligned: 32 bytes (AVX-512's
     * sixteen bf16) or 16 (AVX2's eight) */
    struct adamw s = *a;
    uintptr_t start = a->copy16 ? (uintptr_t)(a->copy16 + lo) : 1;   /* no copy: never streamed */
    if (isa == AVX512) {
        s.stream = stream && start % 32 == 0;
        update_avx512(&s, lo, hi);
        return;
    }
    if (isa == AVX2) {
        s.stream = stream && start % 16 == 0;
        update_avx2(&s, lo, hi);
        return;
    }
#else
    (void)stream;
#endif
    update_scalar(a, lo, hi);
}

/* Below this many parameters a slice is not worth waking a thread for. */
#define MIN_SLICE (1u << 16)

static int run(struct adamw a, size_t n, uint64_t step, double lr, double beta1, double beta2,
               double eps, double weight_decay)
{
    if (step == 0)
        return EINVAL;
    a.decay = (float)(1.0 - lr * weight_decay);
    a.b2 = (float)beta2;
    a.one_b1 = (float)(1.0 - beta1);
    a.one_b2 = (float)(1.0 - beta2);
    a.step_size = (float)(lr / (1.0 - pow(beta1, (double)step)));
    a.bc2_sqrt = (float)sqrt(1.0 - pow(beta2, (double)step));
    a.eps = (float)eps;
    enum isa isa = pick_isa();
    int stream = streaming_wanted();
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
        update(&a, isa, stream, lo, hi);
    }
#else
    update(&a, isa, stream, 0, n);                       /* built without OpenMP (the QEMU guest's) */
#endif
    return 0;
}

int cb_adamw(float *p, const float *g, float *m, float *v, size_t n, uint64_t step,
             double lr, double beta1, double beta2, double eps, double weight_decay)
{
    struct adamw a = {.p = p, .g = g, .m = m, .v = v};
    return run(a, n, step, lr, beta1, beta2, eps, weight_decay);
}

int cb_adamw_bf16(float *p, const uint16_t *g, float *m, float *v, uint16_t *copy, size_t n,
                  uint64_t step, double lr, double beta1, double beta2, double eps,
                  double weight_decay)
{
    struct adamw a = {.p = p, .g16 = g, .m = m, .v = v, .copy16 = copy};
    return run(a, n, step, lr, beta1, beta2, eps, weight_decay);
}

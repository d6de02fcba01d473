/* What one 64-byte line sees in the host-suite kernels: a read, a
 * full-line store, a partial store of a few bytes, or a read-modify-write;
 * stores regular or non-temporal. Shared by lines.c (timed passes) and
 * loaded.c (load threads), so the loaded-latency load and the write-penalty
 * figures run the same instructions.
 *
 * Only SSE2 is used on x86-64 (part of the base ISA): 16-byte loads and
 * stores, movntdq / movnti for the non-temporal ones. Elsewhere plain C, and
 * non-temporal stores are regular stores (the op records nt asked; the
 * binding refuses nt where it cannot be honoured).
 */
#ifndef CXLBENCH_LINEOPS_H
#define CXLBENCH_LINEOPS_H

#include <stdint.h>
#include <string.h>

#include "native.h"

#define CB_LINE 64

#if defined(__x86_64__)
#include <emmintrin.h>
#define CB_HAVE_NT 1
typedef __m128i cb_v16;
#define V16_LOAD(p) _mm_load_si128((const __m128i *)(p))
#define V16_STORE(p, v) _mm_store_si128((__m128i *)(p), (v))
#define V16_STREAM(p, v) _mm_stream_si128((__m128i *)(p), (v))
#define V16_ADD64(a, b) _mm_add_epi64((a), (b))
#define V16_SET64(x) _mm_set1_epi64x((long long)(x))
#define V16_ZERO() _mm_setzero_si128()
#define NT_STORE8(p, x) _mm_stream_si64((long long *)(p), (long long)(x))
#define NT_STORE4(p, x) _mm_stream_si32((int *)(p), (int)(x))
#define NT_FENCE() _mm_sfence()
static inline uint64_t v16_sum(cb_v16 v)
{
    uint64_t lanes[2];
    memcpy(lanes, &v, sizeof lanes);
    return lanes[0] + lanes[1];
}
#else
#define CB_HAVE_NT 0
typedef struct { uint64_t x[2]; } cb_v16;
static inline cb_v16 V16_LOAD(const void *p) { cb_v16 v; memcpy(&v, p, 16); return v; }
#define V16_STORE(p, v) do { cb_v16 v_ = (v); memcpy((void *)(p), &v_, 16); } while (0)
#define V16_STREAM(p, v) V16_STORE(p, v)
static inline cb_v16 V16_ADD64(cb_v16 a, cb_v16 b) { a.x[0] += b.x[0]; a.x[1] += b.x[1]; return a; }
static inline cb_v16 V16_SET64(uint64_t x) { cb_v16 v = {{x, x}}; return v; }
static inline cb_v16 V16_ZERO(void) { cb_v16 v = {{0, 0}}; return v; }
#define NT_STORE8(p, x) (*(volatile uint64_t *)(p) = (uint64_t)(x))
#define NT_STORE4(p, x) (*(volatile uint32_t *)(p) = (uint32_t)(x))
#define NT_FENCE() __atomic_thread_fence(__ATOMIC_SEQ_CST)
static inline uint64_t v16_sum(cb_v16 v) { return v.x[0] + v.x[1]; }
#endif

/* Four independent accumulators: one line's four 16-byte loads never wait
 * on each other's adds. */
struct cb_acc {
    cb_v16 a0, a1, a2, a3;
};

static inline void acc_zero(struct cb_acc *s)
{
    s->a0 = s->a1 = s->a2 = s->a3 = V16_ZERO();
}

static inline uint64_t acc_sum(const struct cb_acc *s)
{
    return v16_sum(s->a0) + v16_sum(s->a1) + v16_sum(s->a2) + v16_sum(s->a3);
}

static inline void line_read(uintptr_t p, struct cb_acc *s)
{
    s->a0 = V16_ADD64(s->a0, V16_LOAD(p));
    s->a1 = V16_ADD64(s->a1, V16_LOAD(p + 16));
    s->a2 = V16_ADD64(s->a2, V16_LOAD(p + 32));
    s->a3 = V16_ADD64(s->a3, V16_LOAD(p + 48));
}

static inline void line_store(uintptr_t p, cb_v16 v, int nt)
{
    if (nt) {
        V16_STREAM(p, v);
        V16_STREAM(p + 16, v);
        V16_STREAM(p + 32, v);
        V16_STREAM(p + 48, v);
    } else {
        V16_STORE(p, v);
        V16_STORE(p + 16, v);
        V16_STORE(p + 32, v);
        V16_STORE(p + 48, v);
    }
}

/* The first `bytes` bytes of the line (a multiple of 4, 4..64) get the
 * little-endian bytes of `value`, repeated every 8 bytes: 8-byte stores, then
 * a 4-byte one for a remainder. Non-temporal: movnti per piece, so the line
 * leaves the write-combining buffer partly written. */
static inline void line_partial(uintptr_t p, uint64_t value, unsigned bytes, int nt)
{
    unsigned off = 0;
    if (nt) {
        for (; off + 8 <= bytes; off += 8)
            NT_STORE8(p + off, value);
        if (off < bytes)
            NT_STORE4(p + off, (uint32_t)value);
    } else {
        for (; off + 8 <= bytes; off += 8)
            *(volatile uint64_t *)(p + off) = value;
        if (off < bytes)
            *(volatile uint32_t *)(p + off) = (uint32_t)value;
    }
}

/* Load the line, add `value` to each 8-byte word, store it back. */
static inline void line_rmw(uintptr_t p, cb_v16 add, int nt)
{
    cb_v16 x0 = V16_ADD64(V16_LOAD(p), add);
    cb_v16 x1 = V16_ADD64(V16_LOAD(p + 16), add);
    cb_v16 x2 = V16_ADD64(V16_LOAD(p + 32), add);
    cb_v16 x3 = V16_ADD64(V16_LOAD(p + 48), add);
    if (nt) {
        V16_STREAM(p, x0);
        V16_STREAM(p + 16, x1);
        V16_STREAM(p + 32, x2);
        V16_STREAM(p + 48, x3);
    } else {
        V16_STORE(p, x0);
        V16_STORE(p + 16, x1);
        V16_STORE(p + 32, x2);
        V16_STORE(p + 48, x3);
    }
}

/* Line `j` of a group of reads + writes lines (j counts from 0). */
static inline void line_op(const struct cb_line_op *op, uintptr_t p, unsigned j, cb_v16 v,
                           struct cb_acc *s)
{
    if (j < op->reads)
        line_read(p, s);
    else if (op->rmw)
        line_rmw(p, v, op->nt);
    else if (op->write_bytes >= CB_LINE)
        line_store(p, v, op->nt);
    else
        line_partial(p, op->value, op->write_bytes, op->nt);
}

/* The injection delay: `n` iterations of an empty loop the compiler must keep
 * (about one core cycle each; calibrated by cb_delay_ns_per_unit). */
static inline void cb_delay(uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        __asm__ __volatile__("");
}

#endif

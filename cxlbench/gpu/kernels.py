"""The device code: CUDA C compiled at run time by NVRTC (cupy.RawModule), one module.

Every kernel is `extern "C"` and takes only pointers, 64-bit sizes and doubles,
listed in SIGNATURES so the launcher converts Python values to the exact C types
(a pointer goes as a 64-bit address; the test fake reads arguments by name).
Memory is reached through pointer parameters, which the compiler knows to be
global memory (ld.global / st.global, not generic accesses).

Timing lives on the device: the chase reads the SM's cycle counter (%clock64)
and the global nanosecond timer (%globaltimer) around its timed loop; batches
of kernels and copies are timed with events, queued behind `cb_spin`, a
one-thread kernel that waits on a host-mapped flag (nvbandwidth's method) so
the host's enqueue cost never sits between two timed operations.

Loads and stores go through 16-byte vectors (`v2`), four independent loads in
flight per thread in the streaming kernels (four or eight in the copy);
reductions write one partial sum per block (no atomics on one address) which the
host adds up and compares with a reference. Only standard C++ and PTX are used
(no CUDA headers): NVRTC needs nothing but itself.
"""
from __future__ import annotations

SOURCE = r"""
typedef unsigned long long u64;
typedef unsigned int u32;

struct alignas(16) v2 { u64 x, y; };
struct alignas(16) v4 { v2 a, b; };
struct alignas(16) d2 { double x, y; };

__device__ __forceinline__ u64 global_ns() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t) :: "memory");
    return t;
}

__device__ __forceinline__ u64 sm_cycles() {
    u64 c;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(c) :: "memory");
    return c;
}

/* The chase's loads, as explicit global-space loads: the default (cached) one,
   and .cv, which fetches again from memory every time (no cached copy is used). */
__device__ __forceinline__ u64 load_ca(u64 p) {
    u64 v;
    asm volatile("ld.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ u64 load_cv(u64 p) {
    u64 v;
    asm volatile("ld.global.cv.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

/* Sum of v over the block, valid in thread 0; blockDim.x is a multiple of 32. */
__device__ __forceinline__ u64 block_sum(u64 v) {
    __shared__ u64 warp_sums[32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    v = 0;
    if (warp == 0) {
        const int warps = (blockDim.x + 31) >> 5;
        v = lane < warps ? warp_sums[lane] : 0;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    }
    return v;
}

/* nvbandwidth's blocking kernel: spin until the host sets flag[0]; give up after
   timeout_ns (then flag[1] = 1) so a stuck host can never hang the device. */
extern "C" __global__ void cb_spin(volatile int *flag, u64 timeout_ns) {
    const u64 start = global_ns();
    while (flag[0] == 0) {
        if (global_ns() - start > timeout_ns) { flag[1] = 1; return; }
    }
}

/* Single-thread pointer chase: every word holds the absolute address of the
   next one. warm untimed steps, then steps timed by %clock64 and %globaltimer.
   out: [cycles, nanoseconds, final address]. */
extern "C" __global__ void cb_chase(u64 start, u64 warm, u64 steps, u64 *out) {
    u64 p = start;
    for (u64 i = 0; i < warm; i++) p = load_ca(p);
    const u64 c0 = sm_cycles(), t0 = global_ns();
    for (u64 i = 0; i < steps; i++) p = load_ca(p);
    const u64 c1 = sm_cycles(), t1 = global_ns();
    out[0] = c1 - c0; out[1] = t1 - t0; out[2] = p;
}

/* The same with ld.global.cv: every load goes to memory (host memory seen
   through the mapping is never answered from a cache). */
extern "C" __global__ void cb_chase_cv(u64 start, u64 warm, u64 steps, u64 *out) {
    u64 p = start;
    for (u64 i = 0; i < warm; i++) p = load_cv(p);
    const u64 c0 = sm_cycles(), t0 = global_ns();
    for (u64 i = 0; i < steps; i++) p = load_cv(p);
    const u64 c1 = sm_cycles(), t1 = global_ns();
    out[0] = c1 - c0; out[1] = t1 - t0; out[2] = p;
}

#define GRID_LOOP_START \
    const u64 step = (u64)gridDim.x * blockDim.x; \
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;

/* word i = i ^ seed */
extern "C" __global__ void cb_fill_words(u64 *a, u64 words, u64 seed) {
    GRID_LOOP_START
    for (; i < words; i += step) a[i] = i ^ seed;
}

/* double i = (i * mul) % mod: small integers, so sums and triads are exact */
extern "C" __global__ void cb_fill_doubles(double *a, u64 count, u64 mul, u64 mod) {
    GRID_LOOP_START
    for (; i < count; i += step) a[i] = (double)((i * mul) % mod);
}

/* Loads of W bytes at base + i * stride, i < count; sum of the 64-bit words
   (32-bit words for W = 4) read, one partial per block in out[blockIdx.x]. */
#define LOAD_KERNEL(NAME, T, SUM) \
extern "C" __global__ void NAME(const char *__restrict__ b, u64 count, u64 stride, \
                                u64 *__restrict__ out) { \
    GRID_LOOP_START \
    u64 acc = 0; \
    for (; i + 3 * step < count; i += 4 * step) { \
        const T x0 = *(const T *)(b + i * stride); \
        const T x1 = *(const T *)(b + (i + step) * stride); \
        const T x2 = *(const T *)(b + (i + 2 * step) * stride); \
        const T x3 = *(const T *)(b + (i + 3 * step) * stride); \
        acc += SUM(x0) + SUM(x1) + SUM(x2) + SUM(x3); \
    } \
    for (; i < count; i += step) { const T x = *(const T *)(b + i * stride); acc += SUM(x); } \
    acc = block_sum(acc); \
    if (threadIdx.x == 0) out[blockIdx.x] = acc; \
}
#define SUM_W4(V) ((u64)(V))
#define SUM_W8(V) (V)
#define SUM_W16(V) ((V).x + (V).y)
#define SUM_W32(V) ((V).a.x + (V).a.y + (V).b.x + (V).b.y)
LOAD_KERNEL(cb_load_w4, u32, SUM_W4)
LOAD_KERNEL(cb_load_w8, u64, SUM_W8)
LOAD_KERNEL(cb_load_w16, v2, SUM_W16)
LOAD_KERNEL(cb_load_w32, v4, SUM_W32)

/* Stores of W bytes at base + i * stride: the k-th word of element i (words of
   8 bytes, 4 for W = 4) is (i * W/8 + k) ^ seed. */
extern "C" __global__ void cb_store_w4(char *b, u64 count, u64 stride, u64 seed) {
    GRID_LOOP_START
    for (; i < count; i += step) *(u32 *)(b + i * stride) = (u32)(i ^ seed);
}
extern "C" __global__ void cb_store_w8(char *b, u64 count, u64 stride, u64 seed) {
    GRID_LOOP_START
    for (; i < count; i += step) *(u64 *)(b + i * stride) = i ^ seed;
}
extern "C" __global__ void cb_store_w16(char *b, u64 count, u64 stride, u64 seed) {
    GRID_LOOP_START
    for (; i < count; i += step) {
        v2 v; v.x = (2 * i) ^ seed; v.y = (2 * i + 1) ^ seed;
        *(v2 *)(b + i * stride) = v;
    }
}
extern "C" __global__ void cb_store_w32(char *b, u64 count, u64 stride, u64 seed) {
    GRID_LOOP_START
    for (; i < count; i += step) {
        v4 v;
        v.a.x = (4 * i) ^ seed; v.a.y = (4 * i + 1) ^ seed;
        v.b.x = (4 * i + 2) ^ seed; v.b.y = (4 * i + 3) ^ seed;
        *(v4 *)(b + i * stride) = v;
    }
}

/* dst[i] = src[i] over n 16-byte vectors, U loads in flight per thread before its
   stores. Two depths are built: which keeps HBM busiest differs by GPU, so the
   benchmark tries both with every launch shape and records the one it kept. */
template <int U>
__device__ __forceinline__ void copy_body(v2 *__restrict__ dst, const v2 *__restrict__ src, u64 n) {
    GRID_LOOP_START
    for (; i + (U - 1) * step < n; i += U * step) {
        v2 x[U];
#pragma unroll
        for (int u = 0; u < U; u++) x[u] = src[i + u * step];
#pragma unroll
        for (int u = 0; u < U; u++) dst[i + u * step] = x[u];
    }
    for (; i < n; i += step) dst[i] = src[i];
}
extern "C" __global__ void cb_copy(v2 *__restrict__ dst, const v2 *__restrict__ src, u64 n) {
    copy_body<4>(dst, src, n);
}
extern "C" __global__ void cb_copy8(v2 *__restrict__ dst, const v2 *__restrict__ src, u64 n) {
    copy_body<8>(dst, src, n);
}

/* a[i] = b[i] + s * c[i] over n pairs of doubles (STREAM's triad) */
extern "C" __global__ void cb_triad(d2 *__restrict__ a, const d2 *__restrict__ b,
                                    const d2 *__restrict__ c, double s, u64 n) {
    GRID_LOOP_START
    for (; i + 3 * step < n; i += 4 * step) {
        const d2 b0 = b[i], b1 = b[i + step], b2 = b[i + 2 * step], b3 = b[i + 3 * step];
        const d2 c0 = c[i], c1 = c[i + step], c2 = c[i + 2 * step], c3 = c[i + 3 * step];
        d2 r;
        r.x = b0.x + s * c0.x; r.y = b0.y + s * c0.y; a[i] = r;
        r.x = b1.x + s * c1.x; r.y = b1.y + s * c1.y; a[i + step] = r;
        r.x = b2.x + s * c2.x; r.y = b2.y + s * c2.y; a[i + 2 * step] = r;
        r.x = b3.x + s * c3.x; r.y = b3.y + s * c3.y; a[i + 3 * step] = r;
    }
    for (; i < n; i += step) {
        const d2 bv = b[i], cv = c[i];
        d2 r; r.x = bv.x + s * cv.x; r.y = bv.y + s * cv.y; a[i] = r;
    }
}
"""

#: kernel -> its parameters in order, as (name, C type): "u64" (also every
#: pointer, passed as an address) or "f64".
SIGNATURES: dict[str, tuple[tuple[str, str], ...]] = {
    "cb_spin": (("flag", "u64"), ("timeout_ns", "u64")),
    "cb_chase": (("start", "u64"), ("warm", "u64"), ("steps", "u64"), ("out", "u64")),
    "cb_chase_cv": (("start", "u64"), ("warm", "u64"), ("steps", "u64"), ("out", "u64")),
    "cb_fill_words": (("base", "u64"), ("words", "u64"), ("seed", "u64")),
    "cb_fill_doubles": (("base", "u64"), ("count", "u64"), ("mul", "u64"), ("mod", "u64")),
    **{f"cb_load_w{w}": (("base", "u64"), ("count", "u64"), ("stride", "u64"), ("out", "u64"))
       for w in (4, 8, 16, 32)},
    **{f"cb_store_w{w}": (("base", "u64"), ("count", "u64"), ("stride", "u64"), ("seed", "u64"))
       for w in (4, 8, 16, 32)},
    "cb_copy": (("dst", "u64"), ("src", "u64"), ("n", "u64")),
    "cb_copy8": (("dst", "u64"), ("src", "u64"), ("n", "u64")),
    "cb_triad": (("a", "u64"), ("b", "u64"), ("c", "u64"), ("s", "f64"), ("n", "u64")),
}

#: the copy kernels, by loads in flight per thread
COPY_KERNELS = {4: "cb_copy", 8: "cb_copy8"}
#: kernels that run as one thread (grid 1, block 1)
SINGLE_THREAD = ("cb_spin", "cb_chase", "cb_chase_cv")
#: widths the load/store kernels exist for
WIDTHS = (4, 8, 16, 32)
#: 32-bit words for width 4, 64-bit otherwise
WORD_BYTES = {4: 4, 8: 8, 16: 8, 32: 8}


def convert(name: str, args) -> tuple:
    """Python values -> numpy scalars of the kernel's parameter types, checked by count."""
    import numpy as np
    sig = SIGNATURES[name]
    if len(args) != len(sig):
        raise TypeError(f"{name} takes {len(sig)} arguments ({', '.join(n for n, _ in sig)}), "
                        f"got {len(args)}")
    out = []
    for (pname, ctype), value in zip(sig, args):
        if ctype == "f64":
            out.append(np.float64(value))
        else:
            value = int(value)
            if value < 0 or value >= 1 << 64:
                raise ValueError(f"{name}: {pname}={value} is not an unsigned 64-bit value")
            out.append(np.uint64(value))
    return tuple(out)


def named(name: str, args) -> dict:
    """Arguments by parameter name (the fake device reads them so)."""
    return {pname: value for (pname, _), value in zip(SIGNATURES[name], args)}

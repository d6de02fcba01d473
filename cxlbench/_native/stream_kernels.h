/* The streaming kernels, written once and compiled once per instruction set:
 * stream.c includes this file after defining
 *   ISA(name)       name with the instruction-set suffix (read_avx2, ...)
 *   KATTR           attribute selecting the instruction set (target("avx2"))
 *   VN              doubles per vector: 2 (SSE2), 4 (AVX2)
 *   NT_STORE(p, v)  non-temporal store of vector v at p (aligned to VN * 8)
 * Vectors are GCC vector types: plain arithmetic, no intrinsics except the
 * non-temporal store. Arrays are double; the kernels are STREAM's:
 *   read  sum += a[i]        write a[i] = s         copy  c[i] = a[i]
 *   scale b[i] = s * c[i]    add   c[i] = a[i] + b[i]
 *   triad a[i] = b[i] + s * c[i]
 */

/* Loads and stores through this type may be unaligned and may alias doubles. */
typedef double ISA(vec) __attribute__((vector_size(VN * 8), aligned(1), may_alias));
#define V ISA(vec)
#define LD(p) (*(const V *)(p))
#define ST(p, v) (*(V *)(p) = (v))

/* Eight independent accumulators: the adds of one are never waiting for the
 * previous add, so the loop runs at the rate loads arrive, as likwid-bench's
 * load kernel does (a single accumulator would cap it at one add latency per
 * vector). */
KATTR static double ISA(read)(const double *a, size_t n)
{
    V s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0}, s4 = {0}, s5 = {0}, s6 = {0}, s7 = {0};
    size_t i = 0;
    for (; i + 8 * VN <= n; i += 8 * VN) {
        s0 += LD(a + i);
        s1 += LD(a + i + VN);
        s2 += LD(a + i + 2 * VN);
        s3 += LD(a + i + 3 * VN);
        s4 += LD(a + i + 4 * VN);
        s5 += LD(a + i + 5 * VN);
        s6 += LD(a + i + 6 * VN);
        s7 += LD(a + i + 7 * VN);
    }
    V s = ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7));
    double sum = 0;
    for (int k = 0; k < VN; k++)
        sum += s[k];
    for (; i < n; i++)
        sum += a[i];
    return sum;
}

/* dst[i] = EXPR for i in [0, n), where EXPR is written twice: SCALAR for one
 * element, VECTOR for the VN elements starting at i. Non-temporal stores need
 * an aligned destination, so the first few elements go through the scalar path. */
#define STORE_LOOP(dst, n, nt, SCALAR, VECTOR)                                   \
    do {                                                                         \
        size_t i = 0;                                                            \
        if (nt) {                                                                \
            for (; i < (n) && (uintptr_t)((dst) + i) % (VN * 8) != 0; i++)      \
                (dst)[i] = (SCALAR);                                             \
            for (; i + 4 * VN <= (n);) {                                         \
                NT_STORE((dst) + i, (VECTOR)); i += VN;                          \
                NT_STORE((dst) + i, (VECTOR)); i += VN;                          \
                NT_STORE((dst) + i, (VECTOR)); i += VN;                          \
                NT_STORE((dst) + i, (VECTOR)); i += VN;                          \
            }                                                                    \
        } else {                                                                 \
            for (; i + 4 * VN <= (n);) {                                         \
                ST((dst) + i, (VECTOR)); i += VN;                                \
                ST((dst) + i, (VECTOR)); i += VN;                                \
                ST((dst) + i, (VECTOR)); i += VN;                                \
                ST((dst) + i, (VECTOR)); i += VN;                                \
            }                                                                    \
        }                                                                        \
        for (; i < (n); i++)                                                     \
            (dst)[i] = (SCALAR);                                                 \
    } while (0)

/* One thread's share of one iteration; returns the read kernel's sum (else 0). */
KATTR static double ISA(kernel)(enum cb_kernel k, double *a, double *b, double *c, size_t n,
                                double s, int nt)
{
    V vs = s - (V){0};   /* s in every lane */
    switch (k) {
    case CB_READ:
        return ISA(read)(a, n);
    case CB_WRITE:
        STORE_LOOP(a, n, nt, s, vs);
        break;
    case CB_COPY:
        STORE_LOOP(c, n, nt, a[i], LD(a + i));
        break;
    case CB_SCALE:
        STORE_LOOP(b, n, nt, s * c[i], vs * LD(c + i));
        break;
    case CB_ADD:
        STORE_LOOP(c, n, nt, a[i] + b[i], LD(a + i) + LD(b + i));
        break;
    case CB_TRIAD:
        STORE_LOOP(a, n, nt, b[i] + s * c[i], LD(b + i) + vs * LD(c + i));
        break;
    default:
        break;
    }
    if (nt)
        STORE_FENCE();   /* drain the write-combining buffers inside the timed region */
    return 0.0;
}

#undef V
#undef LD
#undef ST
#undef STORE_LOOP

/* Pointer chase: every line of the buffer holds the absolute address of the
 * next line to load, so each load depends on the one before it and the time
 * per step is the latency of one access.
 *
 * The order is a random single cycle over every line (no line is skipped,
 * none visited twice per lap), built in place with Sattolo's algorithm, so
 * it needs no memory beyond the buffer. Optionally the order is random only
 * within windows of W bytes and the windows are visited in random order
 * (multichase's scheme: with W = 64 pages most loads hit a page whose
 * translation is cached, separating cache misses from TLB misses). Several
 * chains, each a single cycle over its own share of the lines, are followed
 * in lockstep to measure memory-level parallelism.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "native.h"

/* ---- random numbers: xoshiro256**, seeded through splitmix64 ------------ */

struct rng {
    uint64_t s[4];
};

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void rng_seed(struct rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(struct rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* Uniform in [0, n), n > 0, without modulo bias (Lemire's method). */
static size_t rng_below(struct rng *r, size_t n)
{
    unsigned __int128 m = (unsigned __int128)rng_next(r) * n;
    uint64_t low = (uint64_t)m;
    if (low < n) {
        uint64_t threshold = -(uint64_t)n % n;
        while (low < threshold) {
            m = (unsigned __int128)rng_next(r) * n;
            low = (uint64_t)m;
        }
    }
    return (size_t)(m >> 64);
}

/* ---- building the cycles -------------------------------------------------- */

struct lines {
    uintptr_t base;
    size_t line_bytes;
};

static uintptr_t line_addr(const struct lines *L, size_t i)
{
    return L->base + i * L->line_bytes;
}

static uintptr_t *slot(uintptr_t addr)
{
    return (uintptr_t *)addr;
}

/* One random single cycle over lines [lo, lo + m): Sattolo's algorithm run on
 * the "next" values stored in the lines themselves. Starting from the identity
 * (each line pointing to itself), swapping entry i with a random j < i, for i
 * from the top down, yields a uniformly random cyclic permutation. */
static void sattolo(const struct lines *L, size_t lo, size_t m, struct rng *r)
{
    for (size_t i = 0; i < m; i++)
        *slot(line_addr(L, lo + i)) = line_addr(L, lo + i);
    for (size_t i = m - 1; i > 0; i--) {
        size_t j = rng_below(r, i);
        uintptr_t *si = slot(line_addr(L, lo + i)), *sj = slot(line_addr(L, lo + j));
        uintptr_t t = *si;
        *si = *sj;
        *sj = t;
    }
}

/* Link lines [first, first + count) into ONE cycle, random within windows of
 * `window_lines` lines, windows in random order. *head_out = its first line. */
static int link_share(const struct lines *L, size_t first, size_t count, size_t window_lines,
                      struct rng *r, size_t *head_out)
{
    size_t nwin = (count + window_lines - 1) / window_lines;

    for (size_t w = 0; w < nwin; w++) {
        size_t lo = w * window_lines;
        size_t m = count - lo < window_lines ? count - lo : window_lines;
        sattolo(L, first + lo, m, r);
    }
    if (nwin == 1) {
        *head_out = first + rng_below(r, count);
        return 0;
    }

    size_t *order = malloc(nwin * sizeof *order);
    if (!order)
        return ENOMEM;
    for (size_t w = 0; w < nwin; w++)
        order[w] = w;
    for (size_t w = nwin - 1; w > 0; w--) {   /* Fisher-Yates */
        size_t j = rng_below(r, w + 1), t = order[w];
        order[w] = order[j];
        order[j] = t;
    }

    /* Splice the window cycles into one: enter each window at a random line;
     * the line that led back to that entry leads to the next window instead. */
    uintptr_t first_entry = 0, prev_exit = 0;
    for (size_t k = 0; k < nwin; k++) {
        size_t lo = order[k] * window_lines;
        size_t m = count - lo < window_lines ? count - lo : window_lines;
        uintptr_t entry = line_addr(L, first + lo + rng_below(r, m));
        uintptr_t exit = entry;
        while (*slot(exit) != entry)
            exit = *slot(exit);
        if (k == 0)
            first_entry = entry;
        else
            *slot(prev_exit) = entry;
        prev_exit = exit;
    }
    *slot(prev_exit) = first_entry;
    *head_out = (first_entry - L->base) / L->line_bytes;
    free(order);
    return 0;
}

int cb_chase_init(uintptr_t base, size_t length, size_t line_bytes, size_t window_bytes,
                  size_t chains, uint64_t seed, uintptr_t *heads_out)
{
    if (line_bytes < sizeof(uintptr_t) || line_bytes % sizeof(uintptr_t) != 0 ||
        base % sizeof(uintptr_t) != 0)
        return EINVAL;
    size_t nlines = length / line_bytes;
    if (chains == 0 || nlines < chains)
        return EINVAL;
    if (window_bytes % line_bytes != 0)
        return EINVAL;
    size_t window_lines = window_bytes ? window_bytes / line_bytes : nlines;

    struct lines L = { base, line_bytes };
    struct rng r;
    rng_seed(&r, seed);

    /* Each chain owns a contiguous share: whole windows when there are at
     * least as many windows as chains, else an equal number of lines. */
    size_t nwin = (nlines + window_lines - 1) / window_lines;
    for (size_t c = 0; c < chains; c++) {
        size_t lo, hi;
        if (window_bytes && nwin >= chains) {
            lo = c * nwin / chains * window_lines;
            hi = (c + 1) * nwin / chains * window_lines;
            if (hi > nlines)
                hi = nlines;
        } else {
            lo = c * nlines / chains;
            hi = (c + 1) * nlines / chains;
        }
        size_t wl = window_lines < hi - lo ? window_lines : hi - lo;
        size_t head;
        int err = link_share(&L, lo, hi - lo, wl, &r, &head);
        if (err)
            return err;
        heads_out[c] = base + head * line_bytes;
    }
    return 0;
}

/* ---- following the chains ------------------------------------------------- */

/* Where the last addresses go, so the compiler must perform every load. */
static volatile uintptr_t chase_sink;

#define STEP(p) ((p) = *(const uintptr_t *)(p))
#define STEP8(p) do { STEP(p); STEP(p); STEP(p); STEP(p); \
                      STEP(p); STEP(p); STEP(p); STEP(p); } while (0)

static void chase1(uintptr_t *h, uint64_t steps)
{
    uintptr_t p0 = h[0];
    uint64_t i = steps;
    for (; i >= 8; i -= 8)
        STEP8(p0);
    for (; i > 0; i--)
        STEP(p0);
    chase_sink = p0;
}

static void chase2(uintptr_t *h, uint64_t steps)
{
    uintptr_t p0 = h[0], p1 = h[1];
    for (uint64_t i = 0; i < steps; i++) {
        STEP(p0);
        STEP(p1);
    }
    chase_sink = p0 ^ p1;
}

static void chase4(uintptr_t *h, uint64_t steps)
{
    uintptr_t p0 = h[0], p1 = h[1], p2 = h[2], p3 = h[3];
    for (uint64_t i = 0; i < steps; i++) {
        STEP(p0);
        STEP(p1);
        STEP(p2);
        STEP(p3);
    }
    chase_sink = p0 ^ p1 ^ p2 ^ p3;
}

static void chase8(uintptr_t *h, uint64_t steps)
{
    uintptr_t p0 = h[0], p1 = h[1], p2 = h[2], p3 = h[3];
    uintptr_t p4 = h[4], p5 = h[5], p6 = h[6], p7 = h[7];
    for (uint64_t i = 0; i < steps; i++) {
        STEP(p0); STEP(p1); STEP(p2); STEP(p3);
        STEP(p4); STEP(p5); STEP(p6); STEP(p7);
    }
    chase_sink = p0 ^ p1 ^ p2 ^ p3 ^ p4 ^ p5 ^ p6 ^ p7;
}

/* Any other number of chains: the pointers live in an array (a store and a
 * reload per step, a few cycles, still independent across chains). */
static void chase_any(uintptr_t *h, size_t n, uint64_t steps)
{
    for (uint64_t i = 0; i < steps; i++)
        for (size_t c = 0; c < n; c++)
            STEP(h[c]);
    uintptr_t x = 0;
    for (size_t c = 0; c < n; c++)
        x ^= h[c];
    chase_sink = x;
}

uint64_t cb_chase_run(const uintptr_t *heads, size_t nheads, uint64_t steps)
{
    uintptr_t h[nheads ? nheads : 1];
    for (size_t c = 0; c < nheads; c++)
        h[c] = heads[c];
    uint64_t t0 = cb_now_ns();
    switch (nheads) {
    case 0: break;
    case 1: chase1(h, steps); break;
    case 2: chase2(h, steps); break;
    case 4: chase4(h, steps); break;
    case 8: chase8(h, steps); break;
    default: chase_any(h, nheads, steps); break;
    }
    return cb_now_ns() - t0;
}

/* ---- the distribution: blocks of k loads, timed ----------------------------- */

size_t cb_hist_index(uint64_t ns)
{
    const uint64_t top = (1ull << CB_HIST_TOP_BITS) - 1;
    uint64_t v = ns < top ? ns : top;
    unsigned msb = 63 - (unsigned)__builtin_clzll(v | (1u << CB_HIST_SUB_BITS));
    unsigned shift = msb - CB_HIST_SUB_BITS;     /* 0 below 2^(SUB_BITS + 1) */
    return ((size_t)shift << CB_HIST_SUB_BITS) + (size_t)(v >> shift);
}

uint64_t cb_hist_lower(size_t index)
{
    if (index < (2u << CB_HIST_SUB_BITS))
        return index;
    unsigned shift = (unsigned)(index >> CB_HIST_SUB_BITS) - 1;
    return (uint64_t)(index - ((size_t)shift << CB_HIST_SUB_BITS)) << shift;
}

uint64_t cb_hist_width(size_t index)
{
    return index < (2u << CB_HIST_SUB_BITS) ? 1 : 1ull << ((index >> CB_HIST_SUB_BITS) - 1);
}

void cb_hist_add(struct cb_hist *h, uint64_t ns)
{
    h->counts[cb_hist_index(ns)]++;
    h->n++;
    h->sum_ns += ns;
    if (ns > h->max_ns)
        h->max_ns = ns;
}

/* Blocks per sub-window: the thread's CPU clock (a system call) is read once
 * per 64 blocks, ~100 us on DRAM, outside every block's time. */
#define DIST_WINDOW 64
#define DIST_SHARE_PCT 95u

/* n blocks of k dependent loads from *p; stage[i] = block i's ns, which
 * includes one clock read (clock_gettime orders itself after the loads
 * before it: rdtscp or lfence; rdtsc). Nothing else is in the timed path:
 * a store to the stage, no branch on the value, no allocation. Returns the
 * ns from the first block's start to the last one's end. */
static uint64_t timed_blocks(uintptr_t *p, unsigned k, unsigned n, uint32_t *stage)
{
    uintptr_t q = *p;
    uint64_t t0 = cb_now_ns(), start = t0;
    for (unsigned i = 0; i < n; i++) {
        for (unsigned j = 0; j < k; j++)
            STEP(q);
        uint64_t t1 = cb_now_ns();
        uint64_t d = t1 - t0;
        stage[i] = (uint32_t)(d < UINT32_MAX ? d : UINT32_MAX);
        t0 = t1;
    }
    *p = q;
    return t0 - start;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The cost of a block with no load in it, ns: the median over 32 sub-windows
 * of their mean (the median, so an interrupt in one does not count). */
static double block_overhead(uintptr_t *p)
{
    uint32_t stage[DIST_WINDOW];
    uintptr_t none = 0;
    p = p ? p : &none;                /* k = 0: the chain is never followed */
    double means[32];
    for (int w = 0; w < 32; w++)
        means[w] = (double)timed_blocks(p, 0, DIST_WINDOW, stage) / DIST_WINDOW;
    qsort(means, 32, sizeof means[0], cmp_double);
    return (means[15] + means[16]) / 2;
}

double cb_block_overhead_ns(void)
{
    return block_overhead(NULL);
}

int cb_chase_dist(uintptr_t head, unsigned k, uint64_t blocks, struct cb_chase_dist *out)
{
    if (!head || k == 0)
        return EINVAL;
    memset(out, 0, sizeof *out);
    uint32_t stage[DIST_WINDOW];
    uintptr_t p = head;
    out->overhead_ns = block_overhead(&p);
    for (uint64_t done = 0; done < blocks;) {
        unsigned n = blocks - done < DIST_WINDOW ? (unsigned)(blocks - done) : DIST_WINDOW;
        uint64_t c0 = cb_thread_cpu_ns();
        uint64_t wall = timed_blocks(&p, k, n, stage);
        uint64_t c1 = cb_thread_cpu_ns();
        if ((c1 - c0) * 100 >= DIST_SHARE_PCT * wall) {
            for (unsigned i = 0; i < n; i++)
                cb_hist_add(&out->kept, stage[i]);
        } else {
            out->lost_blocks += n;
            out->lost_ns += wall;
        }
        done += n;
    }
    chase_sink = p;
    return 0;
}

int cb_chase_order(uintptr_t base, size_t length, uintptr_t head, size_t max_steps,
                   size_t *offsets_out, size_t *count_out)
{
    uintptr_t start = head, p = start;
    size_t n = 0;
    *count_out = 0;
    while (n < max_steps) {
        if (length && (p < base || p - base + sizeof(uintptr_t) > length))
            return EFAULT;
        offsets_out[n++] = p - base;
        *count_out = n;
        p = *(const uintptr_t *)p;
        if (p == start)
            break;
    }
    return 0;
}

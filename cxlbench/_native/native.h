/* cxlbench C core: the timed loops and the memory syscalls, free of Python.
 *
 * module.c is the only file that knows about Python: it parses arguments,
 * releases the GIL around everything here and turns results into objects.
 * Conventions: addresses are uintptr_t, sizes size_t; functions that can fail
 * return 0 or a positive errno value (they never print, never exit).
 */
#ifndef CXLBENCH_NATIVE_H
#define CXLBENCH_NATIVE_H

#include <stddef.h>
#include <stdint.h>

/* ---- clock.c: time and CPU affinity ------------------------------------ */

uint64_t cb_now_ns(void);                          /* CLOCK_MONOTONIC, ns */
int cb_pin_self(const int *cpus, size_t ncpus);    /* sched_setaffinity(calling thread) */

/* ---- numa.c: mappings, memory policy, where pages are ------------------ */

/* Private anonymous read/write mapping. hugetlb_page_bytes 0 = normal pages,
 * else 2 MiB / 1 GiB (MAP_HUGETLB | MAP_HUGE_*). fixed_addr != 0 maps at that
 * address (MAP_FIXED), replacing what is there (a reservation). */
int cb_map_anonymous(size_t length, size_t hugetlb_page_bytes, uintptr_t fixed_addr,
                     uintptr_t *addr_out);
/* Address space only: PROT_NONE, MAP_NORESERVE. Used for guard regions. */
int cb_reserve(size_t length, uintptr_t *addr_out);
int cb_unmap(uintptr_t addr, size_t length);
int cb_madvise(uintptr_t addr, size_t length, int advice);
int cb_mlock(uintptr_t addr, size_t length);
int cb_munlock(uintptr_t addr, size_t length);

/* Memory policy modes (linux/mempolicy.h values; no libnuma needed). */
enum {
    CB_MPOL_DEFAULT = 0,
    CB_MPOL_PREFERRED = 1,
    CB_MPOL_BIND = 2,
    CB_MPOL_INTERLEAVE = 3,
    CB_MPOL_LOCAL = 4,
    CB_MPOL_PREFERRED_MANY = 5,
    CB_MPOL_WEIGHTED_INTERLEAVE = 6,   /* Linux >= 6.9 */
};
enum { CB_MPOL_MF_STRICT = 1, CB_MPOL_MF_MOVE = 2 };

int cb_mbind(uintptr_t addr, size_t length, int mode, const int *nodes, size_t nnodes,
             unsigned flags);

/* Write every page of [addr, addr+length) (stride page_bytes) without changing
 * its contents, so each page is allocated before anything is timed. */
void cb_fault_in(uintptr_t addr, size_t length, size_t page_bytes);

/* Node of every page (stride page_bytes) into out[], via move_pages(2) with
 * nodes=NULL; an entry < 0 is -errno for that page (-ENOENT: not present). */
int cb_page_nodes(uintptr_t addr, size_t length, size_t page_bytes, int32_t *out);

/* ---- chase.c: pointer chase --------------------------------------------- */

/* Link the lines of [base, base+length) into `chains` random single cycles
 * (each line holds the absolute address of the next). window_bytes 0: random
 * over each chain's whole share; > 0: random within windows of that size,
 * windows in random order. heads_out[chains] gets each chain's first line
 * (its absolute address). */
int cb_chase_init(uintptr_t base, size_t length, size_t line_bytes, size_t window_bytes,
                  size_t chains, uint64_t seed, uintptr_t *heads_out);
/* Follow every chain `steps` dependent loads, in lockstep; ns elapsed. */
uint64_t cb_chase_run(const uintptr_t *heads, size_t nheads, uint64_t steps);
/* Offsets (from base) visited from head, at most max_steps, stopping when
 * the chain comes back to its head. length != 0 bounds-checks every pointer
 * (returns EFAULT on one outside the buffer). *count_out = offsets written. */
int cb_chase_order(uintptr_t base, size_t length, uintptr_t head, size_t max_steps,
                   size_t *offsets_out, size_t *count_out);

/* ---- stream.c: streaming kernels on double arrays ---------------------- */

enum cb_kernel { CB_READ, CB_WRITE, CB_COPY, CB_SCALE, CB_ADD, CB_TRIAD, CB_NKERNELS };

struct cb_kernel_info {
    const char *name;
    int reads;      /* arrays read per element    (bytes moved = (reads + writes) * 8 * n, */
    int writes;     /* arrays written per element  not counting write-allocate, as STREAM) */
    int uses_a, uses_b, uses_c;
};
extern const struct cb_kernel_info cb_kernels[CB_NKERNELS];

/* Run `kernel` over n doubles with one thread per entry of cpus (each pinned,
 * each owning a contiguous slice), `iterations` times; seconds_out[i] = time
 * from the barrier's release to the last thread finishing iteration i.
 * sum_out (may be NULL) gets the read kernel's sum of the last iteration. */
int cb_stream(enum cb_kernel kernel, double *a, double *b, double *c, size_t n,
              const int *cpus, size_t nthreads, int nt, int iterations, double scalar,
              double *seconds_out, double *sum_out);
/* Which vector code cb_stream uses on this CPU: "avx2", "sse2" or "generic". */
const char *cb_stream_isa(void);

#endif

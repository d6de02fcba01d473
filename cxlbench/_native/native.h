/* cxlbench C core: the timed loops and the memory syscalls, free of Python.
 *
 * module.c is the only file that knows about Python: it parses arguments,
 * releases the GIL around everything here and turns results into objects.
 * Conventions: addresses are uintptr_t, sizes size_t; functions that can fail
 * return 0 or a positive errno value (they never print, never exit).
 */
#ifndef CXLBENCH_NATIVE_H
#define CXLBENCH_NATIVE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* ---- clock.c: time and CPU affinity ------------------------------------ */

uint64_t cb_now_ns(void);                          /* CLOCK_MONOTONIC, ns */
/* Any clock (a thread's CPU clock from pthread_getcpuclockid too), ns; 0 on error. */
uint64_t cb_clock_ns(clockid_t id);
/* CLOCK_THREAD_CPUTIME_ID of the calling thread, ns: time it really held a CPU
 * (on a guest with steal-time accounting, less what the hypervisor took); 0 on error. */
uint64_t cb_thread_cpu_ns(void);
int cb_pin_self(const int *cpus, size_t ncpus);    /* sched_setaffinity(calling thread) */
/* pthread_create on one CPU from the first instruction; 0 or an errno value. */
int cb_start_pinned(pthread_t *tid, int cpu, void *(*fn)(void *), void *arg);

/* ---- team.c: pinned threads running timed passes together ---------------- */

/* One thread per entry of cpus, each pinned there, runs pass(job, thread) `passes`
 * times; every pass starts at a barrier. seconds_out[i]: from the first thread
 * leaving the barrier to the last finishing pass i. held_out (may be NULL): the
 * least, over threads, of its CPU time over its own interval in pass i, at most 1.
 * cpu_seconds_out (may be NULL): the CPU time of the slowest
 * thread's pass i. 0 or an errno value (a thread that could not start: none run). */
int cb_team_run(const int *cpus, size_t nthreads, int passes,
                void (*pass)(void *job, size_t thread), void *job,
                double *seconds_out, double *held_out, double *cpu_seconds_out);

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

/* ---- the chase's distribution (chase.c) --------------------------------- */

/* A log-linear histogram of durations in ns, HdrHistogram's layout: values
 * below 2^(CB_HIST_SUB_BITS + 1) have a bucket each; above, every power of two
 * is cut into 2^CB_HIST_SUB_BITS equal buckets, so no bucket is wider than
 * 1/128 of the values in it. Values from 2^CB_HIST_TOP_BITS ns (18 min) up
 * count in the last bucket. Fixed size: recording is an index and an add. */
#define CB_HIST_SUB_BITS 7
#define CB_HIST_TOP_BITS 40
#define CB_HIST_BUCKETS ((CB_HIST_TOP_BITS - CB_HIST_SUB_BITS + 1) << CB_HIST_SUB_BITS)
struct cb_hist {
    uint64_t counts[CB_HIST_BUCKETS];
    uint64_t n, sum_ns, max_ns;       /* values recorded, their exact sum and largest */
};
size_t cb_hist_index(uint64_t ns);
uint64_t cb_hist_lower(size_t index);   /* a bucket holds [lower, lower + width) */
uint64_t cb_hist_width(size_t index);
void cb_hist_add(struct cb_hist *h, uint64_t ns);

/* The chase timed in blocks of k dependent loads: `blocks` blocks from head
 * (one chain), each block's ns counted into `kept` — or, for blocks in a
 * sub-window of 64 blocks during which the thread held its CPU less than 95%
 * of the time (thread CPU clock), into lost_blocks / lost_ns instead. A
 * block's time includes one clock read; overhead_ns is that cost, measured
 * first by the same loop with k = 0, for the caller to subtract. */
struct cb_chase_dist {
    struct cb_hist kept;
    uint64_t lost_blocks, lost_ns;
    double overhead_ns;
};
int cb_chase_dist(uintptr_t head, unsigned k, uint64_t blocks, struct cb_chase_dist *out);
/* One block's clock cost, ns: blocks of no load timed as cb_chase_dist times
 * blocks (the median of 32 sub-windows' means, so an interrupt does not count). */
double cb_block_overhead_ns(void);

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
 * held_out (may be NULL): held_out[i] = the least, over threads, of the share
 * of its own kernel interval in iteration i that the thread held its CPU (its
 * thread CPU clock over its wall stamps; the barrier wait is outside both), 1 at most.
 * sum_out (may be NULL) gets the read kernel's sum of the last iteration. */
int cb_stream(enum cb_kernel kernel, double *a, double *b, double *c, size_t n,
              const int *cpus, size_t nthreads, int nt, int iterations, double scalar,
              double *seconds_out, double *held_out, double *sum_out);
/* Which vector code cb_stream uses on this CPU: "avx2", "sse2" or "generic". */
const char *cb_stream_isa(void);

/* --- host suites ---------------------------------------------------------- */

/* What a pass does to each 64-byte line (lineops.h). Lines go in groups of
 * reads + writes: the first `reads` of each group are read, the next `writes`
 * written — a full-line store (write_bytes 64), a partial store of the first
 * write_bytes bytes (4..60, a multiple of 4), or, with rmw, a load, an add of
 * `value` to every 8-byte word, and a store back. nt: non-temporal stores. */
struct cb_line_op {
    unsigned reads, writes;
    unsigned write_bytes;
    int rmw, nt;
    uint64_t value;       /* stored (every 8 bytes), or added by rmw */
};
/* EINVAL when the op is not one of those. */
int cb_line_op_check(const struct cb_line_op *op);
/* Bytes a line of the group moves on average, STREAM's way (what the
 * instructions read plus write, no write-allocate): read 64, write 64 or
 * write_bytes, rmw 128. */
double cb_line_op_bytes(const struct cb_line_op *op);

/* lines.c: `op` over [buf, buf + bytes) (64-byte aligned, whole lines), one
 * pinned thread per cpu, each a contiguous slice of whole groups; every
 * iteration starts at a barrier and seconds_out[i] runs from the first thread
 * leaving it to the last finishing (as cb_stream). cpu_seconds_out (may be
 * NULL): the CPU time of the slowest thread's pass (its thread CPU clock, so
 * time another process held its CPU is not in it). sum_out (may be NULL): the
 * sum of the 8-byte words the last iteration read. */
int cb_lines(const struct cb_line_op *op, uintptr_t buf, size_t bytes, const int *cpus,
             size_t nthreads, int iterations, double *seconds_out, double *cpu_seconds_out,
             uint64_t *sum_out);

/* loaded.c: MLC's loaded latency. A chase thread pinned to chase_cpu follows
 * the chain(s) from heads while one load thread per load_cpus entry loops
 * `op` over its slice of [load_buf, load_buf + load_bytes), waiting `delay`
 * empty-loop iterations after every line. After warmup_ns of both running,
 * the chase is timed in sub-windows of about 250 us; the load threads' lines
 * are counted over the same sub-windows (each publishes its count every 64
 * lines). A sub-window is kept when the chase thread and every load thread
 * had at least 95% of it on their CPUs (thread CPU clocks), so time another
 * process ran on them never counts; the chase goes on until duration_ns of
 * kept sub-windows or limit_ns in all. nload 0: the idle point, through the
 * same code. k > 0 (one head only): the chase is timed in blocks of k loads
 * (as cb_chase_dist), the kept sub-windows' blocks counted into hist, and
 * chase_ns includes one clock read per block (overhead_ns each, measured
 * first); k 0: untimed runs of 256 steps, no histogram. */
struct cb_loaded_result {
    uint64_t chase_ns, chase_steps;   /* kept: ns per dependent load = chase_ns / chase_steps */
    uint64_t load_ns, load_lines;     /* kept: lines the load threads did in load_ns */
    double load_bytes;                /* load_lines * cb_line_op_bytes(op) */
    uint64_t all_chase_ns, all_chase_steps, all_load_ns, all_load_lines;   /* every sub-window */
    uint64_t chase_cpu_ns, load_cpu_ns;   /* CPU time over every sub-window (load: summed) */
    uint64_t windows, windows_kept;
    unsigned k;
    double overhead_ns;
    struct cb_hist hist;              /* k > 0: kept blocks by their ns */
};
int cb_loaded(const uintptr_t *heads, size_t nheads, int chase_cpu, const struct cb_line_op *op,
              uintptr_t load_buf, size_t load_bytes, const int *load_cpus, size_t nload,
              uint64_t delay, uint64_t warmup_ns, uint64_t duration_ns, uint64_t limit_ns,
              unsigned k, struct cb_loaded_result *out);
/* ns one unit of the injection delay takes on the calling thread's CPU. */
double cb_delay_ns_per_unit(void);

/* migrate.c: move the pages of [addr, addr + length) to `node` with
 * move_pages(2) (status_out[i]: the node page i ended on, or -errno), timed;
 * *elapsed_ns_out covers the syscalls only. */
int cb_move_pages(uintptr_t addr, size_t length, size_t page_bytes, int node,
                  int32_t *status_out, uint64_t *elapsed_ns_out);

/* --- end host suites ------------------------------------------------------ */


/* --- storage --- */
/* ---- io.c: timed file I/O, a file as memory ------------------------------ */

enum { CB_IO_PSYNC = 0, CB_IO_LIBAIO = 1 };          /* engines, as fio names them */
enum { CB_IO_STAMP = 1, CB_IO_VERIFY = 2 };          /* data-pattern flags */
#define CB_IO_UNIT 4096                              /* the stamp pattern's unit */

struct cb_io_result {
    uint64_t done;          /* I/Os completed */
    uint64_t elapsed_ns;    /* first submission to last completion */
    uint64_t mismatches;    /* 4 KiB units that failed CB_IO_VERIFY */
};

/* Up to max_ios I/Os of `block` bytes on fd (stop early once max_ns have
 * passed, 0 = no time limit); I/O i at offsets[i % noffsets]. engine PSYNC:
 * pread/pwrite, qd must be 1; LIBAIO: Linux AIO with qd in flight, slot s
 * using buf + s * block (buf holds qd * block bytes), at most `batch` I/Os
 * per io_submit (0: qd). lat_ns[i] (may be NULL;
 * max_ios entries) = latency of I/O i. STAMP fills each write's buffer with
 * the pattern of its offset and seed; VERIFY counts read units that differ. */
int cb_io_run(int fd, int write, int engine, uintptr_t buf, size_t block, size_t qd,
              size_t batch, const uint64_t *offsets, size_t noffsets, uint64_t max_ios,
              uint64_t max_ns, unsigned flags, uint64_t seed, uint64_t *lat_ns,
              struct cb_io_result *out);
/* The pattern of the 4 KiB units of [buf, buf+length) for file_offset; the
 * number of units of a buffer read from file_offset that do not match it. */
void cb_io_stamp(uintptr_t buf, size_t length, uint64_t file_offset, uint64_t seed);
size_t cb_io_check(uintptr_t buf, size_t length, uint64_t file_offset, uint64_t seed);
/* MAP_SHARED mapping of a file's first length bytes; msync(MS_SYNC); pages of
 * [addr, addr+length) in the page cache (mincore). */
int cb_map_file(int fd, size_t length, int writable, uintptr_t *addr_out);
int cb_msync(uintptr_t addr, size_t length);
int cb_mincore(uintptr_t addr, size_t length, size_t *resident_out);
/* --- end storage --- */

/* ---- adamw.c: the CPU optimizer step ------------------------------------ */

/* One AdamW step (torch.optim.AdamW's arithmetic) over n fp32 parameters, in
 * place; step is the 1-based step number after this update. Split over the
 * OpenMP threads (torch.set_num_threads sets their number); built without
 * OpenMP, one thread. CXLBENCH_ADAMW_ISA=avx2|scalar caps the vector code.
 * 0 or an errno value. */
int cb_adamw(float *p, const float *g, float *m, float *v, size_t n, uint64_t step,
             double lr, double beta1, double beta2, double eps, double weight_decay);

/* The same step with bf16 gradients g (widened as they are read) and, unless copy
 * is NULL, the updated parameters also written to copy in bf16 (rounded to the
 * nearest even, as torch narrows): a GPU offload step's update in one pass. The
 * copy is written with streaming stores where its vectors land aligned (it is read
 * next by a DMA, not by this CPU); CXLBENCH_ADAMW_STORES=plain writes it with
 * ordinary stores. */
int cb_adamw_bf16(float *p, const uint16_t *g, float *m, float *v, uint16_t *copy, size_t n,
                  uint64_t step, double lr, double beta1, double beta2, double eps,
                  double weight_decay);

#endif

/* Loaded latency, as Intel MLC measures it: one thread chases pointers on the
 * target tier while load threads on the same initiator stream to that tier,
 * each waiting an injection delay after every line. Large delays leave the
 * tier nearly idle; delay 0 saturates it. Both figures come from the same
 * sub-windows: the chase's ns per load, and the lines the load threads got
 * done meanwhile (each load thread publishes its count every 64 lines, so a
 * window's count is exact to 64 lines per thread).
 *
 * On a shared machine another process can take a CPU from the chase or a
 * load thread for a few ms; a wall-clock figure would then count that time
 * as latency. The chase is therefore timed in ~250 us sub-windows, each kept
 * only if every thread had >= 95% of it on its CPU (thread CPU clocks). On an
 * idle machine every sub-window is kept and this is plain wall-clock timing.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>

#include "lineops.h"

#define MAX_HEADS 64
#define PUBLISH_LINES 64
#define CHASE_CHUNK 256
#define SUB_WINDOW_NS 250000u    /* 250 us: well inside a scheduler time slice */
#define SHARE_PCT 95u            /* a sub-window counts when every thread had 95% of it */
#define STAGE_BLOCKS 2048        /* timed blocks a sub-window holds (250 us of 8 x 15 ns loads) */

struct load_thread {
    /* the counter the chase thread reads: alone in its cache line */
    _Alignas(64) uint64_t lines;
    _Alignas(64) struct loaded_ctx *ctx;
    uintptr_t lo, hi;
    uint64_t sum;
    uint64_t cpu_at;                  /* the chase thread's: this thread's CPU clock at the last look */
    pthread_t tid;
};

struct loaded_ctx {
    const struct cb_line_op *op;
    uint64_t delay, warmup_ns, duration_ns, limit_ns;
    const uintptr_t *heads;
    size_t nheads, nload;
    struct load_thread *load;
    pthread_mutex_t lock;
    pthread_cond_t opened;
    int go, abort;
    int stop;                         /* set by the chase thread when its window closes */
    unsigned k;                       /* loads per timed block; 0: untimed chunks */
    struct cb_loaded_result result;
    uintptr_t sink;
};

static int wait_gate(struct loaded_ctx *x)
{
    pthread_mutex_lock(&x->lock);
    while (!x->go)
        pthread_cond_wait(&x->opened, &x->lock);
    pthread_mutex_unlock(&x->lock);
    return !x->abort;
}

/* A read load at full injection reads a block of lines with the widest
 * loads the CPU has, four independent accumulators and no per-line branch:
 * the loop a plain read stream runs (stream.c's read kernel, on integers so
 * no value read can be a denormal that traps into microcode). The per-line
 * loop below, with its group bookkeeping and delay test between lines, is what
 * the other points run; at delay 0 it would make the load thread's issue rate,
 * not the memory, part of the saturation figure. */
typedef uint64_t u64x4 __attribute__((vector_size(32), aligned(32)));

#if defined(__x86_64__)
__attribute__((target("avx2"))) static uint64_t read_lines_avx2(uintptr_t p, size_t n)
{
    u64x4 s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
    size_t i = 0;
    for (; i + 2 <= n; i += 2, p += 2 * CB_LINE) {
        s0 += *(const u64x4 *)p;
        s1 += *(const u64x4 *)(p + 32);
        s2 += *(const u64x4 *)(p + 64);
        s3 += *(const u64x4 *)(p + 96);
    }
    if (i < n) {
        s0 += *(const u64x4 *)p;
        s1 += *(const u64x4 *)(p + 32);
    }
    u64x4 s = (s0 + s1) + (s2 + s3);
    return s[0] + s[1] + s[2] + s[3];
}
#endif

static uint64_t read_lines_base(uintptr_t p, size_t n)
{
    struct cb_acc s;
    acc_zero(&s);
    for (size_t i = 0; i < n; i++, p += CB_LINE)
        line_read(p, &s);
    return acc_sum(&s);
}

typedef uint64_t (*read_lines_fn)(uintptr_t, size_t);

static read_lines_fn pick_read_lines(void)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2"))
        return read_lines_avx2;
#endif
    return read_lines_base;
}

/* `n` lines of the op from p, line j of its group first, waiting `delay`
 * after every line; returns the group position after them and adds what the
 * reads read to *sum. The accumulators are this function's own, so they live
 * in registers (through a pointer they would be loaded and stored every line,
 * a store-to-load chain that capped the read rate). */
static unsigned op_lines(const struct cb_line_op *op, uintptr_t p, size_t n, unsigned j,
                         uint64_t delay, uint64_t *sum)
{
    const unsigned group = op->reads + op->writes;
    const cb_v16 v = V16_SET64(op->value);
    struct cb_acc s;
    acc_zero(&s);
    for (size_t k = 0; k < n; k++, p += CB_LINE) {
        line_op(op, p, j, v, &s);
        if (++j == group)
            j = 0;
        cb_delay(delay);
    }
    *sum += acc_sum(&s);
    return j;
}

static void *load_worker(void *arg)
{
    struct load_thread *t = arg;
    struct loaded_ctx *x = t->ctx;
    if (!wait_gate(x))
        return NULL;
    const struct cb_line_op *op = x->op;
    const uint64_t delay = x->delay;
    const uintptr_t lo = t->lo, hi = t->hi;
    const read_lines_fn read_lines = op->writes == 0 && delay == 0 ? pick_read_lines() : NULL;
    uint64_t sum = 0, lines = 0;
    uintptr_t p = lo;
    unsigned j = 0;
    while (!__atomic_load_n(&x->stop, __ATOMIC_RELAXED)) {
        /* A block of PUBLISH_LINES lines, cut short at the slice's end (the
         * slice starts over with a fresh group). */
        size_t n = (hi - p) / CB_LINE < PUBLISH_LINES ? (hi - p) / CB_LINE : PUBLISH_LINES;
        if (read_lines)
            sum += read_lines(p, n);
        else
            j = op_lines(op, p, n, j, delay, &sum);
        p += n * CB_LINE;
        if (p >= hi) {
            p = lo;
            j = 0;
        }
        lines += n;
        __atomic_store_n(&t->lines, lines, __ATOMIC_RELAXED);
    }
    if (op->nt && op->writes)
        NT_FENCE();
    t->sum = sum;
    return NULL;
}

static uint64_t load_lines(const struct loaded_ctx *x)
{
    uint64_t n = 0;
    for (size_t i = 0; i < x->nload; i++)
        n += __atomic_load_n(&x->load[i].lines, __ATOMIC_RELAXED);
    return n;
}

/* Whether every load thread had SHARE_PCT of `wall` on its CPU since the last
 * look, each by its own CPU clock (a sum would let one thread's absence hide
 * behind the others' full share: of 8, one could be off its CPU 40% of the
 * window); their CPU time since then is added to *cpu. A thread whose clock
 * cannot be read is not known to have held its CPU. */
static int loads_held(struct loaded_ctx *x, uint64_t wall, uint64_t *cpu)
{
    int all = 1;
    for (size_t i = 0; i < x->nload; i++) {
        clockid_t id;
        if (pthread_getcpuclockid(x->load[i].tid, &id) != 0) {
            all = 0;
            continue;
        }
        uint64_t now = cb_clock_ns(id);
        if (now == 0 || now < x->load[i].cpu_at) {   /* the clock failed (it reads 0): unknown */
            all = 0;
            continue;
        }
        uint64_t d = now - x->load[i].cpu_at;
        x->load[i].cpu_at = now;
        *cpu += d;
        if (d * 100 < SHARE_PCT * wall)
            all = 0;
    }
    return all;
}

static void chase_chunk(uintptr_t *p, size_t n, unsigned steps)
{
    if (n == 1) {
        uintptr_t q = p[0];
        for (unsigned i = 0; i < steps; i++)
            q = *(const uintptr_t *)q;
        p[0] = q;
        return;
    }
    for (unsigned i = 0; i < steps; i++)
        for (size_t c = 0; c < n; c++)
            p[c] = *(const uintptr_t *)p[c];
}

/* A sub-window of untimed chunks from t0 until SUB_WINDOW_NS have passed:
 * its end; *steps_out the steps each chain took. */
static uint64_t untimed_window(uintptr_t *p, size_t nheads, uint64_t t0, uint64_t *steps_out)
{
    uint64_t steps = 0, t1;
    do {
        chase_chunk(p, nheads, CHASE_CHUNK);
        steps += CHASE_CHUNK;
        t1 = cb_now_ns();
    } while (t1 - t0 < SUB_WINDOW_NS);
    *steps_out = steps;
    return t1;
}

/* A sub-window of blocks of k loads (one chain), each block's ns into stage,
 * from t0 until SUB_WINDOW_NS have passed or the stage is full: its end. The
 * clock read that ends a block starts the next, as in chase.c. */
static uint64_t timed_window(uintptr_t *p, unsigned k, uint64_t t0, uint32_t *stage,
                             unsigned *nblocks)
{
    uintptr_t q = p[0];
    uint64_t t1 = t0;
    unsigned n = 0;
    do {
        for (unsigned j = 0; j < k; j++)
            q = *(const uintptr_t *)q;
        uint64_t t = cb_now_ns();
        uint64_t d = t - t1;
        stage[n++] = (uint32_t)(d < UINT32_MAX ? d : UINT32_MAX);
        t1 = t;
    } while (t1 - t0 < SUB_WINDOW_NS && n < STAGE_BLOCKS);
    p[0] = q;
    *nblocks = n;
    return t1;
}

static void *chase_worker(void *arg)
{
    struct loaded_ctx *x = arg;
    if (!wait_gate(x))
        return NULL;
    uint32_t stage[STAGE_BLOCKS];
    uintptr_t p[MAX_HEADS];
    for (size_t c = 0; c < x->nheads; c++)
        p[c] = x->heads[c];

    uint64_t w0 = cb_now_ns();         /* the load threads ramp up; caches and TLBs warm */
    while (cb_now_ns() - w0 < x->warmup_ns)
        chase_chunk(p, x->nheads, CHASE_CHUNK);

    struct cb_loaded_result *r = &x->result;
    r->k = x->k;
    r->overhead_ns = x->k ? cb_block_overhead_ns() : 0;
    const uint64_t limit = x->limit_ns;
    uint64_t begin = cb_now_ns(), unused = 0;
    loads_held(x, 0, &unused);         /* each load thread's clock, from here */
    uint64_t n0 = load_lines(x);
    uint64_t tn0 = cb_now_ns(), t0 = tn0, c0 = cb_thread_cpu_ns();
    while (r->chase_ns < x->duration_ns && t0 - begin < limit) {
        uint64_t steps, t1;
        unsigned nb = 0;
        if (x->k)
            t1 = timed_window(p, x->k, t0, stage, &nb), steps = (uint64_t)nb * x->k;
        else
            t1 = untimed_window(p, x->nheads, t0, &steps);
        uint64_t c1 = cb_thread_cpu_ns();  /* beside t1, as c0 beside t0: the same span */
        uint64_t n1 = load_lines(x), tn1 = cb_now_ns();
        uint64_t wall = t1 - t0, lwall = tn1 - tn0, lcpu = 0;
        int loads_ok = loads_held(x, lwall, &lcpu);
        int kept = (c1 - c0) * 100 >= SHARE_PCT * wall && (x->nload == 0 || loads_ok);
        r->windows++;
        r->all_chase_ns += wall;
        r->all_chase_steps += steps;
        r->all_load_ns += lwall;
        r->all_load_lines += n1 - n0;
        r->chase_cpu_ns += c1 - c0;
        r->load_cpu_ns += lcpu;
        if (kept) {
            r->windows_kept++;
            r->chase_ns += wall;
            r->chase_steps += steps;
            r->load_ns += lwall;
            r->load_lines += n1 - n0;
            for (unsigned i = 0; i < nb; i++)
                cb_hist_add(&r->hist, stage[i]);
        }
        n0 = n1;
        tn0 = tn1;
        t0 = cb_now_ns();      /* the clock reads above are in no chase sub-window */
        c0 = cb_thread_cpu_ns();
    }
    r->load_bytes = (double)r->load_lines * cb_line_op_bytes(x->op);
    __atomic_store_n(&x->stop, 1, __ATOMIC_RELAXED);

    uintptr_t sink = 0;
    for (size_t c = 0; c < x->nheads; c++)
        sink ^= p[c];
    x->sink = sink;
    return NULL;
}

int cb_loaded(const uintptr_t *heads, size_t nheads, int chase_cpu, const struct cb_line_op *op,
              uintptr_t load_buf, size_t load_bytes, const int *load_cpus, size_t nload,
              uint64_t delay, uint64_t warmup_ns, uint64_t duration_ns, uint64_t limit_ns,
              unsigned k, struct cb_loaded_result *out)
{
    if (k && nheads != 1)
        return EINVAL;
    if (nheads == 0 || nheads > MAX_HEADS || chase_cpu < 0 || chase_cpu >= CPU_SETSIZE)
        return EINVAL;
    int err = cb_line_op_check(op);
    if (err)
        return err;
    if (nload) {
        if (load_buf % CB_LINE || load_bytes % CB_LINE || load_bytes / CB_LINE < nload)
            return EINVAL;
        for (size_t i = 0; i < nload; i++)
            if (load_cpus[i] < 0 || load_cpus[i] >= CPU_SETSIZE || load_cpus[i] == chase_cpu)
                return EINVAL;
    }

    struct loaded_ctx x = {
        .op = op, .delay = delay, .warmup_ns = warmup_ns, .duration_ns = duration_ns,
        .limit_ns = limit_ns > duration_ns ? limit_ns : duration_ns,
        .heads = heads, .nheads = nheads, .nload = nload, .k = k,
    };
    if (nload) {
        x.load = aligned_alloc(64, nload * sizeof *x.load);
        if (!x.load)
            return ENOMEM;
    }
    pthread_mutex_init(&x.lock, NULL);
    pthread_cond_init(&x.opened, NULL);

    /* Slices of whole lines; every load thread walks its own. */
    size_t nlines = load_bytes / CB_LINE, created = 0;
    for (size_t i = 0; i < nload; i++) {
        struct load_thread *t = &x.load[i];
        t->lines = 0;
        t->ctx = &x;
        t->lo = load_buf + i * nlines / nload * CB_LINE;
        t->hi = load_buf + (i + 1) * nlines / nload * CB_LINE;
        t->sum = 0;
        t->cpu_at = 0;
        err = cb_start_pinned(&t->tid, load_cpus[i], load_worker, t);
        if (err)
            break;
        created++;
    }
    pthread_t chase_tid;
    int chase_started = 0;
    if (!err) {
        err = cb_start_pinned(&chase_tid, chase_cpu, chase_worker, &x);
        chase_started = err == 0;
    }
    pthread_mutex_lock(&x.lock);
    x.go = 1;
    x.abort = err != 0;
    pthread_cond_broadcast(&x.opened);
    pthread_mutex_unlock(&x.lock);
    if (chase_started)
        pthread_join(chase_tid, NULL);
    __atomic_store_n(&x.stop, 1, __ATOMIC_RELAXED);    /* also when the chase never ran */
    for (size_t i = 0; i < created; i++)
        pthread_join(x.load[i].tid, NULL);
    if (!err)
        *out = x.result;    /* zeroed by the initialiser, filled by the chase thread */
    pthread_cond_destroy(&x.opened);
    pthread_mutex_destroy(&x.lock);
    free(x.load);
    return err;
}

double cb_delay_ns_per_unit(void)
{
    /* On the thread's CPU clock: time another process takes is not the loop's. */
    const uint64_t n = 20000000;
    cb_delay(n / 10);                  /* let the clock settle */
    uint64_t t0 = cb_thread_cpu_ns();
    cb_delay(n);
    return (double)(cb_thread_cpu_ns() - t0) / (double)n;
}

/* Timed file I/O for the storage family: O_DIRECT reads and writes at a queue
 * depth, every I/O's latency recorded, plus the file-mapping calls the "NVMe as
 * memory" chase needs (map a file, msync, count resident pages).
 *
 * Queue depth 1 with engine "psync" is a plain pread/pwrite loop, as fio's
 * psync engine does it. Any queue depth with engine "libaio" keeps `qd` I/Os
 * in flight through the Linux AIO syscalls (io_setup, io_submit,
 * io_getevents) called with syscall(2), so there is no libaio dependency; the
 * loop is fio's libaio engine with iodepth=qd, iodepth_batch_submit=batch and
 * iodepth_batch_complete_min=1: reap at least one completion, refill every
 * freed slot, `batch` I/Os per io_submit call (fio's default is 1: one call,
 * and one doorbell, per I/O).
 *
 * I/O i goes to offsets[i % noffsets]: the caller passes a permutation of the
 * file's blocks for random I/O (each block once per pass, like fio's random
 * map) or the blocks in order for sequential I/O. Slot s (0 <= s < qd) owns
 * buffer buf + s * block, so I/Os in flight never share memory.
 *
 * Latency of one I/O = from the moment its slot was free to be refilled (the
 * first io_submit of that refill round; at queue depth 1, just before the
 * pread/pwrite) to the clock read just after its completion is reaped. An I/O
 * refilled after others of the same round waits for their io_submit calls (a
 * doorbell, so a VM exit, each): that wait is its latency too. Stamped at its own
 * io_submit instead, 8 refills at QD8 on a virtio disk hid ~22 us an I/O and
 * the mean latency fell below Little's law (qd / IOPS); fio's agrees with it.
 *
 * Data check: CB_IO_STAMP writes every 4 KiB unit with a pattern derived from
 * its file offset and a seed (first word: the offset, second: the seed, then
 * pseudo-random words); CB_IO_VERIFY checks each read's units against it and
 * counts mismatches, so a test can prove reads return the bytes written at
 * the right offsets.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/aio_abi.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "native.h"

/* ---- the stamp pattern ----------------------------------------------------- */

static uint64_t mix(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void stamp_unit(uint64_t *w, uint64_t file_offset, uint64_t seed)
{
    uint64_t state = seed * 0xd1b54a32d192ed03ull ^ file_offset;
    w[0] = file_offset;
    w[1] = seed;
    for (size_t k = 2; k < CB_IO_UNIT / sizeof(uint64_t); k++)
        w[k] = mix(&state);
}

static int unit_matches(const uint64_t *w, uint64_t file_offset, uint64_t seed)
{
    uint64_t state = seed * 0xd1b54a32d192ed03ull ^ file_offset;
    if (w[0] != file_offset || w[1] != seed)
        return 0;
    for (size_t k = 2; k < CB_IO_UNIT / sizeof(uint64_t); k++)
        if (w[k] != mix(&state))
            return 0;
    return 1;
}

void cb_io_stamp(uintptr_t buf, size_t length, uint64_t file_offset, uint64_t seed)
{
    for (size_t off = 0; off + CB_IO_UNIT <= length; off += CB_IO_UNIT)
        stamp_unit((uint64_t *)(buf + off), file_offset + off, seed);
}

size_t cb_io_check(uintptr_t buf, size_t length, uint64_t file_offset, uint64_t seed)
{
    size_t bad = 0;
    for (size_t off = 0; off + CB_IO_UNIT <= length; off += CB_IO_UNIT)
        bad += !unit_matches((const uint64_t *)(buf + off), file_offset + off, seed);
    return bad;
}

/* ---- the loops ---------------------------------------------------------------- */

struct job {
    int fd, write;
    uintptr_t buf;
    size_t block;
    const uint64_t *offsets;
    size_t noffsets;
    uint64_t max_ios, max_ns;
    size_t batch;               /* most I/Os per io_submit */
    unsigned flags;
    uint64_t seed;
    uint64_t *lat;              /* may be NULL */
    struct cb_io_result *out;
};

static uint64_t offset_of(const struct job *j, uint64_t i)
{
    return j->offsets[i % j->noffsets];
}

/* Before a write / after a read: the optional data pattern. */
static void before(const struct job *j, uintptr_t b, uint64_t off)
{
    if (j->write && (j->flags & CB_IO_STAMP))
        cb_io_stamp(b, j->block, off, j->seed);
}

static void after(const struct job *j, uintptr_t b, uint64_t off)
{
    if (!j->write && (j->flags & CB_IO_VERIFY))
        j->out->mismatches += cb_io_check(b, j->block, off, j->seed);
}

static int run_sync(const struct job *j)
{
    uint64_t start = cb_now_ns(), end = start, i;
    for (i = 0; i < j->max_ios; i++) {
        uint64_t off = offset_of(j, i);
        before(j, j->buf, off);
        uint64_t t0 = cb_now_ns();
        ssize_t r;
        do {
            r = j->write ? pwrite(j->fd, (const void *)j->buf, j->block, (off_t)off)
                         : pread(j->fd, (void *)j->buf, j->block, (off_t)off);
        } while (r < 0 && errno == EINTR);
        end = cb_now_ns();
        if (r < 0)
            return errno;
        if ((size_t)r != j->block)
            return EIO;                         /* short: past the end of the file */
        if (j->lat)
            j->lat[i] = end - t0;
        after(j, j->buf, off);
        if (j->max_ns && end - start >= j->max_ns) {
            i++;
            break;
        }
    }
    j->out->done = i;
    j->out->elapsed_ns = end - start;
    return 0;
}

static long sys_io_setup(unsigned nr, aio_context_t *ctx)
{
    return syscall(SYS_io_setup, nr, ctx);
}

static long sys_io_destroy(aio_context_t ctx)
{
    return syscall(SYS_io_destroy, ctx);
}

static long sys_io_submit(aio_context_t ctx, long n, struct iocb **iocbs)
{
    return syscall(SYS_io_submit, ctx, n, iocbs);
}

static long sys_io_getevents(aio_context_t ctx, long min, long max, struct io_event *ev)
{
    return syscall(SYS_io_getevents, ctx, min, max, ev, NULL);
}

struct slot {
    struct iocb cb;
    uint64_t index;             /* which I/O of the run the slot carries */
    uint64_t submitted_ns;
};

/* Submit the iocbs of slots free[0..nfree) (each already prepared). Returns
 * how many the kernel took (>= 0) or -errno. EAGAIN with I/Os in flight is
 * not an error: the caller reaps and tries again. */
static long submit_all(aio_context_t ctx, struct iocb **ptrs, long n)
{
    long done = 0;
    while (done < n) {
        long r = sys_io_submit(ctx, n - done, ptrs + done);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN && done > 0)
                break;
            return done ? done : -errno;
        }
        if (r == 0)
            break;
        done += r;
    }
    return done;
}

static int run_aio(const struct job *j, size_t qd)
{
    aio_context_t ctx = 0;
    if (sys_io_setup((unsigned)qd, &ctx) < 0)
        return errno;
    struct slot *slots = calloc(qd, sizeof *slots);
    struct iocb **ptrs = calloc(qd, sizeof *ptrs);
    struct io_event *events = calloc(qd, sizeof *events);
    size_t *freelist = calloc(qd, sizeof *freelist);
    int err = 0;
    if (!slots || !ptrs || !events || !freelist) {
        err = ENOMEM;
        goto out;
    }
    size_t nfree = qd, inflight = 0;
    for (size_t s = 0; s < qd; s++)
        freelist[s] = qd - 1 - s;
    uint64_t issued = 0, done = 0, start = cb_now_ns(), end = start;
    uint64_t wanted = 0;                /* when this refill round began; 0: not yet */
    int stop = j->max_ios == 0;

    for (;;) {
        /* Fill free slots, at most `batch` per io_submit call. */
        long n = 0;
        while (!stop && nfree > 0 && issued + (uint64_t)n < j->max_ios && (size_t)n < j->batch) {
            size_t s = freelist[--nfree];
            struct slot *sl = &slots[s];
            uint64_t off = offset_of(j, issued + (uint64_t)n);
            uintptr_t b = j->buf + s * j->block;
            before(j, b, off);
            memset(&sl->cb, 0, sizeof sl->cb);
            sl->cb.aio_data = s;
            sl->cb.aio_lio_opcode = j->write ? IOCB_CMD_PWRITE : IOCB_CMD_PREAD;
            sl->cb.aio_fildes = (uint32_t)j->fd;
            sl->cb.aio_buf = b;
            sl->cb.aio_nbytes = j->block;
            sl->cb.aio_offset = (int64_t)off;
            sl->index = issued + (uint64_t)n;
            ptrs[n++] = &sl->cb;
        }
        if (n > 0) {
            if (!wanted)
                wanted = cb_now_ns();
            for (long k = 0; k < n; k++)
                slots[ptrs[k]->aio_data].submitted_ns = wanted;
            long took = submit_all(ctx, ptrs, n);
            if (took < 0 && !(took == -EAGAIN && inflight > 0)) {
                err = (int)-took;
                for (long k = 0; k < n; k++)
                    freelist[nfree++] = ptrs[k]->aio_data;
                break;
            }
            if (took < 0)
                took = 0;
            /* The ones not taken go back to the free list, to retry after a reap.
             * Their I/O numbers are reissued in order: undo from the end. */
            for (long k = n - 1; k >= took; k--)
                freelist[nfree++] = ptrs[k]->aio_data;
            issued += (uint64_t)took;
            inflight += (size_t)took;
            if (took == n && nfree > 0 && !stop && issued < j->max_ios)
                continue;                       /* more free slots: the next batch */
        }
        if (inflight == 0)
            break;
        wanted = 0;                     /* the next round starts after this reap */
        long got;
        do {
            got = sys_io_getevents(ctx, 1, (long)qd, events);
        } while (got < 0 && errno == EINTR);
        if (got < 0) {
            err = errno;
            break;
        }
        uint64_t t = cb_now_ns();
        end = t;
        for (long k = 0; k < got; k++) {
            size_t s = (size_t)events[k].data;
            struct slot *sl = &slots[s];
            if (events[k].res < 0 && !err)
                err = (int)-events[k].res;
            else if ((size_t)events[k].res != j->block && !err)
                err = EIO;
            if (j->lat)
                j->lat[sl->index] = t - sl->submitted_ns;
            after(j, (uintptr_t)sl->cb.aio_buf, (uint64_t)sl->cb.aio_offset);
            freelist[nfree++] = s;
        }
        inflight -= (size_t)got;
        done += (uint64_t)got;
        if (err || issued >= j->max_ios || (j->max_ns && t - start >= j->max_ns))
            stop = 1;
    }
    /* On an error, let what is in flight land before the buffers go away. */
    while (inflight > 0) {
        long got = sys_io_getevents(ctx, 1, (long)qd, events);
        if (got < 0 && errno != EINTR)
            break;
        if (got > 0)
            inflight -= (size_t)got;
    }
    j->out->done = done;
    j->out->elapsed_ns = end - start;
out:
    sys_io_destroy(ctx);
    free(slots);
    free(ptrs);
    free(events);
    free(freelist);
    return err;
}

int cb_io_run(int fd, int write, int engine, uintptr_t buf, size_t block, size_t qd,
              size_t batch, const uint64_t *offsets, size_t noffsets, uint64_t max_ios,
              uint64_t max_ns, unsigned flags, uint64_t seed, uint64_t *lat_ns,
              struct cb_io_result *out)
{
    memset(out, 0, sizeof *out);
    if (fd < 0 || !buf || block == 0 || qd == 0 || !offsets || noffsets == 0)
        return EINVAL;
    if ((flags & (CB_IO_STAMP | CB_IO_VERIFY)) && block % CB_IO_UNIT)
        return EINVAL;
    struct job j = {fd, write, buf, block, offsets, noffsets, max_ios, max_ns,
                    batch ? batch : qd, flags, seed, lat_ns, out};
    if (engine == CB_IO_PSYNC)
        return qd == 1 ? run_sync(&j) : EINVAL;
    if (engine == CB_IO_LIBAIO)
        return run_aio(&j, qd);
    return EINVAL;
}

/* ---- a file as memory ------------------------------------------------------------ */

int cb_map_file(int fd, size_t length, int writable, uintptr_t *addr_out)
{
    int prot = PROT_READ | (writable ? PROT_WRITE : 0);
    void *p = mmap(NULL, length, prot, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return errno;
    *addr_out = (uintptr_t)p;
    return 0;
}

int cb_msync(uintptr_t addr, size_t length)
{
    return msync((void *)addr, length, MS_SYNC) == 0 ? 0 : errno;
}

int cb_mincore(uintptr_t addr, size_t length, size_t *resident_out)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t pages = (length + (size_t)page - 1) / (size_t)page;
    unsigned char *vec = malloc(pages ? pages : 1);
    if (!vec)
        return ENOMEM;
    if (mincore((void *)addr, length, vec) != 0) {
        int err = errno;
        free(vec);
        return err;
    }
    size_t n = 0;
    for (size_t i = 0; i < pages; i++)
        n += vec[i] & 1;
    free(vec);
    *resident_out = n;
    return 0;
}

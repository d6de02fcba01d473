/* Timed passes of a line op (lineops.h) over a buffer: the write-penalty
 * kernels (host suites). Read, full-line write, read:write mixes, read-modify-
 * write, partial-line writes, regular or non-temporal, by one pinned thread
 * per CPU over contiguous slices; team.c starts the threads and times them. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>

#include "lineops.h"

int cb_line_op_check(const struct cb_line_op *op)
{
    if (op->reads + op->writes == 0 || op->reads > 1024 || op->writes > 1024)
        return EINVAL;
    if (op->writes && !op->rmw &&
        (op->write_bytes < 4 || op->write_bytes > CB_LINE || op->write_bytes % 4))
        return EINVAL;
    if (op->rmw && op->write_bytes != CB_LINE)
        return EINVAL;           /* a read-modify-write covers the whole line */
    if (op->nt && !CB_HAVE_NT)
        return ENOTSUP;
    return 0;
}

double cb_line_op_bytes(const struct cb_line_op *op)
{
    double per_write = op->rmw ? 2.0 * CB_LINE : (double)op->write_bytes;
    return ((double)op->reads * CB_LINE + (double)op->writes * per_write) /
           (double)(op->reads + op->writes);
}

/* One pass over lines [lo, hi): line k of the slice is line k % group of a group. */
static uint64_t pass(const struct cb_line_op *op, uintptr_t lo, uintptr_t hi)
{
    const unsigned group = op->reads + op->writes;
    const cb_v16 v = V16_SET64(op->value);
    struct cb_acc s;
    acc_zero(&s);
    unsigned j = 0;
    if (op->writes == 0) {                    /* pure reads: no per-line dispatch */
        for (uintptr_t p = lo; p < hi; p += CB_LINE)
            line_read(p, &s);
    } else if (op->reads == 0 && !op->rmw && op->write_bytes == CB_LINE) {
        for (uintptr_t p = lo; p < hi; p += CB_LINE)
            line_store(p, v, op->nt);
    } else {
        for (uintptr_t p = lo; p < hi; p += CB_LINE) {
            line_op(op, p, j, v, &s);
            if (++j == group)
                j = 0;
        }
    }
    if (op->nt && op->writes)
        NT_FENCE();               /* drain the write-combining buffers inside the timed region */
    return acc_sum(&s);
}

struct lines_job {
    const struct cb_line_op *op;
    uintptr_t buf;
    size_t nlines, chunk;         /* lines; each thread's slice, whole groups */
    uint64_t *sums;               /* [thread]: what the last pass read */
};

static void lines_pass(void *job, size_t thread)
{
    struct lines_job *x = job;
    size_t lo = thread * x->chunk < x->nlines ? thread * x->chunk : x->nlines;
    size_t hi = lo + x->chunk < x->nlines ? lo + x->chunk : x->nlines;
    x->sums[thread] = pass(x->op, x->buf + lo * CB_LINE, x->buf + hi * CB_LINE);
}

int cb_lines(const struct cb_line_op *op, uintptr_t buf, size_t bytes, const int *cpus,
             size_t nthreads, int iterations, double *seconds_out, double *cpu_seconds_out,
             uint64_t *sum_out)
{
    int err = cb_line_op_check(op);
    if (err)
        return err;
    if (buf % CB_LINE || bytes % CB_LINE || bytes == 0 || nthreads == 0 || iterations <= 0)
        return EINVAL;

    /* Slices of whole groups, so line i of the buffer is line i % group of its
     * group whatever the number of threads. */
    size_t group = op->reads + op->writes;
    size_t nlines = bytes / CB_LINE;
    size_t ngroups = (nlines + group - 1) / group;
    struct lines_job x = {
        .op = op, .buf = buf, .nlines = nlines,
        .chunk = (ngroups + nthreads - 1) / nthreads * group,
        .sums = calloc(nthreads, sizeof *x.sums),
    };
    if (!x.sums)
        return ENOMEM;
    err = cb_team_run(cpus, nthreads, iterations, lines_pass, &x, seconds_out, NULL,
                      cpu_seconds_out);
    if (!err && sum_out) {
        uint64_t sum = 0;
        for (size_t i = 0; i < nthreads; i++)
            sum += x.sums[i];
        *sum_out = sum;
    }
    free(x.sums);
    return err;
}

/* Migrating a range's pages to another node with move_pages(2), timed: one of
 * the strategies the zero-copy family compares (host suites). The other, mbind
 * with MPOL_MF_MOVE, is cb_mbind. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "native.h"

#define MOVE_PAGES_PER_CALL 16384
#define CB_MPOL_MF_MOVE_PAGES 2          /* MPOL_MF_MOVE: pages only this process maps */

int cb_move_pages(uintptr_t addr, size_t length, size_t page_bytes, int node,
                  int32_t *status_out, uint64_t *elapsed_ns_out)
{
    if (page_bytes == 0 || addr % page_bytes || node < 0)
        return EINVAL;
    size_t npages = (length + page_bytes - 1) / page_bytes;
    size_t batch = npages < MOVE_PAGES_PER_CALL ? npages : MOVE_PAGES_PER_CALL;
    void **pages = malloc((batch ? batch : 1) * sizeof *pages);
    int *nodes = malloc((batch ? batch : 1) * sizeof *nodes);
    int *status = malloc((batch ? batch : 1) * sizeof *status);
    int err = 0;
    uint64_t elapsed = 0;
    if (!pages || !nodes || !status) {
        err = ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < batch; i++)
        nodes[i] = node;
    for (size_t done = 0; done < npages; done += batch) {
        size_t count = npages - done < batch ? npages - done : batch;
        for (size_t i = 0; i < count; i++)
            pages[i] = (void *)(addr + (done + i) * page_bytes);
        uint64_t t0 = cb_now_ns();
        long rc = syscall(SYS_move_pages, 0, (unsigned long)count, pages, nodes, status,
                          CB_MPOL_MF_MOVE_PAGES);
        elapsed += cb_now_ns() - t0;
        if (rc < 0) {
            err = errno;
            goto out;
        }
        for (size_t i = 0; i < count; i++)
            status_out[done + i] = status[i];
    }
out:
    *elapsed_ns_out = elapsed;
    free(pages);
    free(nodes);
    free(status);
    return err;
}

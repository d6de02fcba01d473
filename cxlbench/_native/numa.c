/* Mappings, memory policy and page placement, through raw syscalls
 * (mbind and move_pages go through syscall(2): no libnuma dependency). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "native.h"

#ifndef MAP_HUGE_SHIFT
#define MAP_HUGE_SHIFT 26
#endif

static int log2_exact(size_t x)
{
    if (x == 0 || (x & (x - 1)) != 0)
        return -1;
    return __builtin_ctzll((unsigned long long)x);
}

int cb_map_anonymous(size_t length, size_t hugetlb_page_bytes, uintptr_t fixed_addr,
                     uintptr_t *addr_out)
{
    int flags = MAP_PRIVATE | MAP_ANONYMOUS;
    if (length == 0)
        return EINVAL;
    if (hugetlb_page_bytes) {
        int shift = log2_exact(hugetlb_page_bytes);
        if (shift < 0 || length % hugetlb_page_bytes != 0)
            return EINVAL;
        flags |= MAP_HUGETLB | (shift << MAP_HUGE_SHIFT);
    }
    if (fixed_addr)
        flags |= MAP_FIXED;
    void *p = mmap((void *)fixed_addr, length, PROT_READ | PROT_WRITE, flags, -1, 0);
    if (p == MAP_FAILED)
        return errno;
    *addr_out = (uintptr_t)p;
    return 0;
}

int cb_reserve(size_t length, uintptr_t *addr_out)
{
    if (length == 0)
        return EINVAL;
    void *p = mmap(NULL, length, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return errno;
    *addr_out = (uintptr_t)p;
    return 0;
}

int cb_unmap(uintptr_t addr, size_t length)
{
    return munmap((void *)addr, length) == 0 ? 0 : errno;
}

int cb_madvise(uintptr_t addr, size_t length, int advice)
{
    return madvise((void *)addr, length, advice) == 0 ? 0 : errno;
}

int cb_mlock(uintptr_t addr, size_t length)
{
    return mlock((void *)addr, length) == 0 ? 0 : errno;
}

int cb_munlock(uintptr_t addr, size_t length)
{
    return munlock((void *)addr, length) == 0 ? 0 : errno;
}

#define BITS_PER_WORD (8 * sizeof(unsigned long))

int cb_mbind(uintptr_t addr, size_t length, int mode, const int *nodes, size_t nnodes,
             unsigned flags)
{
    int highest = -1;
    for (size_t i = 0; i < nnodes; i++) {
        if (nodes[i] < 0 || nodes[i] >= 1 << 16)
            return EINVAL;
        if (nodes[i] > highest)
            highest = nodes[i];
    }
    size_t words = nnodes ? (size_t)highest / BITS_PER_WORD + 1 : 0;
    unsigned long *mask = NULL;
    if (words) {
        mask = calloc(words, sizeof *mask);
        if (!mask)
            return ENOMEM;
        for (size_t i = 0; i < nnodes; i++)
            mask[nodes[i] / BITS_PER_WORD] |= 1UL << (nodes[i] % BITS_PER_WORD);
    }
    /* The kernel reads maxnode - 1 bits (libnuma passes size + 1 too). */
    unsigned long maxnode = words ? words * BITS_PER_WORD + 1 : 0;
    long rc = syscall(SYS_mbind, (void *)addr, (unsigned long)length, (unsigned long)mode,
                      mask, maxnode, flags);
    int err = rc == 0 ? 0 : errno;
    free(mask);
    return err;
}

void cb_fault_in(uintptr_t addr, size_t length, size_t page_bytes)
{
    if (page_bytes == 0)
        page_bytes = 4096;
    /* An atomic OR of zero is a write access (one write fault, no zero-page
     * read fault first) that leaves the data as it was. */
    for (size_t off = 0; off < length; off += page_bytes)
        __atomic_fetch_or((unsigned char *)(addr + off), 0, __ATOMIC_RELAXED);
}

#define PAGES_PER_CALL 16384

int cb_page_nodes(uintptr_t addr, size_t length, size_t page_bytes, int32_t *out)
{
    if (page_bytes == 0)
        return EINVAL;
    size_t npages = (length + page_bytes - 1) / page_bytes;
    void **pages = malloc(PAGES_PER_CALL * sizeof *pages);
    int *status = malloc(PAGES_PER_CALL * sizeof *status);
    int err = 0;
    if (!pages || !status) {
        err = ENOMEM;
        goto out;
    }
    for (size_t done = 0; done < npages; done += PAGES_PER_CALL) {
        size_t count = npages - done < PAGES_PER_CALL ? npages - done : PAGES_PER_CALL;
        for (size_t i = 0; i < count; i++)
            pages[i] = (void *)(addr + (done + i) * page_bytes);
        /* nodes == NULL: move nothing, report each page's node in status. */
        if (syscall(SYS_move_pages, 0, (unsigned long)count, pages, NULL, status, 0) != 0) {
            err = errno;
            goto out;
        }
        for (size_t i = 0; i < count; i++)
            out[done + i] = status[i];
    }
out:
    free(pages);
    free(status);
    return err;
}

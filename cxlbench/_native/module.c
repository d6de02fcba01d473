/* The Python binding of the C core: parse arguments, release the GIL around
 * the work in chase.c / stream.c / numa.c / clock.c, convert the results.
 * Addresses cross as Python ints (uintptr_t). Errors become OSError(errno,
 * message) or ValueError; nothing here loops over data. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "native.h"

#define MAX_CHAINS 4096

/* ---- argument helpers ------------------------------------------------------ */

static int conv_addr(PyObject *o, void *out)
{
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred())
        return 0;
    *(uintptr_t *)out = (uintptr_t)v;
    return 1;
}

static int conv_size(PyObject *o, void *out)
{
    size_t v = PyLong_AsSize_t(o);
    if (v == (size_t)-1 && PyErr_Occurred())
        return 0;
    *(size_t *)out = v;
    return 1;
}

static PyObject *seconds_list(const double *seconds, int n)
{
    PyObject *list = PyList_New(n);
    for (int i = 0; list && i < n; i++) {
        PyObject *v = PyFloat_FromDouble(seconds[i]);
        if (!v) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, i, v);
    }
    return list;
}

_Static_assert(sizeof(uintptr_t) == sizeof(size_t), "addresses travel as size_t");

static PyObject *sizes_list(const size_t *values, size_t n)
{
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list && i < n; i++) {
        PyObject *v = PyLong_FromSize_t(values[i]);
        if (!v) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, v);
    }
    return list;
}


/* A sequence of ints into a new C array (PyMem_Free it). */
static int int_array(PyObject *seq, const char *what, int **out, size_t *n)
{
    PyObject *fast = PySequence_Fast(seq, what);
    if (!fast)
        return -1;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(fast);
    int *arr = PyMem_Malloc((len ? len : 1) * sizeof *arr);
    if (!arr) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
        if (v == -1 && PyErr_Occurred()) {
            PyMem_Free(arr);
            Py_DECREF(fast);
            return -1;
        }
        arr[i] = (int)v;
    }
    Py_DECREF(fast);
    *out = arr;
    *n = (size_t)len;
    return 0;
}

/* OSError(err, "<what>: <strerror>"), with .errno set. */
static PyObject *raise_os(int err, const char *fmt, ...)
{
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    PyObject *args = Py_BuildValue("(is)", err, what);
    if (args) {
        PyErr_SetObject(PyExc_OSError, args);
        Py_DECREF(args);
    }
    return NULL;
}

#define OS_FAIL(err, ...) raise_os((err), __VA_ARGS__)

/* What a failure to start pinned threads most likely means, for the message:
 * pthread_create answers EINVAL to an affinity naming a CPU this process may
 * not use, and EAGAIN at the user's limit on processes and threads. Any other
 * errno speaks for itself, and a CPU hint would send the reader the wrong way. */
static const char *thread_hint(int err)
{
    if (err == EINVAL)
        return " (a CPU not allowed to this process?)";
    if (err == EAGAIN)
        return " (a thread could not be created: too many processes/threads for this user, "
               "see ulimit -u)";
    return "";
}

/* ---- mappings ---------------------------------------------------------------- */

static PyObject *py_map_anonymous(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"length", "hugetlb_page_bytes", "fixed_addr", NULL};
    size_t length, huge = 0;
    uintptr_t fixed = 0, addr = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|O&O&:map_anonymous", kwlist, conv_size,
                                     &length, conv_size, &huge, conv_addr, &fixed))
        return NULL;
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = cb_map_anonymous(length, huge, fixed, &addr);
    Py_END_ALLOW_THREADS
    if (err == EINVAL && huge && (huge & (huge - 1) || length % huge))
        return PyErr_Format(PyExc_ValueError,
                            "hugetlb mapping: length %zu is not a multiple of the page size %zu "
                            "(or that is not a power of two)", length, huge);
    if (err)
        return OS_FAIL(err, "mmap of %zu bytes%s: %s", length,
                       huge ? " with hugetlb pages" : "", strerror(err));
    return PyLong_FromUnsignedLongLong(addr);
}

static PyObject *py_reserve(PyObject *self, PyObject *args)
{
    size_t length;
    uintptr_t addr = 0;
    if (!PyArg_ParseTuple(args, "O&:reserve", conv_size, &length))
        return NULL;
    int err = cb_reserve(length, &addr);
    if (err)
        return OS_FAIL(err, "reserving %zu bytes of address space: %s", length, strerror(err));
    return PyLong_FromUnsignedLongLong(addr);
}

/* unmap / mlock / munlock: (addr, length) -> None */
#define ADDR_LEN_CALL(pyname, cname, what)                                        \
    static PyObject *pyname(PyObject *self, PyObject *args)                       \
    {                                                                             \
        uintptr_t addr;                                                           \
        size_t length;                                                            \
        int err;                                                                  \
        if (!PyArg_ParseTuple(args, "O&O&:" what, conv_addr, &addr, conv_size, &length)) \
            return NULL;                                                          \
        Py_BEGIN_ALLOW_THREADS                                                    \
        err = cname(addr, length);                                                \
        Py_END_ALLOW_THREADS                                                      \
        if (err)                                                                  \
            return OS_FAIL(err, what "(0x%lx, %zu): %s", (unsigned long)addr, length, \
                           strerror(err));                                        \
        Py_RETURN_NONE;                                                           \
    }

ADDR_LEN_CALL(py_unmap, cb_unmap, "munmap")
ADDR_LEN_CALL(py_mlock, cb_mlock, "mlock")
ADDR_LEN_CALL(py_munlock, cb_munlock, "munlock")

static PyObject *py_madvise(PyObject *self, PyObject *args)
{
    uintptr_t addr;
    size_t length;
    int advice, err;
    if (!PyArg_ParseTuple(args, "O&O&i:madvise", conv_addr, &addr, conv_size, &length, &advice))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    err = cb_madvise(addr, length, advice);
    Py_END_ALLOW_THREADS
    if (err)
        return OS_FAIL(err, "madvise(advice %d) on %zu bytes: %s", advice, length, strerror(err));
    Py_RETURN_NONE;
}

/* ---- memory policy and placement ------------------------------------------- */

static const struct {
    const char *name;
    int mode;
} mpol_modes[] = {
    {"default", CB_MPOL_DEFAULT},
    {"preferred", CB_MPOL_PREFERRED},
    {"bind", CB_MPOL_BIND},
    {"interleave", CB_MPOL_INTERLEAVE},
    {"local", CB_MPOL_LOCAL},
    {"preferred_many", CB_MPOL_PREFERRED_MANY},
    {"weighted_interleave", CB_MPOL_WEIGHTED_INTERLEAVE},
};

static PyObject *py_mbind(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"addr", "length", "nodes", "mode", "strict", "move", NULL};
    uintptr_t addr;
    size_t length, nnodes;
    PyObject *nodes_obj;
    const char *mode_name = "bind";
    int strict = 1, move = 0, mode = -1, *nodes, err;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&O&O|spp:mbind", kwlist, conv_addr, &addr,
                                     conv_size, &length, &nodes_obj, &mode_name, &strict, &move))
        return NULL;
    for (size_t i = 0; i < sizeof mpol_modes / sizeof mpol_modes[0]; i++)
        if (strcmp(mode_name, mpol_modes[i].name) == 0)
            mode = mpol_modes[i].mode;
    if (mode < 0)
        return PyErr_Format(PyExc_ValueError,
                            "unknown memory policy mode '%s'; use bind, preferred, interleave, "
                            "weighted_interleave, preferred_many, local or default", mode_name);
    if (int_array(nodes_obj, "nodes must be a sequence of node numbers", &nodes, &nnodes) < 0)
        return NULL;
    if (nnodes == 0 && mode != CB_MPOL_DEFAULT && mode != CB_MPOL_LOCAL) {
        PyMem_Free(nodes);
        return PyErr_Format(PyExc_ValueError, "mbind mode %s needs at least one node", mode_name);
    }
    unsigned flags = (strict ? CB_MPOL_MF_STRICT : 0) | (move ? CB_MPOL_MF_MOVE : 0);
    Py_BEGIN_ALLOW_THREADS
    err = cb_mbind(addr, length, mode, nodes, nnodes, flags);
    Py_END_ALLOW_THREADS
    int first = nnodes ? nodes[0] : -1;
    PyMem_Free(nodes);
    if (err == EINVAL && mode == CB_MPOL_WEIGHTED_INTERLEAVE)
        return OS_FAIL(err, "mbind: this kernel refuses MPOL_WEIGHTED_INTERLEAVE (mode 6 needs "
                            "Linux >= 6.9); use mode=\"interleave\"");
    if (err == EIO)
        return OS_FAIL(err, "mbind(%s, strict): pages already in the range are not on the "
                            "requested nodes (pass move=True to migrate them)", mode_name);
    if (err)
        return OS_FAIL(err, "mbind(%s, nodes starting %d, %zu bytes): %s", mode_name, first,
                       length, strerror(err));
    Py_RETURN_NONE;
}

static PyObject *py_fault_in(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"addr", "length", "page_bytes", NULL};
    uintptr_t addr;
    size_t length, page = 4096;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&O&|O&:fault_in", kwlist, conv_addr, &addr,
                                     conv_size, &length, conv_size, &page))
        return NULL;
    if (page == 0)
        return PyErr_Format(PyExc_ValueError, "page_bytes must be positive");
    Py_BEGIN_ALLOW_THREADS
    cb_fault_in(addr, length, page);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *py_page_nodes(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"addr", "length", "page_bytes", NULL};
    uintptr_t addr;
    size_t length, page = 4096;
    int err;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&O&|O&:page_nodes", kwlist, conv_addr, &addr,
                                     conv_size, &length, conv_size, &page))
        return NULL;
    if (page == 0)
        return PyErr_Format(PyExc_ValueError, "page_bytes must be positive");
    size_t npages = (length + page - 1) / page;
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(npages * sizeof(int32_t)));
    if (!out)
        return NULL;
    int32_t *nodes = (int32_t *)PyBytes_AS_STRING(out);   /* ours alone until returned */
    Py_BEGIN_ALLOW_THREADS
    err = cb_page_nodes(addr, length, page, nodes);
    Py_END_ALLOW_THREADS
    if (err) {
        Py_DECREF(out);
        return OS_FAIL(err, "move_pages (querying the node of %zu pages): %s", npages,
                       strerror(err));
    }
    return out;
}

static PyObject *py_pin_self(PyObject *self, PyObject *args)
{
    PyObject *cpus_obj;
    int *cpus, err;
    size_t n;
    if (!PyArg_ParseTuple(args, "O:pin_self", &cpus_obj))
        return NULL;
    if (int_array(cpus_obj, "cpus must be a sequence of CPU numbers", &cpus, &n) < 0)
        return NULL;
    err = n ? cb_pin_self(cpus, n) : EINVAL;
    PyMem_Free(cpus);
    if (err)
        return OS_FAIL(err, "sched_setaffinity: %s", strerror(err));
    Py_RETURN_NONE;
}

static PyObject *py_now_ns(PyObject *self, PyObject *noargs)
{
    return PyLong_FromUnsignedLongLong(cb_now_ns());
}

/* ---- pointer chase ----------------------------------------------------------- */

static PyObject *py_chase_init(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"addr", "length", "line_bytes", "window_bytes", "chains", "seed",
                             NULL};
    uintptr_t addr;
    size_t length, line = 64, window = 0, chains = 1;
    unsigned long long seed = 1;
    int err;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&O&|O&O&O&K:chase_init", kwlist, conv_addr,
                                     &addr, conv_size, &length, conv_size, &line, conv_size,
                                     &window, conv_size, &chains, &seed))
        return NULL;
    if (line < sizeof(uintptr_t) || line % sizeof(uintptr_t) || addr % sizeof(uintptr_t))
        return PyErr_Format(PyExc_ValueError,
                            "line_bytes must be a multiple of %zu and the buffer %zu-byte aligned",
                            sizeof(uintptr_t), sizeof(uintptr_t));
    if (window % line)
        return PyErr_Format(PyExc_ValueError, "window_bytes (%zu) must be a multiple of "
                            "line_bytes (%zu)", window, line);
    if (chains == 0 || chains > MAX_CHAINS || chains > length / line)
        return PyErr_Format(PyExc_ValueError, "chains must be 1..%d and at most the number of "
                            "lines (%zu)", MAX_CHAINS, length / line);
    uintptr_t heads[MAX_CHAINS];
    Py_BEGIN_ALLOW_THREADS
    err = cb_chase_init(addr, length, line, window, chains, seed, heads);
    Py_END_ALLOW_THREADS
    if (err)
        return OS_FAIL(err, "chase_init: %s", strerror(err));
    return sizes_list((const size_t *)heads, chains);
}

/* A histogram as a dict: n, sum_ns, max_ns and buckets, a list of
 * (lower_ns, width_ns, count) for the buckets that counted anything. */
static PyObject *hist_dict(const struct cb_hist *h)
{
    PyObject *buckets = PyList_New(0);
    if (!buckets)
        return NULL;
    for (size_t i = 0; i < CB_HIST_BUCKETS; i++) {
        if (!h->counts[i])
            continue;
        PyObject *b = Py_BuildValue("(KKK)", (unsigned long long)cb_hist_lower(i),
                                    (unsigned long long)cb_hist_width(i),
                                    (unsigned long long)h->counts[i]);
        if (!b || PyList_Append(buckets, b) < 0) {
            Py_XDECREF(b);
            Py_DECREF(buckets);
            return NULL;
        }
        Py_DECREF(b);
    }
    return Py_BuildValue("{s:K,s:K,s:K,s:N}", "n", (unsigned long long)h->n,
                         "sum_ns", (unsigned long long)h->sum_ns,
                         "max_ns", (unsigned long long)h->max_ns, "buckets", buckets);
}

static PyObject *py_chase_dist(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"head", "k", "blocks", NULL};
    uintptr_t head;
    unsigned k;
    unsigned long long blocks;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&IK:chase_dist", kwlist, conv_addr, &head,
                                     &k, &blocks))
        return NULL;
    if (k == 0 || head == 0)
        return PyErr_Format(PyExc_ValueError, "chase_dist: k >= 1 loads a block, a chain head");
    struct cb_chase_dist *d = PyMem_Malloc(sizeof *d);   /* ~35 KB: not on the stack */
    if (!d)
        return PyErr_NoMemory();
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = cb_chase_dist(head, k, blocks, d);
    Py_END_ALLOW_THREADS
    if (err) {
        PyMem_Free(d);
        return OS_FAIL(err, "chase_dist: %s", strerror(err));
    }
    PyObject *out = Py_BuildValue("{s:N,s:K,s:K,s:d,s:I}", "kept", hist_dict(&d->kept),
                                  "lost_blocks", (unsigned long long)d->lost_blocks,
                                  "lost_ns", (unsigned long long)d->lost_ns,
                                  "overhead_ns", d->overhead_ns, "k", k);
    PyMem_Free(d);
    return out;
}

static PyObject *py_hist_index(PyObject *self, PyObject *arg)
{
    unsigned long long ns = PyLong_AsUnsignedLongLong(arg);
    if (ns == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    size_t i = cb_hist_index(ns);
    return Py_BuildValue("(nKK)", (Py_ssize_t)i, (unsigned long long)cb_hist_lower(i),
                         (unsigned long long)cb_hist_width(i));
}

static PyObject *py_chase_run(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"heads", "steps", NULL};
    PyObject *heads_obj;
    unsigned long long steps;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OK:chase_run", kwlist, &heads_obj, &steps))
        return NULL;
    PyObject *fast = PySequence_Fast(heads_obj, "heads must be the list chase_init returned");
    if (!fast)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (n < 1 || n > MAX_CHAINS) {
        Py_DECREF(fast);
        return PyErr_Format(PyExc_ValueError, "heads: 1..%d chain heads, not %zd",
                            MAX_CHAINS, n);
    }
    uintptr_t heads[MAX_CHAINS];
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!conv_addr(PySequence_Fast_GET_ITEM(fast, i), &heads[i])) {
            Py_DECREF(fast);
            return NULL;
        }
    }
    Py_DECREF(fast);
    uint64_t ns;
    Py_BEGIN_ALLOW_THREADS
    ns = cb_chase_run(heads, (size_t)n, steps);
    Py_END_ALLOW_THREADS
    return PyLong_FromUnsignedLongLong(ns);
}

static PyObject *py_chase_order(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"addr", "head", "max_steps", "length", NULL};
    uintptr_t addr, head;
    size_t max_steps, length = 0, count = 0;
    int err;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&O&O&|O&:chase_order", kwlist, conv_addr,
                                     &addr, conv_addr, &head, conv_size, &max_steps, conv_size,
                                     &length))
        return NULL;
    size_t *offsets = PyMem_Malloc((max_steps ? max_steps : 1) * sizeof *offsets);
    if (!offsets)
        return PyErr_NoMemory();
    Py_BEGIN_ALLOW_THREADS
    err = cb_chase_order(addr, length, head, max_steps, offsets, &count);
    Py_END_ALLOW_THREADS
    if (err) {
        PyMem_Free(offsets);
        return PyErr_Format(PyExc_ValueError, "chase_order: step %zu leads outside the "
                            "%zu-byte buffer", count, length);
    }
    PyObject *list = sizes_list(offsets, count);
    PyMem_Free(offsets);
    return list;
}

/* ---- streaming ----------------------------------------------------------------- */

/* Shared by stream() and stream_check(): parse, run, return 0 or -1 with an exception. */
static int run_stream(const char *kname, uintptr_t a, uintptr_t b, uintptr_t c,
                      size_t array_bytes, PyObject *cpus_obj, int nt, int iterations,
                      double scalar, double *seconds, double *held, double *sum)
{
    int k = -1;
    for (int i = 0; i < CB_NKERNELS; i++)
        if (strcmp(kname, cb_kernels[i].name) == 0)
            k = i;
    if (k < 0) {
        PyErr_Format(PyExc_ValueError, "unknown stream kernel '%s'; use read, write, copy, "
                     "scale, add or triad", kname);
        return -1;
    }
    const struct cb_kernel_info *info = &cb_kernels[k];
    if ((info->uses_a && !a) || (info->uses_b && !b) || (info->uses_c && !c)) {
        PyErr_Format(PyExc_ValueError, "kernel %s needs arrays%s%s%s (a non-zero address each)",
                     kname, info->uses_a ? " a" : "", info->uses_b ? " b" : "",
                     info->uses_c ? " c" : "");
        return -1;
    }
    if ((a | b | c) % sizeof(double)) {
        PyErr_Format(PyExc_ValueError, "stream arrays must be 8-byte aligned");
        return -1;
    }
    int *cpus;
    size_t ncpus;
    if (int_array(cpus_obj, "cpus must be a sequence of CPU numbers", &cpus, &ncpus) < 0)
        return -1;
    if (ncpus == 0) {
        PyMem_Free(cpus);
        PyErr_Format(PyExc_ValueError, "cpus: at least one CPU (one thread per CPU)");
        return -1;
    }
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = cb_stream((enum cb_kernel)k, (double *)a, (double *)b, (double *)c,
                    array_bytes / sizeof(double), cpus, ncpus, nt, iterations, scalar, seconds,
                    held, sum);
    Py_END_ALLOW_THREADS
    PyMem_Free(cpus);
    if (err) {
        raise_os(err, "stream %s on %zu thread(s): %s%s", kname, ncpus, strerror(err),
                 thread_hint(err));
        return -1;
    }
    return 0;
}

static PyObject *py_stream(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"kernel", "a", "b", "c", "array_bytes", "cpus", "nt",
                             "iterations", "scalar", "held", NULL};
    const char *kname;
    uintptr_t a, b, c;
    size_t array_bytes;
    PyObject *cpus;
    int nt = 0, iterations = 10, want_held = 0;
    double scalar = 3.0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sO&O&O&O&O|pid$p:stream", kwlist, &kname,
                                     conv_addr, &a, conv_addr, &b, conv_addr, &c, conv_size,
                                     &array_bytes, &cpus, &nt, &iterations, &scalar,
                                     &want_held))
        return NULL;
    if (iterations < 1)
        return PyErr_Format(PyExc_ValueError, "iterations must be at least 1");
    /* one block: seconds, then (asked) held */
    double *seconds = PyMem_Malloc((size_t)iterations * (want_held ? 2 : 1) * sizeof *seconds);
    if (!seconds)
        return PyErr_NoMemory();
    double *held = want_held ? seconds + iterations : NULL;
    if (run_stream(kname, a, b, c, array_bytes, cpus, nt, iterations, scalar, seconds, held,
                   NULL) < 0) {
        PyMem_Free(seconds);
        return NULL;
    }
    PyObject *list = seconds_list(seconds, iterations), *result = list;
    if (list && held) {
        PyObject *held_list = seconds_list(held, iterations);
        result = held_list ? PyTuple_Pack(2, list, held_list) : NULL;
        Py_XDECREF(held_list);
        Py_DECREF(list);
    }
    PyMem_Free(seconds);
    return result;
}

static PyObject *py_stream_check(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"kernel", "a", "b", "c", "array_bytes", "cpus", "nt", "scalar",
                             NULL};
    const char *kname;
    uintptr_t a, b, c;
    size_t array_bytes;
    PyObject *cpus;
    int nt = 0;
    double scalar = 3.0, seconds, sum = 0.0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sO&O&O&O&O|pd:stream_check", kwlist, &kname,
                                     conv_addr, &a, conv_addr, &b, conv_addr, &c, conv_size,
                                     &array_bytes, &cpus, &nt, &scalar))
        return NULL;
    if (run_stream(kname, a, b, c, array_bytes, cpus, nt, 1, scalar, &seconds, NULL, &sum) < 0)
        return NULL;
    return PyFloat_FromDouble(sum);
}

/* --- storage --- */

static int engine_of(const char *name)
{
    if (strcmp(name, "psync") == 0)
        return CB_IO_PSYNC;
    if (strcmp(name, "libaio") == 0)
        return CB_IO_LIBAIO;
    return -1;
}

static PyObject *py_io_run(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"fd", "write", "engine", "buf", "block", "qd", "offsets",
                             "max_ios", "lat", "max_ns", "stamp", "verify", "seed", "batch",
                             NULL};
    int fd, write, stamp = 0, verify = 0;
    const char *engine_name;
    uintptr_t buf;
    size_t block, qd, batch = 1;
    Py_buffer offs = {0}, lat = {0};
    PyObject *lat_obj = Py_None;
    unsigned long long max_ios, max_ns = 0, seed = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ipsO&O&O&y*K|OKppKO&:io_run", kwlist,
                                     &fd, &write, &engine_name, conv_addr, &buf, conv_size,
                                     &block, conv_size, &qd, &offs, &max_ios, &lat_obj, &max_ns,
                                     &stamp, &verify, &seed, conv_size, &batch))
        return NULL;
    PyObject *ret = NULL;
    int engine = engine_of(engine_name);
    size_t noffs = (size_t)offs.len / sizeof(uint64_t);
    if (engine < 0) {
        PyErr_Format(PyExc_ValueError, "engine must be 'psync' or 'libaio', not '%s'",
                     engine_name);
        goto done;
    }
    if (engine == CB_IO_PSYNC && qd != 1) {
        PyErr_Format(PyExc_ValueError, "the psync engine has one I/O in flight (qd 1), not %zu; "
                     "use libaio for a deeper queue", qd);
        goto done;
    }
    if (offs.len % sizeof(uint64_t) || noffs == 0 || block == 0 || qd == 0 || qd > 65536) {
        PyErr_Format(PyExc_ValueError, "io_run: offsets must hold uint64 byte offsets (at least "
                     "one), block > 0 and qd 1..65536");
        goto done;
    }
    if ((stamp || verify) && block % CB_IO_UNIT) {
        PyErr_Format(PyExc_ValueError, "stamp/verify work on whole %d-byte units; block %zu "
                     "is not a multiple", CB_IO_UNIT, block);
        goto done;
    }
    if (lat_obj != Py_None) {
        if (PyObject_GetBuffer(lat_obj, &lat, PyBUF_WRITABLE) < 0)
            goto done;
        if ((size_t)lat.len < max_ios * sizeof(uint64_t)) {
            PyErr_Format(PyExc_ValueError, "lat holds %zd bytes, max_ios %llu needs %llu",
                         lat.len, max_ios, max_ios * 8ull);
            goto done;
        }
    }
    struct cb_io_result r;
    int err;
    unsigned flags = (stamp ? CB_IO_STAMP : 0) | (verify ? CB_IO_VERIFY : 0);
    Py_BEGIN_ALLOW_THREADS
    err = cb_io_run(fd, write, engine, buf, block, qd, batch, (const uint64_t *)offs.buf,
                    noffs, max_ios, max_ns, flags, seed, lat.buf ? (uint64_t *)lat.buf : NULL,
                    &r);
    Py_END_ALLOW_THREADS
    if (err == EINVAL)
        PyErr_Format(PyExc_OSError, "%s %s of %zu bytes at qd %zu: %s (O_DIRECT needs the "
                     "buffer, block size and offsets aligned to the device's logical block)",
                     engine_name, write ? "write" : "read", block, qd, strerror(err));
    else if (err)
        raise_os(err, "%s %s of %zu bytes at qd %zu: %s", engine_name,
                 write ? "write" : "read", block, qd, strerror(err));
    else
        ret = Py_BuildValue("(KKK)", (unsigned long long)r.done,
                            (unsigned long long)r.elapsed_ns, (unsigned long long)r.mismatches);
done:
    PyBuffer_Release(&offs);
    if (lat.obj)
        PyBuffer_Release(&lat);
    return ret;
}

static PyObject *py_io_stamp(PyObject *self, PyObject *args)
{
    uintptr_t addr;
    size_t length;
    unsigned long long off, seed;
    if (!PyArg_ParseTuple(args, "O&O&KK:io_stamp", conv_addr, &addr, conv_size, &length, &off,
                          &seed))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    cb_io_stamp(addr, length, off, seed);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *py_io_check(PyObject *self, PyObject *args)
{
    uintptr_t addr;
    size_t length, bad;
    unsigned long long off, seed;
    if (!PyArg_ParseTuple(args, "O&O&KK:io_check", conv_addr, &addr, conv_size, &length, &off,
                          &seed))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    bad = cb_io_check(addr, length, off, seed);
    Py_END_ALLOW_THREADS
    return PyLong_FromSize_t(bad);
}

static PyObject *py_map_file(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"fd", "length", "writable", NULL};
    int fd, writable = 1, err;
    size_t length;
    uintptr_t addr = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "iO&|p:map_file", kwlist, &fd, conv_size,
                                     &length, &writable))
        return NULL;
    err = cb_map_file(fd, length, writable, &addr);
    if (err)
        return OS_FAIL(err, "mmap of %zu bytes of fd %d: %s", length, fd, strerror(err));
    return PyLong_FromUnsignedLongLong(addr);
}

ADDR_LEN_CALL(py_msync, cb_msync, "msync")

static PyObject *py_mincore(PyObject *self, PyObject *args)
{
    uintptr_t addr;
    size_t length, resident = 0;
    int err;
    if (!PyArg_ParseTuple(args, "O&O&:mincore", conv_addr, &addr, conv_size, &length))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    err = cb_mincore(addr, length, &resident);
    Py_END_ALLOW_THREADS
    if (err)
        return OS_FAIL(err, "mincore on %zu bytes: %s", length, strerror(err));
    return PyLong_FromSize_t(resident);
}

/* --- end storage --- */

/* --- host suites --- */

/* The line op's keyword arguments, shared by lines(), lines_check() and
 * loaded_latency(); refused here with a sentence rather than an errno. */
static int check_line_op(const struct cb_line_op *op)
{
    int err = cb_line_op_check(op);
    if (err == ENOTSUP) {
        PyErr_Format(PyExc_ValueError, "non-temporal stores are not available on this CPU "
                     "architecture; use nt=False");
        return -1;
    }
    if (err) {
        PyErr_Format(PyExc_ValueError, "line op: reads + writes must be 1..2048 lines per group "
                     "(reads=%u, writes=%u); write_bytes a multiple of 4 in 4..64 (%u), and 64 "
                     "with rmw", op->reads, op->writes, op->write_bytes);
        return -1;
    }
    return 0;
}


/* lines() and lines_check(): parse, run, 0 or -1 with an exception set. */
static int run_lines(PyObject *args, PyObject *kw, const char *fmt, int *iterations,
                     double **seconds, uint64_t *sum)
{
    static char *kwlist[] = {"addr", "length", "cpus", "reads", "writes", "write_bytes", "rmw",
                             "nt", "value", "iterations", "clock", NULL};
    const char *clock = "wall";
    uintptr_t addr;
    size_t length, ncpus;
    PyObject *cpus_obj;
    unsigned long long value = 0;
    struct cb_line_op op = {.reads = 1, .writes = 0, .write_bytes = 64};
    if (!PyArg_ParseTupleAndKeywords(args, kw, fmt, kwlist, conv_addr, &addr, conv_size,
                                     &length, &cpus_obj, &op.reads, &op.writes, &op.write_bytes,
                                     &op.rmw, &op.nt, &value, iterations, &clock))
        return -1;
    int cpu_clock = strcmp(clock, "cpu") == 0;
    if (!cpu_clock && strcmp(clock, "wall") != 0) {
        PyErr_Format(PyExc_ValueError, "clock must be 'wall' or 'cpu', not '%s'", clock);
        return -1;
    }
    op.value = value;
    if (check_line_op(&op) < 0)
        return -1;
    if (addr % 64 || length % 64 || length == 0) {
        PyErr_Format(PyExc_ValueError, "lines: the buffer must be 64-byte aligned and a whole "
                     "number of 64-byte lines (length %zu)", length);
        return -1;
    }
    if (*iterations < 1) {
        PyErr_Format(PyExc_ValueError, "iterations must be at least 1");
        return -1;
    }
    int *cpus;
    if (int_array(cpus_obj, "cpus must be a sequence of CPU numbers", &cpus, &ncpus) < 0)
        return -1;
    if (ncpus == 0) {
        PyMem_Free(cpus);
        PyErr_Format(PyExc_ValueError, "cpus: at least one CPU (one thread per CPU)");
        return -1;
    }
    *seconds = PyMem_Malloc((size_t)*iterations * sizeof **seconds);
    double *wall = PyMem_Malloc((size_t)*iterations * sizeof *wall);
    if (!*seconds || !wall) {
        PyMem_Free(*seconds);
        PyMem_Free(wall);
        *seconds = NULL;
        PyMem_Free(cpus);
        PyErr_NoMemory();
        return -1;
    }
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = cpu_clock ? cb_lines(&op, addr, length, cpus, ncpus, *iterations, wall, *seconds, sum)
                    : cb_lines(&op, addr, length, cpus, ncpus, *iterations, *seconds, NULL, sum);
    Py_END_ALLOW_THREADS
    PyMem_Free(wall);
    PyMem_Free(cpus);
    if (err) {
        PyMem_Free(*seconds);
        *seconds = NULL;
        raise_os(err, "lines on %zu thread(s): %s%s", ncpus, strerror(err), thread_hint(err));
        return -1;
    }
    return 0;
}

static PyObject *py_lines(PyObject *self, PyObject *args, PyObject *kw)
{
    int iterations = 10;
    double *seconds = NULL;
    uint64_t sum = 0;
    if (run_lines(args, kw, "O&O&O|IIIppKis:lines", &iterations, &seconds, &sum) < 0)
        return NULL;
    PyObject *list = seconds_list(seconds, iterations);
    PyMem_Free(seconds);
    return list;
}

static PyObject *py_lines_check(PyObject *self, PyObject *args, PyObject *kw)
{
    int iterations = 1;
    double *seconds = NULL;
    uint64_t sum = 0;
    if (run_lines(args, kw, "O&O&O|IIIppKis:lines_check", &iterations, &seconds, &sum) < 0)
        return NULL;
    PyMem_Free(seconds);
    return PyLong_FromUnsignedLongLong(sum);
}

/* ---- the CPU optimizer step ------------------------------------------------ */

/* What an AdamW kernel's return means to the caller named `what`. */
static PyObject *adamw_result(int err, const char *what)
{
    if (err == EINVAL)
        return PyErr_Format(PyExc_ValueError, "%s: step counts from 1", what);
    if (err)
        return OS_FAIL(err, "%s: %s", what, strerror(err));
    Py_RETURN_NONE;
}

static PyObject *py_adamw_step(PyObject *self, PyObject *args)
{
    uintptr_t p, g, m, v;
    size_t n;
    unsigned long long step;
    double lr, beta1, beta2, eps, weight_decay;
    if (!PyArg_ParseTuple(args, "O&O&O&O&O&Kddddd:adamw_step", conv_addr, &p, conv_addr, &g,
                          conv_addr, &m, conv_addr, &v, conv_size, &n, &step, &lr, &beta1,
                          &beta2, &eps, &weight_decay))
        return NULL;
    if (!p || !g || !m || !v)
        return PyErr_Format(PyExc_ValueError, "adamw_step: p, g, m and v need addresses");
    if ((p | g | m | v) % sizeof(float))
        return PyErr_Format(PyExc_ValueError, "adamw_step: buffers must be 4-byte aligned fp32");
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = cb_adamw((float *)p, (const float *)g, (float *)m, (float *)v, n, step, lr, beta1,
                   beta2, eps, weight_decay);
    Py_END_ALLOW_THREADS
    return adamw_result(err, "adamw_step");
}

/* copy: an address, or 0 for none */
static PyObject *py_adamw_step_bf16(PyObject *self, PyObject *args)
{
    uintptr_t p, g, m, v, copy;
    size_t n;
    unsigned long long step;
    double lr, beta1, beta2, eps, weight_decay;
    if (!PyArg_ParseTuple(args, "O&O&O&O&O&O&Kddddd:adamw_step_bf16", conv_addr, &p, conv_addr, &g,
                          conv_addr, &m, conv_addr, &v, conv_addr, &copy, conv_size, &n, &step, &lr,
                          &beta1, &beta2, &eps, &weight_decay))
        return NULL;
    if (!p || !g || !m || !v)
        return PyErr_Format(PyExc_ValueError, "adamw_step_bf16: p, g, m and v need addresses (only copy may be 0)");
    if ((p | m | v) % sizeof(float) || (g | copy) % sizeof(uint16_t))
        return PyErr_Format(PyExc_ValueError,
                            "adamw_step_bf16: p, m, v must be 4-byte aligned fp32, g and copy 2-byte bf16");
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = cb_adamw_bf16((float *)p, (const uint16_t *)g, (float *)m, (float *)v, (uint16_t *)copy, n,
                        step, lr, beta1, beta2, eps, weight_decay);
    Py_END_ALLOW_THREADS
    return adamw_result(err, "adamw_step_bf16");
}

static PyObject *py_line_op_bytes(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"reads", "writes", "write_bytes", "rmw", NULL};
    struct cb_line_op op = {.reads = 1, .writes = 0, .write_bytes = 64};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|IIIp:line_op_bytes", kwlist, &op.reads,
                                     &op.writes, &op.write_bytes, &op.rmw))
        return NULL;
    if (check_line_op(&op) < 0)
        return NULL;
    return PyFloat_FromDouble(cb_line_op_bytes(&op));
}

static PyObject *py_loaded_latency(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"heads", "chase_cpu", "load_addr", "load_length", "load_cpus",
                             "reads", "writes", "write_bytes", "rmw", "nt", "delay",
                             "warmup_ns", "duration_ns", "limit_ns", "k", NULL};
    PyObject *heads_obj, *cpus_obj;
    int chase_cpu;
    uintptr_t load_addr;
    size_t load_length, ncpus;
    unsigned long long delay = 0, warmup_ns = 50000000ull, duration_ns = 200000000ull;
    unsigned long long limit_ns = 0;
    unsigned k = 0;
    struct cb_line_op op = {.reads = 1, .writes = 0, .write_bytes = 64};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OiO&O&O|IIIppKKKKI:loaded_latency", kwlist,
                                     &heads_obj, &chase_cpu, conv_addr, &load_addr, conv_size,
                                     &load_length, &cpus_obj, &op.reads, &op.writes,
                                     &op.write_bytes, &op.rmw, &op.nt, &delay, &warmup_ns,
                                     &duration_ns, &limit_ns, &k))
        return NULL;
    if (check_line_op(&op) < 0)
        return NULL;
    PyObject *fast = PySequence_Fast(heads_obj, "heads must be the list chase_init returned");
    if (!fast)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (n < 1 || n > 64) {
        Py_DECREF(fast);
        return PyErr_Format(PyExc_ValueError, "heads: 1..64 chain heads, not %zd", n);
    }
    if (k && n != 1) {
        Py_DECREF(fast);
        return PyErr_Format(PyExc_ValueError, "k > 0 (a distribution) needs one chain, not %zd", n);
    }
    uintptr_t heads[64];
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!conv_addr(PySequence_Fast_GET_ITEM(fast, i), &heads[i])) {
            Py_DECREF(fast);
            return NULL;
        }
    }
    Py_DECREF(fast);
    int *cpus;
    if (int_array(cpus_obj, "load_cpus must be a sequence of CPU numbers", &cpus, &ncpus) < 0)
        return NULL;
    for (size_t i = 0; i < ncpus; i++) {
        if (cpus[i] == chase_cpu) {
            PyMem_Free(cpus);
            return PyErr_Format(PyExc_ValueError, "CPU %d is the chase thread's; load threads "
                                "need CPUs of their own", chase_cpu);
        }
    }
    if (ncpus && (load_addr % 64 || load_length % 64 || load_length / 64 < ncpus)) {
        PyMem_Free(cpus);
        return PyErr_Format(PyExc_ValueError, "the load buffer must be 64-byte aligned, whole "
                            "lines, at least one line per load thread");
    }
    struct cb_loaded_result *rp = PyMem_Malloc(sizeof *rp);     /* ~35 KB: not on the stack */
    if (!rp) {
        PyMem_Free(cpus);
        return PyErr_NoMemory();
    }
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = cb_loaded(heads, (size_t)n, chase_cpu, &op, load_addr, load_length, cpus, ncpus,
                    delay, warmup_ns, duration_ns, limit_ns ? limit_ns : 5 * duration_ns, k, rp);
    Py_END_ALLOW_THREADS
    PyMem_Free(cpus);
    struct cb_loaded_result r = *rp;
    PyObject *hist = err || !k ? (Py_INCREF(Py_None), Py_None) : hist_dict(&rp->hist);
    PyMem_Free(rp);
    if (!hist)
        return NULL;
    if (err) {
        Py_DECREF(hist);
        return OS_FAIL(err, "loaded_latency with %zu load thread(s): %s%s", ncpus, strerror(err),
                       thread_hint(err));
    }
#define U(x) (unsigned long long)(x)
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:d,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:I,s:d,s:N}",
                         "chase_ns", U(r.chase_ns), "chase_steps", U(r.chase_steps),
                         "load_ns", U(r.load_ns), "load_lines", U(r.load_lines),
                         "load_bytes", r.load_bytes,
                         "all_chase_ns", U(r.all_chase_ns), "all_chase_steps", U(r.all_chase_steps),
                         "all_load_ns", U(r.all_load_ns), "all_load_lines", U(r.all_load_lines),
                         "chase_cpu_ns", U(r.chase_cpu_ns), "load_cpu_ns", U(r.load_cpu_ns),
                         "windows", U(r.windows), "windows_kept", U(r.windows_kept),
                         "k", r.k, "overhead_ns", r.overhead_ns, "hist", hist);
#undef U
}

static PyObject *py_delay_ns_per_unit(PyObject *self, PyObject *noargs)
{
    double ns;
    Py_BEGIN_ALLOW_THREADS
    ns = cb_delay_ns_per_unit();
    Py_END_ALLOW_THREADS
    return PyFloat_FromDouble(ns);
}

static PyObject *py_move_pages(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"addr", "length", "node", "page_bytes", NULL};
    uintptr_t addr;
    size_t length, page = 4096;
    int node, err;
    uint64_t elapsed = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&O&i|O&:move_pages", kwlist, conv_addr, &addr,
                                     conv_size, &length, &node, conv_size, &page))
        return NULL;
    if (page == 0 || addr % page || node < 0)
        return PyErr_Format(PyExc_ValueError, "move_pages: page_bytes > 0, the address "
                            "page-aligned and the node >= 0");
    size_t npages = (length + page - 1) / page;
    PyObject *status = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(npages * sizeof(int32_t)));
    if (!status)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    err = cb_move_pages(addr, length, page, node, (int32_t *)PyBytes_AS_STRING(status),
                        &elapsed);
    Py_END_ALLOW_THREADS
    if (err) {
        Py_DECREF(status);
        return OS_FAIL(err, "move_pages of %zu pages to node %d: %s", npages, node,
                       strerror(err));
    }
    PyObject *ret = Py_BuildValue("(KO)", (unsigned long long)elapsed, status);
    Py_DECREF(status);
    return ret;
}

/* --- end host suites --- */

/* ---- module ---------------------------------------------------------------------- */

#define KW (PyCFunction)(void (*)(void))

static PyMethodDef methods[] = {
    {"map_anonymous", KW py_map_anonymous, METH_VARARGS | METH_KEYWORDS,
     "map_anonymous(length, hugetlb_page_bytes=0, fixed_addr=0) -> addr\n"
     "Private anonymous read/write mapping; hugetlb_page_bytes 2 MiB or 1 GiB asks for\n"
     "MAP_HUGETLB pages of that size; fixed_addr replaces a reservation (MAP_FIXED)."},
    {"reserve", py_reserve, METH_VARARGS,
     "reserve(length) -> addr\nPROT_NONE address space (no memory), for guard regions."},
    {"unmap", py_unmap, METH_VARARGS, "unmap(addr, length)"},
    {"madvise", py_madvise, METH_VARARGS, "madvise(addr, length, advice); see MADV_*"},
    {"mlock", py_mlock, METH_VARARGS, "mlock(addr, length)"},
    {"munlock", py_munlock, METH_VARARGS, "munlock(addr, length)"},
    {"mbind", KW py_mbind, METH_VARARGS | METH_KEYWORDS,
     "mbind(addr, length, nodes, mode='bind', strict=True, move=False)\n"
     "Memory policy of a range via the mbind syscall. mode: bind, preferred, interleave,\n"
     "weighted_interleave (Linux >= 6.9), preferred_many, local, default. strict sets\n"
     "MPOL_MF_STRICT, move MPOL_MF_MOVE."},
    {"fault_in", KW py_fault_in, METH_VARARGS | METH_KEYWORDS,
     "fault_in(addr, length, page_bytes=4096)\n"
     "Write every page (keeping its contents) so it is allocated before timing."},
    {"page_nodes", KW py_page_nodes, METH_VARARGS | METH_KEYWORDS,
     "page_nodes(addr, length, page_bytes=4096) -> bytes\n"
     "Node of every page as native int32s (move_pages with nodes=NULL); a negative\n"
     "value is -errno for that page (-ENOENT: not present)."},
    {"pin_self", py_pin_self, METH_VARARGS,
     "pin_self(cpus)\nRestrict the calling thread to these CPUs."},
    {"now_ns", py_now_ns, METH_NOARGS, "now_ns() -> CLOCK_MONOTONIC in ns"},
    {"chase_init", KW py_chase_init, METH_VARARGS | METH_KEYWORDS,
     "chase_init(addr, length, line_bytes=64, window_bytes=0, chains=1, seed=1) -> heads\n"
     "Link every line into `chains` random single cycles (each line holds the absolute\n"
     "address of the next); window_bytes > 0 randomises within windows, visited in random\n"
     "order. Returns each chain's head: the absolute address of its first line\n"
     "(head - addr is its offset), ready for chase_run."},
    {"chase_run", KW py_chase_run, METH_VARARGS | METH_KEYWORDS,
     "chase_run(heads, steps) -> elapsed_ns\n"
     "Follow every chain from its head (as chase_init returns them) `steps` dependent\n"
     "loads each, in lockstep, GIL released. ns per dependent load = elapsed_ns / steps."},
    {"chase_dist", KW py_chase_dist, METH_VARARGS | METH_KEYWORDS,
     "chase_dist(head, k, blocks) -> dict\n"
     "The chase from head timed in `blocks` blocks of k dependent loads, GIL released:\n"
     "kept (a histogram: n, sum_ns, max_ns, buckets [(lower_ns, width_ns, count)]) of the\n"
     "blocks in sub-windows the thread held its CPU, lost_blocks / lost_ns of the others,\n"
     "overhead_ns (one block's clock cost, to subtract), k."},
    {"hist_index", py_hist_index, METH_O,
     "hist_index(ns) -> (index, lower_ns, width_ns): the histogram bucket ns counts in"},
    {"chase_order", KW py_chase_order, METH_VARARGS | METH_KEYWORDS,
     "chase_order(addr, head, max_steps, length=0) -> offsets\n"
     "Offsets from addr of the lines visited from head (a chase_init head) until the\n"
     "chain returns to it (or max_steps);\n"
     "length != 0 checks every pointer stays inside the buffer (ValueError if not)."},
    {"stream", KW py_stream, METH_VARARGS | METH_KEYWORDS,
     "stream(kernel, a, b, c, array_bytes, cpus, nt=False, iterations=10, scalar=3.0,\n"
     "       *, held=False) -> seconds per iteration, or (seconds, held) with held=True\n"
     "kernel: read (sum a), write (a=s), copy (c=a), scale (b=s*c), add (c=a+b),\n"
     "triad (a=b+s*c) on arrays of array_bytes // 8 doubles (0 for an unused array).\n"
     "One thread per entry of cpus, pinned, contiguous slices; nt: non-temporal stores.\n"
     "Every iteration starts at a barrier; its seconds run from the first thread leaving\n"
     "it to the last finishing. held=True also returns, per iteration, the least over\n"
     "threads of the share of the thread's own kernel interval (its start and end stamps)\n"
     "that it held its CPU: its thread CPU clock over that interval, at most 1. Waiting\n"
     "at the barrier is outside the interval, so it does not count as lost; another\n"
     "process or the hypervisor taking the CPU mid-kernel does. (A thread kept off its\n"
     "CPU between the barrier and its start stamp lengthens the iteration unseen.)"},
    {"stream_check", KW py_stream_check, METH_VARARGS | METH_KEYWORDS,
     "stream_check(kernel, a, b, c, array_bytes, cpus, nt=False, scalar=3.0) -> float\n"
     "One iteration through the same threaded path; returns the read kernel's sum\n"
     "(0.0 for the others), so tests can check what the kernels computed."},
    /* --- storage --- */
    {"io_run", KW py_io_run, METH_VARARGS | METH_KEYWORDS,
     "io_run(fd, write, engine, buf, block, qd, offsets, max_ios, lat=None, max_ns=0,\n"
     "       stamp=False, verify=False, seed=0, batch=1) -> (done, elapsed_ns, mismatches)\n"
     "Up to max_ios I/Os of `block` bytes (I/O i at offsets[i % len], offsets a uint64\n"
     "buffer), stopping once max_ns have passed (0: no limit). engine 'psync' (pread/pwrite,\n"
     "qd 1) or 'libaio' (Linux AIO, qd in flight, slot s using buf + s*block, at most\n"
     "`batch` I/Os per io_submit: 1 as fio's default, 0 = qd). lat: a\n"
     "writable uint64 buffer of max_ios entries for each I/O's ns. stamp: writes carry the\n"
     "offset/seed pattern; verify: count read 4 KiB units that don't match it. GIL released."},
    {"io_stamp", py_io_stamp, METH_VARARGS,
     "io_stamp(addr, length, file_offset, seed)\nFill 4 KiB units with the verify pattern."},
    {"io_check", py_io_check, METH_VARARGS,
     "io_check(addr, length, file_offset, seed) -> units that don't match the pattern"},
    {"map_file", KW py_map_file, METH_VARARGS | METH_KEYWORDS,
     "map_file(fd, length, writable=True) -> addr\nMAP_SHARED mapping of the file's start."},
    {"msync", py_msync, METH_VARARGS, "msync(addr, length)  (MS_SYNC)"},
    {"mincore", py_mincore, METH_VARARGS,
     "mincore(addr, length) -> pages of the range in the page cache / resident"},
    /* --- end storage --- */
    /* --- host suites --- */
    {"lines", KW py_lines, METH_VARARGS | METH_KEYWORDS,
     "lines(addr, length, cpus, reads=1, writes=0, write_bytes=64, rmw=False, nt=False,\n"
     "      value=0, iterations=10, clock='wall') -> seconds per iteration\n"
     "A pass over 64-byte lines in groups of reads + writes: the first `reads` lines of\n"
     "each group are read, the next `writes` written: the first write_bytes bytes (64: the\n"
     "whole line; fewer: a partial-line write) get `value` (every 8 bytes), or with rmw\n"
     "the line is loaded, `value` added to each 8-byte word, stored back. nt: non-temporal\n"
     "stores. One pinned thread per entry of cpus, slices of whole groups. clock='cpu':\n"
     "each iteration's time is the slowest thread's CPU time (what another process held\n"
     "of the CPU is not counted); 'wall': first start to last end."},
    {"lines_check", KW py_lines_check, METH_VARARGS | METH_KEYWORDS,
     "lines_check(addr, length, cpus, ..., iterations=1) -> int\n"
     "As lines(); returns the sum (mod 2**64) of the 8-byte words the last pass read."},
    {"adamw_step", py_adamw_step, METH_VARARGS,
     "adamw_step(p, g, m, v, n, step, lr, beta1, beta2, eps, weight_decay)\n"
     "One AdamW step, torch.optim.AdamW's arithmetic, over n fp32 values at addresses p\n"
     "(parameters), g (gradients), m and v (moments), in place; step is this update's\n"
     "1-based number. Split over the OpenMP threads (torch.set_num_threads); AVX-512 or\n"
     "AVX2 where present (CXLBENCH_ADAMW_ISA=avx2|scalar caps it)."},
    {"adamw_step_bf16", py_adamw_step_bf16, METH_VARARGS,
     "adamw_step_bf16(p, g, m, v, copy, n, step, lr, beta1, beta2, eps, weight_decay)\n"
     "adamw_step with g in bf16, widened as it is read, and unless copy is 0 the updated\n"
     "parameters also written there in bf16 (rounded to nearest even, as torch narrows):\n"
     "a GPU offload step's update in one pass over memory."},
    {"line_op_bytes", KW py_line_op_bytes, METH_VARARGS | METH_KEYWORDS,
     "line_op_bytes(reads=1, writes=0, write_bytes=64, rmw=False) -> float\n"
     "Bytes per line the op moves, STREAM's way (read 64, write write_bytes, rmw 128)."},
    {"loaded_latency", KW py_loaded_latency, METH_VARARGS | METH_KEYWORDS,
     "loaded_latency(heads, chase_cpu, load_addr, load_length, load_cpus, reads=1, writes=0,\n"
     "               write_bytes=64, rmw=False, nt=False, delay=0, warmup_ns=5e7,\n"
     "               duration_ns=2e8, limit_ns=5*duration_ns, k=0) -> dict\n"
     "MLC's loaded latency: a thread on chase_cpu chases from heads while one thread per\n"
     "load_cpus entry loops the line op over its slice of the load buffer, waiting `delay`\n"
     "empty-loop iterations after each line. Timed in ~250 us sub-windows, kept when\n"
     "every thread had >= 95% of its CPU, until duration_ns are kept or limit_ns pass. Returns, over kept sub-windows, chase_ns, chase_steps\n"
     "(ns per load = chase_ns / chase_steps), load_ns, load_lines, load_bytes; over all of\n"
     "them all_chase_ns, all_chase_steps, all_load_ns, all_load_lines, chase_cpu_ns,\n"
     "load_cpu_ns (summed); windows, windows_kept. load_cpus=[]: the idle point.\n"
     "k > 0 (one head): the chase timed in blocks of k loads; hist (as chase_dist's kept)\n"
     "of the kept blocks, overhead_ns the clock's cost per block (in chase_ns); else None."},
    {"delay_ns_per_unit", py_delay_ns_per_unit, METH_NOARGS,
     "delay_ns_per_unit() -> ns one unit of loaded_latency's delay takes here"},
    {"move_pages", KW py_move_pages, METH_VARARGS | METH_KEYWORDS,
     "move_pages(addr, length, node, page_bytes=4096) -> (elapsed_ns, status)\n"
     "Migrate the range's pages to `node` (move_pages(2), MPOL_MF_MOVE); status: the node\n"
     "of each page afterwards as native int32s (negative: -errno for that page)."},
    /* --- end host suites --- */
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "cxlbench._native",
    "cxlbench's C core: pointer chase, streaming kernels, mappings, memory policy, page "
    "placement.\nAddresses are ints; errors are OSError (with errno) or ValueError.",
    -1, methods, NULL, NULL, NULL, NULL,
};

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

PyMODINIT_FUNC PyInit__native(void)
{
    PyObject *m = PyModule_Create(&moduledef);
    if (!m)
        return NULL;
    PyModule_AddIntConstant(m, "MADV_NORMAL", MADV_NORMAL);
    PyModule_AddIntConstant(m, "MADV_DONTNEED", MADV_DONTNEED);
    PyModule_AddIntConstant(m, "MADV_HUGEPAGE", MADV_HUGEPAGE);
    PyModule_AddIntConstant(m, "MADV_NOHUGEPAGE", MADV_NOHUGEPAGE);
    PyModule_AddIntConstant(m, "MADV_POPULATE_WRITE", MADV_POPULATE_WRITE);
    PyModule_AddIntConstant(m, "MADV_COLLAPSE", MADV_COLLAPSE);
    PyModule_AddIntConstant(m, "PAGE_SIZE", sysconf(_SC_PAGESIZE));
    PyModule_AddIntConstant(m, "MAX_CHAINS", MAX_CHAINS);
    PyModule_AddStringConstant(m, "STREAM_ISA", cb_stream_isa());

    /* kernel -> (arrays read, arrays written) per element: bytes moved per
     * iteration = (reads + writes) * array_bytes, write-allocate not counted. */
    PyObject *kernels = PyDict_New();
    for (int i = 0; kernels && i < CB_NKERNELS; i++) {
        PyObject *v = Py_BuildValue("(ii)", cb_kernels[i].reads, cb_kernels[i].writes);
        if (!v || PyDict_SetItemString(kernels, cb_kernels[i].name, v) < 0) {
            Py_XDECREF(v);
            Py_CLEAR(kernels);
            break;
        }
        Py_DECREF(v);
    }
    if (!kernels || PyModule_AddObject(m, "STREAM_KERNELS", kernels) < 0) {
        Py_XDECREF(kernels);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

/*
 * blobcr_agent._native.Mirror: the per-image state of the FUSE mirror.
 *
 * One object per attached image. It owns the local sparse mirror file,
 * one state byte per chunk (in a MAP_SHARED file, so that a SIGKILL of
 * the agent loses no state: the page cache keeps it), the bounded
 * copy-on-write buffer, and the queue the background persister takes
 * chunks from. Read and write handlers make one call each; every call
 * releases the GIL, and a call that would wait (for the persister, or
 * for a chunk being copied) can be told to return instead, so that an
 * event loop never blocks.
 *
 * Snapshot protocol (journal paper, Algorithms 1-4):
 *   COMMIT      waits for in-flight writes, turns every DIRTY chunk into
 *               SCHEDULED (+SNAP), and orders the schedule.
 *   persister   takes chunks one at a time: PENDING while it reads one
 *               from the mirror file, or straight from the buffer if a
 *               writer copied it there; then the chunk is Idle again.
 *   writer      on a SCHEDULED chunk: selective-cow copies the old
 *               content into the buffer and writes in place; live-cow
 *               redirects the write to a second file (classic CoW); a
 *               PENDING chunk waits; a full buffer waits and makes the
 *               chunk URGENT so the persister takes it next.
 *
 * Copyright BlobCR for OpenStack developers. Apache-2.0.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mirror.h"

const char *mode_names[] = {
    "selective-cow", "live-cow", "live-precopy", "offline", NULL
};

static PyObject *BusyError;   /* a call that would wait, told not to */

/* ---- helpers (lock held unless noted) ------------------------------ */

static int64_t
chunk_len(Mirror *m, int64_t c)
{
    int64_t left = m->size - c * m->chunk_size;
    return left < m->chunk_size ? left : m->chunk_size;
}

/* The urgent queue holds each chunk once: writers re-queue the chunk
 * they wait for every time they wake. Lock held. */
static void
push_urgent(Mirror *m, int64_t c)
{
    if (!m->in_urgent[c]) {
        m->in_urgent[c] = 1;
        m->urgent[m->nurgent++] = c;
    }
}

static void
clear_urgent(Mirror *m)
{
    while (m->nurgent)
        m->in_urgent[m->urgent[--m->nurgent]] = 0;
}

/* Full pread/pwrite loops; no lock needed. Return 0 or an errno. */
static int
pread_full(int fd, char *buf, size_t len, off_t off)
{
    while (len) {
        ssize_t n = pread(fd, buf, len, off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        if (n == 0) {           /* sparse hole past EOF reads as zeros */
            memset(buf, 0, len);
            return 0;
        }
        buf += n; len -= (size_t)n; off += n;
    }
    return 0;
}

static int
pwrite_full(int fd, const char *buf, size_t len, off_t off)
{
    while (len) {
        ssize_t n = pwrite(fd, buf, len, off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        buf += n; len -= (size_t)n; off += n;
    }
    return 0;
}

static int
copy_chunk(Mirror *m, int from_fd, int to_fd, int64_t c, char *scratch)
{
    off_t off = (off_t)c * m->chunk_size;
    int err = pread_full(from_fd, scratch, (size_t)chunk_len(m, c), off);
    if (!err)
        err = pwrite_full(to_fd, scratch, (size_t)chunk_len(m, c), off);
    return err;
}

static PyObject *
set_errno(int err)
{
    errno = err;
    return PyErr_SetFromErrno(PyExc_OSError);
}

/* ---- construction ------------------------------------------------- */

static int
open_file(const char *path, int64_t size)
{
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0 && ftruncate(fd, size) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

static void
mirror_release(Mirror *m)
{
    if (m->state && m->state != MAP_FAILED)
        munmap(m->state, m->state_len);
    m->state = NULL;
    if (m->data_fd >= 0) close(m->data_fd);
    if (m->redirect_fd >= 0) close(m->redirect_fd);
    if (m->precopy_fd >= 0) close(m->precopy_fd);
    m->data_fd = m->redirect_fd = m->precopy_fd = -1;
    free(m->cow); free(m->slot_of); free(m->free_slots);
    free(m->order); free(m->urgent); free(m->copied); free(m->in_urgent);
    free(m->first_write); free(m->first_read);
    free(m->hist); free(m->hist_prev);
    m->cow = NULL; m->slot_of = NULL; m->free_slots = NULL;
    m->order = m->urgent = m->copied = NULL;
    m->in_urgent = NULL;
    m->first_write = m->first_read = NULL;
    m->hist = m->hist_prev = NULL;
}

static void
Mirror_dealloc(Mirror *m)
{
    mirror_release(m);
    pthread_mutex_destroy(&m->lock);
    pthread_cond_destroy(&m->cond);
    Py_TYPE(m)->tp_free((PyObject *)m);
}

static PyObject *
Mirror_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    Mirror *m = (Mirror *)type->tp_alloc(type, 0);
    if (m) {
        m->data_fd = m->redirect_fd = m->precopy_fd = -1;
        pthread_mutex_init(&m->lock, NULL);
        pthread_cond_init(&m->cond, NULL);
    }
    return (PyObject *)m;
}

static int
Mirror_init(Mirror *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"directory", "size", "chunk_size", "mode",
                             "cow_chunks", "adaptive", NULL};
    const char *dir, *mode = "selective-cow";
    long long size, chunk_size, cow_chunks = 64;
    int adaptive = 1, i;
    char path[4096];
    struct stat st;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "sLL|sLp:Mirror", kwlist,
                                     &dir, &size, &chunk_size, &mode,
                                     &cow_chunks, &adaptive))
        return -1;
    if (m->state) {
        PyErr_SetString(PyExc_RuntimeError, "Mirror is already open");
        return -1;
    }
    if (size <= 0 || chunk_size <= 0 || cow_chunks < 1) {
        PyErr_SetString(PyExc_ValueError,
                        "size, chunk_size and cow_chunks must be positive");
        return -1;
    }
    for (i = 0; mode_names[i]; i++)
        if (strcmp(mode, mode_names[i]) == 0)
            break;
    if (!mode_names[i]) {
        PyErr_Format(PyExc_ValueError, "unknown mirror mode %s", mode);
        return -1;
    }
    m->mode = i;
    m->adaptive = adaptive;
    m->size = size;
    m->chunk_size = chunk_size;
    m->nchunks = (size + chunk_size - 1) / chunk_size;

    snprintf(path, sizeof path, "%s/data.raw", dir);
    if ((m->data_fd = open_file(path, size)) < 0)
        goto oserror;
    snprintf(path, sizeof path, "%s/redirect.raw", dir);
    if ((m->redirect_fd = open_file(path, size)) < 0)
        goto oserror;
    snprintf(path, sizeof path, "%s/precopy.raw", dir);
    if ((m->precopy_fd = open_file(path, size)) < 0)
        goto oserror;

    /* The state file survives a SIGKILL through the page cache. */
    snprintf(path, sizeof path, "%s/state.bin", dir);
    {
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (fd < 0)
            goto oserror;
        if (fstat(fd, &st) != 0 ||
            (st.st_size != m->nchunks && ftruncate(fd, m->nchunks) != 0)) {
            close(fd);
            goto oserror;
        }
        m->state_len = (size_t)m->nchunks;
        m->state = mmap(NULL, m->state_len, PROT_READ | PROT_WRITE,
                        MAP_SHARED, fd, 0);
        close(fd);
        if (m->state == MAP_FAILED)
            goto oserror;
    }
    m->cow_slots = cow_chunks;
    m->cow = malloc((size_t)(cow_chunks * chunk_size));
    m->slot_of = malloc(sizeof(int32_t) * (size_t)m->nchunks);
    m->free_slots = malloc(sizeof(int64_t) * (size_t)cow_chunks);
    m->order = malloc(sizeof(int64_t) * (size_t)m->nchunks);
    m->urgent = malloc(sizeof(int64_t) * (size_t)m->nchunks);
    m->in_urgent = calloc((size_t)m->nchunks, 1);
    m->copied = malloc(sizeof(int64_t) * (size_t)m->nchunks);
    m->first_write = calloc((size_t)m->nchunks, sizeof(uint32_t));
    m->first_read = calloc((size_t)m->nchunks, sizeof(uint32_t));
    m->hist = calloc((size_t)m->nchunks, 1);
    m->hist_prev = calloc((size_t)m->nchunks, 1);
    if (!m->cow || !m->slot_of || !m->free_slots || !m->order ||
        !m->urgent || !m->in_urgent || !m->copied || !m->first_write ||
        !m->first_read ||
        !m->hist || !m->hist_prev) {
        mirror_release(m);
        PyErr_NoMemory();
        return -1;
    }
    for (int64_t c = 0; c < m->nchunks; c++) {
        m->slot_of[c] = -1;
        m->state[c] &= (uint8_t)~ST_PENDING;   /* transient */
    }
    for (int64_t s = 0; s < cow_chunks; s++)
        m->free_slots[s] = s;
    m->nfree = cow_chunks;
    return 0;
oserror:
    {
        int e = errno;
        mirror_release(m);
        errno = e;
        PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
        return -1;
    }
}

/* ---- reads -------------------------------------------------------- */

static int
check_range(Mirror *m, long long off, long long len)
{
    if (!m->state) {
        PyErr_SetString(PyExc_ValueError, "Mirror is closed");
        return -1;
    }
    if (off < 0 || len < 0 || off > m->size) {
        PyErr_SetString(PyExc_ValueError, "range outside the image");
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(read_doc,
"read(offset, length) -> bytes or list\n\n"
"The bytes of the range, or the list of chunk indices that must be\n"
"fetched (then install()ed) before it can be read.");

/* Read [off, off+len) into buf; no GIL needed. Chunks that must be
 * fetched first are listed in missing (sized for the range) and nothing
 * is read. Returns 0 or an errno. */
int
mirror_core_read(Mirror *m, char *buf, long long off, long long len,
                 int64_t *missing, int64_t *nmissing)
{
    int64_t first = off / m->chunk_size;
    int64_t last = (off + len - 1) / m->chunk_size, c;
    int redirected = 0, err = 0;

    *nmissing = 0;
    pthread_mutex_lock(&m->lock);
    for (c = first; c <= last; c++) {
        uint8_t s = m->state[c];
        if (!(s & ST_PRESENT))
            missing[(*nmissing)++] = c;
        if (s & ST_REDIRECT)
            redirected = 1;
        if (!m->first_read[c])
            m->first_read[c] = ++m->read_seq;
    }
    pthread_mutex_unlock(&m->lock);
    if (*nmissing)
        return 0;
    if (!redirected)
        return pread_full(m->data_fd, buf, (size_t)len, off);
    /* Chunk by chunk: some live in the redirect file. */
    for (c = first; c <= last && !err; c++) {
        long long cs = c * m->chunk_size;
        long long s = off > cs ? off : cs;
        long long e = off + len < cs + chunk_len(m, c) ?
            off + len : cs + chunk_len(m, c);
        int fd;
        pthread_mutex_lock(&m->lock);
        fd = (m->state[c] & ST_REDIRECT) ? m->redirect_fd : m->data_fd;
        pthread_mutex_unlock(&m->lock);
        err = pread_full(fd, buf + (s - off), (size_t)(e - s), s);
    }
    return err;
}

static PyObject *
index_list(int64_t *indices, int64_t n)
{
    PyObject *list = PyList_New(n);
    for (int64_t k = 0; list && k < n; k++)
        PyList_SET_ITEM(list, k, PyLong_FromLongLong(indices[k]));
    return list;
}

static PyObject *
Mirror_read(Mirror *m, PyObject *args)
{
    long long off, len;
    int64_t nmissing = 0, *missing;
    int err = 0;
    PyObject *out;

    if (!PyArg_ParseTuple(args, "LL:read", &off, &len))
        return NULL;
    if (check_range(m, off, len) < 0)
        return NULL;
    if (off + len > m->size)
        len = m->size - off;
    if (len == 0)
        return PyBytes_FromStringAndSize(NULL, 0);
    missing = mirror_index_buffer(m, off, len);
    if (!missing)
        return PyErr_NoMemory();
    out = PyBytes_FromStringAndSize(NULL, len);
    if (!out) {
        free(missing);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    err = mirror_core_read(m, PyBytes_AS_STRING(out), off, len, missing,
                           &nmissing);
    Py_END_ALLOW_THREADS
    if (nmissing) {
        PyObject *list = index_list(missing, nmissing);
        Py_DECREF(out);
        free(missing);
        return list;
    }
    free(missing);
    if (err) {
        Py_DECREF(out);
        return set_errno(err);
    }
    return out;
}

/* ---- writes ------------------------------------------------------- */

/* Make chunk c safe to overwrite; lock held, may wait. Returns 0, an
 * errno, or -1 when it would wait and nonblock is set. */
static int
prepare_chunk(Mirror *m, int64_t c, int nonblock, char *scratch)
{
    for (;;) {
        uint8_t s = m->state[c];
        if (s & ST_PENDING) {
            if (nonblock)
                return -1;
            m->waits++;
            m->hist[c] |= H_WAITED;
            pthread_cond_wait(&m->cond, &m->lock);
            continue;
        }
        if (!(s & ST_SCHED)) {
            if ((m->hist[c] & H_TAKEN) && !(m->hist[c] & H_AVOIDED)) {
                /* Persisted before this write came: a copy avoided. */
                m->hist[c] |= H_AVOIDED;
                m->avoided++;
            }
            return 0;
        }
        if (s & (ST_COPIED | ST_REDIRECT))
            return 0;
        if (m->mode == MODE_LIVE_COW) {
            int err;
            m->state[c] |= ST_PENDING;
            pthread_mutex_unlock(&m->lock);
            err = copy_chunk(m, m->data_fd, m->redirect_fd, c, scratch);
            pthread_mutex_lock(&m->lock);
            m->state[c] &= (uint8_t)~ST_PENDING;
            if (!err) {
                m->state[c] |= ST_REDIRECT;
                m->redirects++;
            }
            pthread_cond_broadcast(&m->cond);
            return err;
        }
        /* selective-cow */
        if (m->nfree == 0) {
            if (nonblock)
                return -1;
            push_urgent(m, c);
            m->urgent_count++;
            m->waits++;
            m->hist[c] |= H_WAITED;
            pthread_cond_broadcast(&m->cond);
            while ((m->state[c] & ST_SCHED) && m->nfree == 0)
                pthread_cond_wait(&m->cond, &m->lock);
            continue;
        }
        {
            int64_t slot = m->free_slots[--m->nfree];
            int err;
            m->state[c] |= ST_PENDING;
            pthread_mutex_unlock(&m->lock);
            err = pread_full(m->data_fd, m->cow + slot * m->chunk_size,
                             (size_t)chunk_len(m, c),
                             (off_t)c * m->chunk_size);
            pthread_mutex_lock(&m->lock);
            m->state[c] &= (uint8_t)~ST_PENDING;
            if (err) {
                m->free_slots[m->nfree++] = slot;
            } else {
                m->slot_of[c] = (int32_t)slot;
                m->state[c] |= ST_COPIED;
                m->copied[m->ncopied++] = c;
                m->cow_copies++;
                m->hist[c] |= H_COPIED;
            }
            pthread_cond_broadcast(&m->cond);
            return err;
        }
    }
}

PyDoc_STRVAR(write_doc,
"write(offset, data, nonblock=False) -> int or list\n\n"
"Write data at offset and return its length; or return the list of\n"
"chunks to fetch first (partial writes to absent chunks). With\n"
"nonblock, raise BusyError instead of waiting for the persister.");

/* Write [off, off+len) from buf; no GIL needed; may wait unless
 * nonblock (then *busy is set and nothing is written). Chunks to fetch
 * first are listed in missing. scratch is a chunk-sized buffer for
 * live-cow. Returns 0 or an errno. */
int
mirror_core_write(Mirror *m, const char *buf, long long off, long long len,
                  int nonblock, char *scratch, int64_t *missing,
                  int64_t *nmissing, int *busy)
{
    int64_t first = off / m->chunk_size;
    int64_t last = (off + len - 1) / m->chunk_size, c;
    int err = 0;

    *nmissing = 0;
    *busy = 0;
    pthread_mutex_lock(&m->lock);
    for (c = first; c <= last; c++) {
        long long cs = c * m->chunk_size, ce = cs + chunk_len(m, c);
        if (!(m->state[c] & ST_PRESENT) && !(off <= cs && off + len >= ce))
            missing[(*nmissing)++] = c;
    }
    if (*nmissing) {
        pthread_mutex_unlock(&m->lock);
        return 0;
    }
    /* COMMIT flips the state between writes, never inside one. */
    while (m->committing || m->hold) {
        if (nonblock) {
            pthread_mutex_unlock(&m->lock);
            *busy = 1;
            return 0;
        }
        pthread_cond_wait(&m->cond, &m->lock);
    }
    m->writers++;
    for (c = first; c <= last && !err && !*busy; c++) {
        int r = prepare_chunk(m, c, nonblock, scratch);
        if (r == -1)
            *busy = 1;
        else
            err = r;
    }
    if (!*busy && !err) {
        int any_redirect = 0;
        for (c = first; c <= last; c++) {
            if (!m->first_write[c])
                m->first_write[c] = ++m->seq;
            if (m->state[c] & ST_REDIRECT)
                any_redirect = 1;
        }
        pthread_mutex_unlock(&m->lock);
        if (!any_redirect) {
            err = pwrite_full(m->data_fd, buf, (size_t)len, off);
        } else {
            for (c = first; c <= last && !err; c++) {
                long long cs = c * m->chunk_size;
                long long s = off > cs ? off : cs;
                long long e = off + len < cs + chunk_len(m, c) ?
                    off + len : cs + chunk_len(m, c);
                int fd;
                pthread_mutex_lock(&m->lock);
                fd = (m->state[c] & ST_REDIRECT) ? m->redirect_fd
                                                 : m->data_fd;
                pthread_mutex_unlock(&m->lock);
                err = pwrite_full(fd, buf + (s - off), (size_t)(e - s), s);
            }
        }
        pthread_mutex_lock(&m->lock);
        if (!err)
            for (c = first; c <= last; c++)
                m->state[c] |= ST_PRESENT | ST_DIRTY;
    }
    m->writers--;
    pthread_cond_broadcast(&m->cond);
    pthread_mutex_unlock(&m->lock);
    return err;
}

static PyObject *
Mirror_write(Mirror *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"offset", "data", "nonblock", NULL};
    long long off;
    Py_buffer data;
    int nonblock = 0, err = 0, busy = 0;
    int64_t nmissing = 0, *missing = NULL;
    char *scratch = NULL;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "Ly*|p:write", kwlist,
                                     &off, &data, &nonblock))
        return NULL;
    if (check_range(m, off, data.len) < 0 || off + data.len > m->size) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "write past the image end");
        PyBuffer_Release(&data);
        return NULL;
    }
    if (data.len == 0) {
        PyBuffer_Release(&data);
        return PyLong_FromLong(0);
    }
    missing = mirror_index_buffer(m, off, data.len);
    scratch = m->mode == MODE_LIVE_COW ? malloc((size_t)m->chunk_size)
                                       : NULL;
    if (!missing || (m->mode == MODE_LIVE_COW && !scratch)) {
        free(missing); free(scratch);
        PyBuffer_Release(&data);
        return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS
    err = mirror_core_write(m, data.buf, off, data.len, nonblock, scratch,
                            missing, &nmissing, &busy);
    Py_END_ALLOW_THREADS
    free(scratch);
    PyBuffer_Release(&data);
    if (nmissing) {
        PyObject *list = index_list(missing, nmissing);
        free(missing);
        return list;
    }
    free(missing);
    if (busy) {
        PyErr_SetString(BusyError, "the write would wait for the persister");
        return NULL;
    }
    if (err)
        return set_errno(err);
    return PyLong_FromSsize_t(data.len);
}

PyDoc_STRVAR(install_doc,
"install(index, data) -> bool\n\n"
"Store a fetched chunk in the mirror file unless the chunk became\n"
"present meanwhile (a whole-chunk write won). True if installed.");

static PyObject *
Mirror_install(Mirror *m, PyObject *args)
{
    long long c;
    Py_buffer data;
    int err = 0, installed = 0;

    if (!PyArg_ParseTuple(args, "Ly*:install", &c, &data))
        return NULL;
    if (!m->state || c < 0 || c >= m->nchunks ||
        data.len != chunk_len(m, c)) {
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_ValueError, "bad chunk index or length");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&m->lock);
    while (m->state[c] & ST_PENDING)
        pthread_cond_wait(&m->cond, &m->lock);
    if (!(m->state[c] & ST_PRESENT)) {
        m->state[c] |= ST_PENDING;   /* a racing write waits for us */
        pthread_mutex_unlock(&m->lock);
        err = pwrite_full(m->data_fd, data.buf, (size_t)data.len,
                          (off_t)c * m->chunk_size);
        pthread_mutex_lock(&m->lock);
        m->state[c] &= (uint8_t)~ST_PENDING;
        if (!err) {
            m->state[c] |= ST_PRESENT;
            installed = 1;
        }
        pthread_cond_broadcast(&m->cond);
    }
    pthread_mutex_unlock(&m->lock);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    if (err)
        return set_errno(err);
    return PyBool_FromLong(installed);
}

/* ---- COMMIT and the persister -------------------------------------- */

static Mirror *sort_mirror;  /* qsort has no context argument */

static int
flush_class(Mirror *m, int64_t c)
{
    uint8_t h = m->hist_prev[c];
    if (h & H_WAITED) return 0;
    if (h & H_COPIED) return 1;
    if (h & H_AVOIDED) return 2;
    return 3;
}

static int
compare_flush(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    int cx = flush_class(sort_mirror, x), cy = flush_class(sort_mirror, y);
    uint32_t sx = sort_mirror->first_write[x] - 1;  /* 0 sorts last */
    uint32_t sy = sort_mirror->first_write[y] - 1;
    if (cx != cy) return cx - cy;
    if (sx != sy) return sx < sy ? -1 : 1;
    return x < y ? -1 : (x > y);
}

static pthread_mutex_t sort_lock = PTHREAD_MUTEX_INITIALIZER;

PyDoc_STRVAR(commit_doc,
"commit(hold=False) -> int\n\n"
"Snapshot: wait for in-flight writes, schedule every chunk written\n"
"since the last commit, order the schedule, and return how many chunks\n"
"it holds. Raises BusyError if the previous snapshot is still being\n"
"persisted. live-precopy copies the chunks aside before returning;\n"
"with hold, writes stay blocked until release() (offline mode).");

static PyObject *
Mirror_commit(Mirror *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"hold", NULL};
    int hold = 0, busy = 0, err = 0;
    int64_t n = 0;
    char *scratch = NULL;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|p:commit", kwlist, &hold))
        return NULL;
    if (!m->state) {
        PyErr_SetString(PyExc_ValueError, "Mirror is closed");
        return NULL;
    }
    if (m->mode == MODE_PRECOPY &&
        !(scratch = malloc((size_t)m->chunk_size)))
        return PyErr_NoMemory();

    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&m->lock);
    if (m->scheduled || m->committing) {
        busy = 1;
    } else {
        m->committing = 1;
        while (m->writers)
            pthread_cond_wait(&m->cond, &m->lock);
        for (int64_t c = 0; c < m->nchunks; c++) {
            m->state[c] &= (uint8_t)~ST_SNAP;
            if (m->state[c] & ST_DIRTY) {
                m->state[c] = (uint8_t)((m->state[c] & ~ST_DIRTY) |
                                        ST_SCHED | ST_SNAP);
                m->order[n++] = c;
            }
        }
        /* The finished epoch becomes the history the order follows. */
        uint8_t *t = m->hist_prev;
        m->hist_prev = m->hist;
        m->hist = t;
        memset(m->hist, 0, m->state_len);
        if (m->adaptive && n > 1) {
            pthread_mutex_lock(&sort_lock);
            sort_mirror = m;
            qsort(m->order, (size_t)n, sizeof(int64_t), compare_flush);
            pthread_mutex_unlock(&sort_lock);
        }
        memset(m->first_write, 0, sizeof(uint32_t) * m->state_len);
        m->seq = 0;
        m->order_len = n;
        m->order_pos = 0;
        m->scheduled = n;
        clear_urgent(m);
        m->ncopied = 0;
        if (m->mode == MODE_PRECOPY) {
            for (int64_t k = 0; k < n && !err; k++) {
                int64_t c = m->order[k];
                err = copy_chunk(m, m->data_fd, m->precopy_fd, c, scratch);
                m->state[c] |= ST_COPIED;
            }
        }
        m->hold = hold;
        m->committing = 0;
        pthread_cond_broadcast(&m->cond);
    }
    pthread_mutex_unlock(&m->lock);
    Py_END_ALLOW_THREADS
    free(scratch);
    if (busy) {
        PyErr_SetString(BusyError,
                        "the previous snapshot is still being persisted");
        return NULL;
    }
    if (err)
        return set_errno(err);
    return PyLong_FromLongLong(n);
}

static PyObject *
Mirror_release_hold(Mirror *m, PyObject *noargs)
{
    pthread_mutex_lock(&m->lock);
    m->hold = 0;
    pthread_cond_broadcast(&m->cond);
    pthread_mutex_unlock(&m->lock);
    Py_RETURN_NONE;
}

/* The next chunk to persist, by flush order; -1 if none. Lock held. */
static int64_t
pick(Mirror *m)
{
    while (m->nurgent) {
        int64_t c = m->urgent[--m->nurgent];
        m->in_urgent[c] = 0;
        if (m->state[c] & ST_SCHED)
            return c;
    }
    if (m->adaptive) {
        while (m->ncopied) {
            int64_t c = m->copied[--m->ncopied];
            if (m->state[c] & ST_SCHED)
                return c;
        }
    }
    while (m->order_pos < m->order_len) {
        int64_t c = m->order[m->order_pos++];
        if (m->state[c] & ST_SCHED)
            return c;
    }
    return -1;
}

PyDoc_STRVAR(take_doc,
"take(timeout=None) -> (index, bytes) or None\n\n"
"For the persister: the next scheduled chunk in flush order with its\n"
"snapshot content; the chunk is Idle again when this returns. None\n"
"when the snapshot is fully taken.");

static PyObject *
Mirror_take(Mirror *m, PyObject *noargs)
{
    int64_t c;
    int err = 0, from = 0;   /* 0 mirror file, 1 buffer, 2 pre-copy */
    PyObject *out = NULL;
    char *buf;

    if (!m->state) {
        PyErr_SetString(PyExc_ValueError, "Mirror is closed");
        return NULL;
    }
    out = PyBytes_FromStringAndSize(NULL, m->chunk_size);
    if (!out)
        return NULL;
    buf = PyBytes_AS_STRING(out);

    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&m->lock);
    for (;;) {
        c = pick(m);
        if (c < 0 || !(m->state[c] & ST_PENDING))
            break;
        /* A writer is copying it right now: take it once copied. */
        push_urgent(m, c);
        pthread_cond_wait(&m->cond, &m->lock);
    }
    if (c >= 0) {
        uint8_t s = m->state[c];
        if ((s & ST_COPIED) && m->mode == MODE_PRECOPY) {
            from = 2;
        } else if (s & ST_COPIED) {
            from = 1;
            memcpy(buf, m->cow + (int64_t)m->slot_of[c] * m->chunk_size,
                   (size_t)chunk_len(m, c));
            m->free_slots[m->nfree++] = m->slot_of[c];
            m->slot_of[c] = -1;
        } else {
            /* Folding a redirect back must not race with a write into
             * the redirect file: let in-flight writes finish first. */
            while ((s & ST_REDIRECT) && m->writers)
                pthread_cond_wait(&m->cond, &m->lock);
            m->state[c] |= ST_PENDING;
        }
        if (from != 1) {
            pthread_mutex_unlock(&m->lock);
            err = pread_full(from == 2 ? m->precopy_fd : m->data_fd, buf,
                             (size_t)chunk_len(m, c),
                             (off_t)c * m->chunk_size);
            if (!err && (s & ST_REDIRECT)) {
                /* live-cow: fold the redirected data back in place (the
                 * extra I/O classic copy-on-write pays). */
                char *tmp = malloc((size_t)m->chunk_size);
                err = tmp ? copy_chunk(m, m->redirect_fd, m->data_fd, c,
                                       tmp) : ENOMEM;
                free(tmp);
            }
            pthread_mutex_lock(&m->lock);
        }
        if (err) {
            m->state[c] &= (uint8_t)~ST_PENDING;
        } else {
            m->state[c] &= (uint8_t)~(ST_SCHED | ST_PENDING | ST_COPIED |
                                      ST_REDIRECT);
            m->hist[c] |= H_TAKEN;
            m->scheduled--;
        }
        pthread_cond_broadcast(&m->cond);
    }
    pthread_mutex_unlock(&m->lock);
    Py_END_ALLOW_THREADS

    if (c < 0) {
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    if (err) {
        Py_DECREF(out);
        return set_errno(err);
    }
    if (chunk_len(m, c) != m->chunk_size &&
        _PyBytes_Resize(&out, chunk_len(m, c)) < 0)
        return NULL;
    return Py_BuildValue("(LN)", (long long)c, out);
}

PyDoc_STRVAR(snapshot_done_doc,
"snapshot_done(stable) -> None\n\n"
"The snapshot's version is stable (its chunks leave the snapshot set) or\n"
"failed (its chunks are dirty again, so the next commit carries them).");

static PyObject *
Mirror_snapshot_done(Mirror *m, PyObject *args)
{
    int stable;
    if (!PyArg_ParseTuple(args, "p:snapshot_done", &stable))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&m->lock);
    for (int64_t c = 0; c < m->nchunks; c++) {
        if (!(m->state[c] & ST_SNAP))
            continue;
        if (!stable)
            m->state[c] |= ST_DIRTY;
        if (m->state[c] & ST_COPIED && m->slot_of[c] >= 0) {
            m->free_slots[m->nfree++] = m->slot_of[c];
            m->slot_of[c] = -1;
        }
        if ((m->state[c] & ST_REDIRECT) && m->redirect_fd >= 0) {
            /* A failed live-cow snapshot: bring the current data home so
             * the next snapshot reads it in place. */
            char *tmp = malloc((size_t)m->chunk_size);
            if (tmp && copy_chunk(m, m->redirect_fd, m->data_fd, c,
                                  tmp) == 0)
                m->state[c] &= (uint8_t)~ST_REDIRECT;
            free(tmp);
        }
        m->state[c] &= (uint8_t)~(ST_SNAP | ST_SCHED | ST_COPIED);
    }
    m->scheduled = 0;
    m->order_len = m->order_pos = 0;
    clear_urgent(m);
    m->ncopied = 0;
    pthread_cond_broadcast(&m->cond);
    pthread_mutex_unlock(&m->lock);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* ---- inspection --------------------------------------------------- */

static PyObject *
Mirror_recovery(Mirror *m, PyObject *noargs)
{
    /* After a restart: how many chunks the interrupted snapshot holds,
     * how many are still to be taken, and how many of those lost their
     * snapshot content (it was in the in-memory buffer). */
    int64_t snap = 0, sched = 0, lost = 0;
    for (int64_t c = 0; c < m->nchunks; c++) {
        uint8_t s = m->state[c];
        if (s & ST_SNAP) snap++;
        if (s & ST_SCHED) {
            sched++;
            if ((s & ST_COPIED) && m->mode != MODE_PRECOPY)
                lost++;
        }
    }
    return Py_BuildValue("{s:L,s:L,s:L}", "snapshot", (long long)snap,
                         "untaken", (long long)sched, "lost",
                         (long long)lost);
}

static PyObject *
Mirror_resume(Mirror *m, PyObject *noargs)
{
    /* Re-queue the untaken chunks of an interrupted snapshot. */
    int64_t n = 0;
    pthread_mutex_lock(&m->lock);
    for (int64_t c = 0; c < m->nchunks; c++)
        if (m->state[c] & ST_SCHED)
            m->order[n++] = c;
    m->order_len = n;
    m->order_pos = 0;
    m->scheduled = n;
    pthread_mutex_unlock(&m->lock);
    return PyLong_FromLongLong(n);
}

static PyObject *
Mirror_requeue(Mirror *m, PyObject *args)
{
    /* After a restart: schedule again the snapshot chunks whose taken
     * copy may not have reached the repository. One not written since
     * the COMMIT still holds its snapshot content in the mirror file;
     * one written since has lost it. Returns the lost ones. */
    PyObject *seq, *lost;
    if (!PyArg_ParseTuple(args, "O:requeue", &seq))
        return NULL;
    seq = PySequence_Fast(seq, "requeue() takes a sequence of indices");
    if (!seq)
        return NULL;
    lost = PyList_New(0);
    for (Py_ssize_t k = 0; lost && k < PySequence_Fast_GET_SIZE(seq); k++) {
        long long c = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, k));
        if (c == -1 && PyErr_Occurred()) {
            Py_CLEAR(lost);
            break;
        }
        if (c < 0 || c >= m->nchunks)
            continue;
        pthread_mutex_lock(&m->lock);
        uint8_t s = m->state[c];
        int ok = (s & ST_SNAP) && ((s & ST_SCHED) || !(s & ST_DIRTY));
        if (ok)
            m->state[c] |= ST_SCHED;
        pthread_mutex_unlock(&m->lock);
        if (!ok) {
            PyObject *v = PyLong_FromLongLong(c);
            if (!v || PyList_Append(lost, v) < 0)
                Py_CLEAR(lost);
            Py_XDECREF(v);
        }
    }
    Py_DECREF(seq);
    return lost;
}

static PyObject *
Mirror_snapshot_chunks(Mirror *m, PyObject *noargs)
{
    PyObject *list = PyList_New(0);
    for (int64_t c = 0; list && c < m->nchunks; c++) {
        if (m->state[c] & ST_SNAP) {
            PyObject *v = PyLong_FromLongLong(c);
            if (!v || PyList_Append(list, v) < 0) {
                Py_XDECREF(v);
                Py_DECREF(list);
                return NULL;
            }
            Py_DECREF(v);
        }
    }
    return list;
}

static PyObject *
Mirror_read_order(Mirror *m, PyObject *noargs)
{
    /* Chunks in the order they were first read since attach. */
    int64_t n = 0;
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)m->nchunks);
    PyObject *list;
    if (!idx)
        return PyErr_NoMemory();
    pthread_mutex_lock(&m->lock);
    uint32_t total = m->read_seq;
    int64_t *by_seq = calloc((size_t)total + 1, sizeof(int64_t));
    if (by_seq) {
        for (int64_t c = 0; c < m->nchunks; c++)
            if (m->first_read[c])
                by_seq[m->first_read[c]] = c + 1;
        for (uint32_t s = 1; s <= total; s++)
            if (by_seq[s])
                idx[n++] = by_seq[s] - 1;
    }
    pthread_mutex_unlock(&m->lock);
    free(by_seq);
    list = PyList_New(n);
    for (int64_t k = 0; list && k < n; k++)
        PyList_SET_ITEM(list, k, PyLong_FromLongLong(idx[k]));
    free(idx);
    return list;
}

static PyObject *
Mirror_stats(Mirror *m, PyObject *noargs)
{
    int64_t present = 0, dirty = 0;
    pthread_mutex_lock(&m->lock);
    for (int64_t c = 0; c < m->nchunks; c++) {
        present += (m->state[c] & ST_PRESENT) != 0;
        dirty += (m->state[c] & ST_DIRTY) != 0;
    }
    PyObject *d = Py_BuildValue(
        "{s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:s}",
        "present", (long long)present, "dirty", (long long)dirty,
        "scheduled", (long long)m->scheduled,
        "cow_copies", (long long)m->cow_copies,
        "cow_bytes", (long long)(m->cow_copies * m->chunk_size),
        "redirects", (long long)m->redirects,
        "waits", (long long)m->waits,
        "avoided", (long long)m->avoided,
        "urgent", (long long)m->urgent_count,
        "mode", mode_names[m->mode]);
    pthread_mutex_unlock(&m->lock);
    return d;
}

static PyObject *
Mirror_is_present(Mirror *m, PyObject *args)
{
    long long c;
    if (!PyArg_ParseTuple(args, "L:is_present", &c))
        return NULL;
    if (c < 0 || c >= m->nchunks) {
        PyErr_SetString(PyExc_IndexError, "chunk index out of range");
        return NULL;
    }
    return PyBool_FromLong(m->state[c] & ST_PRESENT);
}

static PyObject *
Mirror_close(Mirror *m, PyObject *noargs)
{
    pthread_mutex_lock(&m->lock);
    if (m->state)
        msync(m->state, m->state_len, MS_SYNC);
    if (m->data_fd >= 0)
        fsync(m->data_fd);
    mirror_release(m);
    pthread_mutex_unlock(&m->lock);
    Py_RETURN_NONE;
}

static PyMethodDef Mirror_methods[] = {
    {"read", (PyCFunction)Mirror_read, METH_VARARGS, read_doc},
    {"write", (PyCFunction)(void (*)(void))Mirror_write,
     METH_VARARGS | METH_KEYWORDS, write_doc},
    {"install", (PyCFunction)Mirror_install, METH_VARARGS, install_doc},
    {"commit", (PyCFunction)(void (*)(void))Mirror_commit,
     METH_VARARGS | METH_KEYWORDS, commit_doc},
    {"release_hold", (PyCFunction)Mirror_release_hold, METH_NOARGS,
     "Let writes proceed after commit(hold=True)."},
    {"take", (PyCFunction)Mirror_take, METH_NOARGS, take_doc},
    {"snapshot_done", (PyCFunction)Mirror_snapshot_done, METH_VARARGS,
     snapshot_done_doc},
    {"recovery", (PyCFunction)Mirror_recovery, METH_NOARGS,
     "State of a snapshot interrupted by a crash."},
    {"resume", (PyCFunction)Mirror_resume, METH_NOARGS,
     "Re-queue the untaken chunks of an interrupted snapshot."},
    {"requeue", (PyCFunction)Mirror_requeue, METH_VARARGS,
     "Schedule snapshot chunks again; return those whose content is lost."},
    {"snapshot_chunks", (PyCFunction)Mirror_snapshot_chunks, METH_NOARGS,
     "Indices of the chunks of the current snapshot."},
    {"read_order", (PyCFunction)Mirror_read_order, METH_NOARGS,
     "Chunks in the order they were first read since attach."},
    {"stats", (PyCFunction)Mirror_stats, METH_NOARGS,
     "Counters: present, dirty, copies, waits..."},
    {"is_present", (PyCFunction)Mirror_is_present, METH_VARARGS,
     "True if the mirror file holds chunk index."},
    {"close", (PyCFunction)Mirror_close, METH_NOARGS,
     "Flush state and data and close every file."},
    {NULL, NULL, 0, NULL}
};

static PyObject *
Mirror_get_nchunks(Mirror *m, void *closure)
{
    return PyLong_FromLongLong(m->nchunks);
}

static PyGetSetDef Mirror_getset[] = {
    {"nchunks", (getter)Mirror_get_nchunks, NULL, "number of chunks", NULL},
    {NULL, NULL, NULL, NULL, NULL}
};

PyTypeObject MirrorType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "blobcr_agent._native.Mirror",
    .tp_basicsize = sizeof(Mirror),
    .tp_dealloc = (destructor)Mirror_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Mirror(directory, size, chunk_size, mode='selective-cow', "
              "cow_chunks=64, adaptive=True): per-image mirror state.",
    .tp_methods = Mirror_methods,
    .tp_getset = Mirror_getset,
    .tp_init = (initproc)Mirror_init,
    .tp_new = Mirror_new,
};

int
blobcr_mirror_register(PyObject *module)
{
    if (PyType_Ready(&MirrorType) < 0)
        return -1;
    BusyError = PyErr_NewException("blobcr_agent._native.BusyError",
                                   PyExc_BlockingIOError, NULL);
    if (!BusyError)
        return -1;
    Py_INCREF(&MirrorType);
    if (PyModule_AddObject(module, "Mirror", (PyObject *)&MirrorType) < 0)
        return -1;
    Py_INCREF(BusyError);
    return PyModule_AddObject(module, "BusyError", BusyError);
}

/*
 * Copyright 2026 The BlobCR for OpenStack Authors
 *
 *    Licensed under the Apache License, Version 2.0 (the "License"); you may
 *    not use this file except in compliance with the License. You may obtain
 *    a copy of the License at
 *
 *         http://www.apache.org/licenses/LICENSE-2.0
 *
 *    Unless required by applicable law or agreed to in writing, software
 *    distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
 *    WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
 *    License for the specific language governing permissions and limitations
 *    under the License.
 */

/*
 * blobcr_agent._native.Mirror: the CPython binding of the mirror core.
 *
 * One object per attached image; the state machine itself is in core*.c
 * (no Python there). This file parses arguments, releases the GIL around
 * every core call that can do I/O or wait, and turns errnos and "would
 * wait" into exceptions. A call that would wait (for the persister, or
 * for a chunk being copied) can be told to raise BusyError instead, so
 * that an event loop never blocks.
 *
 * Copyright BlobCR for OpenStack developers. Apache-2.0.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mirror.h"

static PyObject *BusyError;   /* a call that would wait, told not to */

static PyObject *
set_errno(int err)
{
    errno = err;
    return PyErr_SetFromErrno(PyExc_OSError);
}

static int
check_open(Mirror *m)
{
    if (!m->core.state) {
        PyErr_SetString(PyExc_ValueError, "Mirror is closed");
        return -1;
    }
    return 0;
}

static PyObject *
index_list(int64_t *indices, int64_t n)
{
    PyObject *list = PyList_New(n);
    for (int64_t k = 0; list && k < n; k++) {
        PyObject *v = PyLong_FromLongLong(indices[k]);
        if (!v) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, k, v);
    }
    return list;
}

/* ---- construction ------------------------------------------------- */

static void
Mirror_dealloc(Mirror *m)
{
    mc_destroy(&m->core);
    Py_TYPE(m)->tp_free((PyObject *)m);
}

static PyObject *
Mirror_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    Mirror *m = (Mirror *)type->tp_alloc(type, 0);
    if (m)
        mc_init(&m->core);
    return (PyObject *)m;
}

static int
Mirror_init(Mirror *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"directory", "size", "chunk_size", "mode",
                             "cow_chunks", "adaptive", "spill_chunks",
                             NULL};
    const char *dir, *mode = "selective-cow";
    long long size, chunk_size, cow_chunks = 64, spill_chunks = 0;
    int adaptive = 1, mode_no, err;
    char path[4096];

    if (!PyArg_ParseTupleAndKeywords(args, kw, "sLL|sLpL:Mirror", kwlist,
                                     &dir, &size, &chunk_size, &mode,
                                     &cow_chunks, &adaptive, &spill_chunks))
        return -1;
    if (m->core.state) {
        PyErr_SetString(PyExc_RuntimeError, "Mirror is already open");
        return -1;
    }
    if (size <= 0 || chunk_size <= 0 || cow_chunks < 1) {
        PyErr_SetString(PyExc_ValueError,
                        "size, chunk_size and cow_chunks must be positive");
        return -1;
    }
    if (spill_chunks < 0) {
        PyErr_SetString(PyExc_ValueError, "spill_chunks must not be "
                        "negative");
        return -1;
    }
    if (cow_chunks + spill_chunks > INT32_MAX || chunk_size > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "cow_chunks + spill_chunks "
                        "or chunk_size too large");
        return -1;
    }
    if ((mode_no = mc_mode(mode)) < 0) {
        PyErr_Format(PyExc_ValueError, "unknown mirror mode %s", mode);
        return -1;
    }
    path[0] = 0;
    Py_BEGIN_ALLOW_THREADS
    err = mc_open(&m->core, dir, size, chunk_size, mode_no, cow_chunks,
                  spill_chunks, adaptive, path, sizeof path);
    Py_END_ALLOW_THREADS
    if (err == ENOMEM && !path[0]) {
        PyErr_NoMemory();
        return -1;
    }
    if (err) {
        errno = err;
        PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
        return -1;
    }
    return 0;
}

/* ---- reads and writes ---------------------------------------------- */

static int
check_range(Mirror *m, long long off, long long len)
{
    if (check_open(m) < 0)
        return -1;
    if (off < 0 || len < 0 || off > m->core.size) {
        PyErr_SetString(PyExc_ValueError, "range outside the image");
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(read_doc,
"read(offset, length) -> bytes or list\n\n"
"The bytes of the range, or the list of chunk indices that must be\n"
"fetched (then install()ed) before it can be read.");

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
    if (off + len > m->core.size)
        len = m->core.size - off;
    if (len == 0)
        return PyBytes_FromStringAndSize(NULL, 0);
    missing = mc_index_buffer(&m->core, off, len);
    if (!missing)
        return PyErr_NoMemory();
    out = PyBytes_FromStringAndSize(NULL, len);
    if (!out) {
        free(missing);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    err = mc_read(&m->core, PyBytes_AS_STRING(out), off, len, missing,
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

PyDoc_STRVAR(write_doc,
"write(offset, data, nonblock=False) -> int or list\n\n"
"Write data at offset and return its length; or return the list of\n"
"chunks to fetch first (partial writes to absent chunks). With\n"
"nonblock, raise BusyError instead of waiting for the persister.");

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
    if (check_range(m, off, data.len) < 0 || off + data.len > m->core.size) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "write past the image end");
        PyBuffer_Release(&data);
        return NULL;
    }
    if (data.len == 0) {
        PyBuffer_Release(&data);
        return PyLong_FromLong(0);
    }
    missing = mc_index_buffer(&m->core, off, data.len);
    if (m->core.mode == MODE_LIVE_COW)
        scratch = malloc((size_t)m->core.chunk_size);
    if (!missing || (m->core.mode == MODE_LIVE_COW && !scratch)) {
        free(missing); free(scratch);
        PyBuffer_Release(&data);
        return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS
    err = mc_write(&m->core, data.buf, off, data.len, nonblock, scratch,
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

static int
check_chunk(Mirror *m, long long c)
{
    if (check_open(m) < 0)
        return -1;
    if (c < 0 || c >= m->core.nchunks) {
        PyErr_SetString(PyExc_IndexError, "chunk index out of range");
        return -1;
    }
    return 0;
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
    if (!m->core.state || c < 0 || c >= m->core.nchunks ||
        data.len != mc_chunk_len(&m->core, c)) {
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_ValueError, "bad chunk index or length");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    err = mc_install(&m->core, c, data.buf, &installed);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    if (err)
        return set_errno(err);
    return PyBool_FromLong(installed);
}

/* ---- COMMIT and the persister -------------------------------------- */

PyDoc_STRVAR(commit_doc,
"commit(hold=False) -> int\n\n"
"Snapshot: wait for in-flight writes (writes waiting for copy-on-write\n"
"space are not waited for: they come after the snapshot), freeze every\n"
"chunk written since the last commit as a new generation behind those\n"
"in flight, order it, and return how many chunks it holds. Raises\n"
"BusyError (nothing committed) with max_snapshots generations in\n"
"flight (not yet ended by snapshot_done), or when the copy-on-write\n"
"buffer is full while generations are in flight. live-precopy copies\n"
"the chunks aside before returning (on an error nothing stays\n"
"scheduled); with hold, writes stay blocked until release_hold()\n"
"(offline mode).");

static const char *
busy_reason(int busy)
{
    return busy == MC_BUSY_GENS ?
        "the previous snapshots are still being persisted (the most the "
        "mirror keeps in flight)" :
        busy == MC_BUSY_FULL ?
        "the copy-on-write buffer is full (writes wait for the persister)" :
        "another snapshot is being taken or ended";
}

static PyObject *
Mirror_commit(Mirror *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"hold", NULL};
    int hold = 0, busy = 0, err = 0;
    int64_t n = 0;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|p:commit", kwlist, &hold))
        return NULL;
    if (check_open(m) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    err = mc_commit(&m->core, hold, &n, &busy);
    pthread_mutex_lock(&m->core.lock);
    m->commit_wait_ns = m->core.commit_wait_ns;
    m->commit_held_ns = m->core.commit_held_ns;
    m->commit_drain_ns = m->core.commit_drain_ns;
    pthread_mutex_unlock(&m->core.lock);
    Py_END_ALLOW_THREADS
    if (busy) {
        PyErr_SetString(BusyError, busy_reason(busy));
        return NULL;
    }
    if (err)
        return set_errno(err);
    return PyLong_FromLongLong(n);
}

PyDoc_STRVAR(commit_times_doc,
"commit_times() -> dict\n\n"
"The last commit()'s times in ms: wait_ms waiting for the core's lock,\n"
"held_ms holding it (the guest's writes wait that long), of which\n"
"drain_ms draining the writes in flight.");

static PyObject *
Mirror_commit_times(Mirror *m, PyObject *noargs)
{
    /* No lock: the thread that called commit() copied them, and the
     * caller serializes its commits. */
    return Py_BuildValue("{s:d,s:d,s:d}", "wait_ms", m->commit_wait_ns / 1e6,
                         "held_ms", m->commit_held_ns / 1e6,
                         "drain_ms", m->commit_drain_ns / 1e6);
}

PyDoc_STRVAR(commit_busy_doc,
"commit_busy() -> str or None\n\n"
"Why commit() would be refused Busy now (the BusyError message), or\n"
"None if it would take a snapshot. Cheap (no scan, no wait), and only\n"
"a hint: the answer may change before the commit.");

static PyObject *
Mirror_commit_busy(Mirror *m, PyObject *noargs)
{
    int busy;
    if (check_open(m) < 0)
        return NULL;
    busy = mc_commit_room(&m->core);
    if (!busy)
        Py_RETURN_NONE;
    return PyUnicode_FromString(busy_reason(busy));
}

static PyObject *
Mirror_release_hold(Mirror *m, PyObject *noargs)
{
    Py_BEGIN_ALLOW_THREADS
    mc_release_hold(&m->core);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

PyDoc_STRVAR(take_doc,
"take() -> (index, bytes) or None\n\n"
"For the persister: the next chunk of the OLDEST snapshot in flight in\n"
"flush order, with that snapshot's content. None when that snapshot is\n"
"fully taken (end it with snapshot_done, then take the next one).");

static PyObject *
Mirror_take(Mirror *m, PyObject *noargs)
{
    int64_t c;
    int err;
    PyObject *out;

    if (check_open(m) < 0)
        return NULL;
    out = PyBytes_FromStringAndSize(NULL, m->core.chunk_size);
    if (!out)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    err = mc_take(&m->core, PyBytes_AS_STRING(out), &c);
    Py_END_ALLOW_THREADS
    if (err) {
        Py_DECREF(out);
        return set_errno(err);
    }
    if (c < 0) {
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    if (mc_chunk_len(&m->core, c) != m->core.chunk_size &&
        _PyBytes_Resize(&out, mc_chunk_len(&m->core, c)) < 0)
        return NULL;
    return Py_BuildValue("(LN)", (long long)c, out);
}

PyDoc_STRVAR(snapshot_done_doc,
"snapshot_done(stable) -> None\n\n"
"True: the oldest snapshot's version is stable; that snapshot ends.\n"
"False: it failed, and so does every later one in flight (each is\n"
"built on it): all of them end and their chunks are dirty again, so\n"
"the next commit carries them (after a restart, also the snapshots\n"
"that were in flight at the crash).");

static PyObject *
Mirror_snapshot_done(Mirror *m, PyObject *args)
{
    int stable;
    if (!PyArg_ParseTuple(args, "p:snapshot_done", &stable))
        return NULL;
    if (check_open(m) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    mc_snapshot_done(&m->core, stable);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* ---- recovery and inspection ---------------------------------------- */

static PyObject *
Mirror_recovery(Mirror *m, PyObject *args, PyObject *kw)
{
    /* After a restart: how many chunks the interrupted snapshots hold
     * (with oldest, the oldest alone), how many are still to be taken,
     * and how many of those lost their snapshot content (it was in the
     * in-memory buffer). */
    static char *kwlist[] = {"oldest", NULL};
    int64_t snap, sched, lost;
    int oldest = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|p:recovery", kwlist,
                                     &oldest))
        return NULL;
    if (check_open(m) < 0)
        return NULL;
    mc_recovery(&m->core, oldest, &snap, &sched, &lost);
    return Py_BuildValue("{s:L,s:L,s:L}", "snapshot", (long long)snap,
                         "untaken", (long long)sched, "lost",
                         (long long)lost);
}

static PyObject *
Mirror_resume(Mirror *m, PyObject *noargs)
{
    if (check_open(m) < 0)
        return NULL;
    return PyLong_FromLongLong(mc_resume(&m->core));
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
    if (check_open(m) < 0)
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
        if (c < 0 || c >= m->core.nchunks)
            continue;
        if (!mc_requeue(&m->core, c)) {
            PyObject *v = PyLong_FromLongLong(c);
            if (!v || PyList_Append(lost, v) < 0)
                Py_CLEAR(lost);
            Py_XDECREF(v);
        }
    }
    Py_DECREF(seq);
    return lost;
}

/* Room for every chunk index of an open mirror (NULL: an error set). */
static int64_t *
index_buffer(Mirror *m)
{
    int64_t *idx;
    if (check_open(m) < 0)
        return NULL;
    idx = malloc(sizeof(int64_t) * (size_t)m->core.nchunks);
    if (!idx)
        PyErr_NoMemory();
    return idx;
}

/* A list of chunk indices filled by a core function. */
static PyObject *
chunk_list(Mirror *m, int64_t (*fill)(MirrorCore *, int64_t *))
{
    int64_t n, *idx;
    PyObject *list;
    if (!(idx = index_buffer(m)))
        return NULL;
    n = fill(&m->core, idx);
    list = n < 0 ? PyErr_NoMemory() : index_list(idx, n);
    free(idx);
    return list;
}

static PyObject *
Mirror_snapshot_chunks(Mirror *m, PyObject *args)
{
    int k = 0;
    int64_t n, *idx;
    PyObject *list;
    if (!PyArg_ParseTuple(args, "|i:snapshot_chunks", &k))
        return NULL;
    if (!(idx = index_buffer(m)))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    n = mc_gen_chunks(&m->core, k, idx);
    Py_END_ALLOW_THREADS
    list = index_list(idx, n < 0 ? 0 : n);
    free(idx);
    return list;
}

static PyObject *
Mirror_quiet_dirty(Mirror *m, PyObject *args)
{
    PyObject *since_obj = Py_None, *list, *writes;
    unsigned long since = 0;
    uint32_t now = 0, *last;
    int64_t n, *idx;
    if (!PyArg_ParseTuple(args, "|O:quiet_dirty", &since_obj))
        return NULL;
    if (since_obj != Py_None) {
        since = PyLong_AsUnsignedLong(since_obj);
        if (PyErr_Occurred())
            return NULL;
    }
    if (!(idx = index_buffer(m)))
        return NULL;
    last = malloc(sizeof(uint32_t) * (size_t)m->core.nchunks);
    if (!last) {
        free(idx);
        return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS
    n = mc_quiet_dirty(&m->core, (uint32_t)since, since_obj == Py_None,
                       idx, last, &now);
    Py_END_ALLOW_THREADS
    list = index_list(idx, n);
    writes = list ? PyList_New((Py_ssize_t)n) : NULL;
    for (int64_t k = 0; writes && k < n; k++) {
        PyObject *v = PyLong_FromUnsignedLong(last[k]);
        if (!v) {
            Py_CLEAR(writes);
            break;
        }
        PyList_SET_ITEM(writes, (Py_ssize_t)k, v);
    }
    free(idx);
    free(last);
    if (!writes) {
        Py_XDECREF(list);
        return NULL;
    }
    return Py_BuildValue("(kNN)", (unsigned long)now, list, writes);
}

static PyObject *
Mirror_read_order(Mirror *m, PyObject *noargs)
{
    return chunk_list(m, mc_read_order);
}

static PyObject *
Mirror_stats(Mirror *m, PyObject *noargs)
{
    MirrorStats s;
    if (check_open(m) < 0)
        return NULL;
    mc_stats(&m->core, &s);
    return Py_BuildValue(
        "{s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,"
        "s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:s}",
        "present", (long long)s.present, "dirty", (long long)s.dirty,
        "scheduled", (long long)s.scheduled,
        "cow_copies", (long long)s.cow_copies,
        "cow_bytes", (long long)(s.cow_copies * m->core.chunk_size),
        "redirects", (long long)s.redirects,
        "redirects_nocopy", (long long)s.redirects_nocopy,
        "waits", (long long)s.waits,
        "avoided", (long long)s.avoided,
        "urgent", (long long)s.urgent,
        "install_waits", (long long)s.install_waits,
        "installs_skipped", (long long)s.installs_skipped,
        "copies_dropped", (long long)s.copies_dropped,
        "precopy_undone", (long long)s.precopy_undone,
        "copies_older", (long long)s.copies_older,
        "multi_gen", (long long)s.multi_gen,
        "busy_gens", (long long)s.busy_gens,
        "busy_full", (long long)s.busy_full,
        "spilled", (long long)s.spilled,
        "spill_full", (long long)s.spill_full,
        "spill_slots", (long long)m->core.spill_slots,
        "room_waits", (long long)s.room_waits,
        "cut_writers", (long long)s.cut_writers,
        "generations", (long long)s.in_flight,
        "flushes", (long long)s.flushes,
        "flush_records", (long long)s.flush_records,
        "mode", mc_mode_names[m->core.mode]);
}

static PyObject *
Mirror_is_present(Mirror *m, PyObject *args)
{
    long long c;
    if (!PyArg_ParseTuple(args, "L:is_present", &c))
        return NULL;
    if (check_chunk(m, c) < 0)
        return NULL;
    return PyBool_FromLong(mc_is_present(&m->core, c));
}

static PyObject *
Mirror_write_clock(Mirror *m, PyObject *args)
{
    long long c = -1;
    if (!PyArg_ParseTuple(args, "|L:write_clock", &c))
        return NULL;
    if (c >= 0 ? check_chunk(m, c) < 0 : check_open(m) < 0)
        return NULL;
    return PyLong_FromUnsignedLong(mc_write_clock(&m->core, c));
}

PyDoc_STRVAR(flush_doc,
"flush(datasync=True)\n\n"
"A durability point (a guest's fsync): every write and install that\n"
"returned before it survives a power loss of the host. OSError if the\n"
"mirror files or the flush record cannot be synced.");

static PyObject *
Mirror_flush(Mirror *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"datasync", NULL};
    int datasync = 1, err;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|p:flush", kwlist,
                                     &datasync))
        return NULL;
    if (check_open(m) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    err = mc_flush(&m->core, datasync);
    Py_END_ALLOW_THREADS
    if (err) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(set_spill_reserve_doc,
"set_spill_reserve(nbytes)\n\n"
"The room the spill file leaves free on its file system: a copy aside\n"
"that would go below it waits for the store instead (0: none).");

static PyObject *
Mirror_set_spill_reserve(Mirror *m, PyObject *args)
{
    long long bytes;
    if (!PyArg_ParseTuple(args, "L:set_spill_reserve", &bytes))
        return NULL;
    if (check_open(m) < 0)
        return NULL;
    mc_set_spill_reserve(&m->core, bytes);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(log_cut_doc,
"log_cut() -> list of (offset, length)\n\n"
"The write log's next entry (a `cluster` volume's flush): the runs of\n"
"4 KiB blocks written since the last cut, every write that returned\n"
"before the call included. log_done() must follow, before the next cut.");

static PyObject *
Mirror_log_cut(Mirror *m, PyObject *noargs)
{
    int64_t max = 256, n, blocks, *offs = NULL, *lens = NULL;
    PyObject *list;
    int err;
    if (check_open(m) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    err = mc_log_cut(&m->core);
    Py_END_ALLOW_THREADS
    if (err) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    for (;;) {
        int64_t *o = realloc(offs, sizeof(int64_t) * (size_t)max);
        int64_t *l = o ? realloc(lens, sizeof(int64_t) * (size_t)max) : NULL;
        if (o)
            offs = o;
        if (!o || !l) {
            free(offs);
            free(lens);
            return PyErr_NoMemory();
        }
        lens = l;
        Py_BEGIN_ALLOW_THREADS
        n = mc_log_extents(&m->core, offs, lens, max, &blocks);
        Py_END_ALLOW_THREADS
        if (n <= max)
            break;
        max = n;
    }
    list = PyList_New(n);
    for (int64_t k = 0; list && k < n; k++) {
        PyObject *t = Py_BuildValue("(LL)", (long long)offs[k],
                                    (long long)lens[k]);
        if (!t) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, k, t);
    }
    free(offs);
    free(lens);
    return list;
}

PyDoc_STRVAR(log_done_doc,
"log_done(appended)\n\n"
"The last cut is in the write log (appended true) or is owed again.");

static PyObject *
Mirror_log_done(Mirror *m, PyObject *args)
{
    int appended;
    if (!PyArg_ParseTuple(args, "p:log_done", &appended))
        return NULL;
    if (check_open(m) < 0)
        return NULL;
    mc_log_done(&m->core, appended);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(recover_power_loss_doc,
"recover_power_loss(directory, size, chunk_size) -> int\n\n"
"Rebuild the state of the mirror cache in directory, left by a power\n"
"loss, from its newest whole flush record, before a Mirror opens it:\n"
"every recorded chunk present and dirty, no snapshot in flight. Returns\n"
"the chunks kept; OSError (EBADMSG: no whole record) otherwise.");

static PyObject *
mirror_recover_power_loss(PyObject *self, PyObject *args)
{
    const char *dir;
    long long size, chunk_size;
    int64_t present;
    char path[4096];
    int err;
    if (!PyArg_ParseTuple(args, "sLL:recover_power_loss", &dir, &size,
                          &chunk_size))
        return NULL;
    if (size <= 0 || chunk_size <= 0) {
        PyErr_SetString(PyExc_ValueError,
                        "size and chunk_size must be positive");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    err = mc_recover_power_loss(dir, size, chunk_size, &present, path,
                                sizeof path);
    Py_END_ALLOW_THREADS
    if (err) {
        errno = err;
        return path[0] ? PyErr_SetFromErrnoWithFilename(PyExc_OSError, path)
                       : PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromLongLong(present);
}

static PyMethodDef mirror_functions[] = {
    {"recover_power_loss", mirror_recover_power_loss, METH_VARARGS,
     recover_power_loss_doc},
    {NULL, NULL, 0, NULL}
};

static PyObject *
Mirror_close(Mirror *m, PyObject *noargs)
{
    Py_BEGIN_ALLOW_THREADS
    mc_close(&m->core, 1);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef Mirror_methods[] = {
    {"read", (PyCFunction)Mirror_read, METH_VARARGS, read_doc},
    {"write", (PyCFunction)(void (*)(void))Mirror_write,
     METH_VARARGS | METH_KEYWORDS, write_doc},
    {"install", (PyCFunction)Mirror_install, METH_VARARGS, install_doc},
    {"commit", (PyCFunction)(void (*)(void))Mirror_commit,
     METH_VARARGS | METH_KEYWORDS, commit_doc},
    {"commit_busy", (PyCFunction)Mirror_commit_busy, METH_NOARGS,
     commit_busy_doc},
    {"commit_times", (PyCFunction)Mirror_commit_times, METH_NOARGS,
     commit_times_doc},
    {"release_hold", (PyCFunction)Mirror_release_hold, METH_NOARGS,
     "Let writes proceed after commit(hold=True)."},
    {"take", (PyCFunction)Mirror_take, METH_NOARGS, take_doc},
    {"snapshot_done", (PyCFunction)Mirror_snapshot_done, METH_VARARGS,
     snapshot_done_doc},
    {"recovery", (PyCFunction)(void (*)(void))Mirror_recovery,
     METH_VARARGS | METH_KEYWORDS,
     "recovery(oldest=False): state of the snapshots interrupted by a\n"
     "crash (with oldest, of the oldest alone)."},
    {"resume", (PyCFunction)Mirror_resume, METH_NOARGS,
     "Re-queue the untaken chunks of an interrupted snapshot."},
    {"requeue", (PyCFunction)Mirror_requeue, METH_VARARGS,
     "Schedule snapshot chunks again; return those whose content is lost."},
    {"snapshot_chunks", (PyCFunction)Mirror_snapshot_chunks, METH_VARARGS,
     "snapshot_chunks(k=0): indices of the chunks of the k-th snapshot in\n"
     "flight, oldest first (k < 0: from the newest); [] if none."},
    {"quiet_dirty", (PyCFunction)Mirror_quiet_dirty, METH_VARARGS,
     "quiet_dirty(since=None): (clock, chunks, writes): the chunks dirty\n"
     "now and not written after write clock ``since`` (None: any), none\n"
     "being read in or written, and the clock of each one's last write;\n"
     "``clock`` is the next call's ``since``."},
    {"read_order", (PyCFunction)Mirror_read_order, METH_NOARGS,
     "Chunks in the order they were first read since attach."},
    {"stats", (PyCFunction)Mirror_stats, METH_NOARGS,
     "Counters: present, dirty, copies, waits..."},
    {"write_clock", (PyCFunction)Mirror_write_clock, METH_VARARGS,
     "write_clock(index=-1): the write clock now, or at chunk index's\n"
     "last write (quiet_dirty's clocks)."},
    {"is_present", (PyCFunction)Mirror_is_present, METH_VARARGS,
     "True if the mirror file holds chunk index."},
    {"flush", (PyCFunction)(void (*)(void))Mirror_flush,
     METH_VARARGS | METH_KEYWORDS, flush_doc},
    {"log_cut", (PyCFunction)Mirror_log_cut, METH_NOARGS, log_cut_doc},
    {"set_spill_reserve", (PyCFunction)Mirror_set_spill_reserve,
     METH_VARARGS, set_spill_reserve_doc},
    {"log_done", (PyCFunction)Mirror_log_done, METH_VARARGS, log_done_doc},
    {"close", (PyCFunction)Mirror_close, METH_NOARGS,
     "Flush state and data and close every file."},
    {NULL, NULL, 0, NULL}
};

static PyObject *
Mirror_get_nchunks(Mirror *m, void *closure)
{
    return PyLong_FromLongLong(m->core.nchunks);
}

static PyObject *
Mirror_get_max_snapshots(Mirror *m, void *closure)
{
    /* Snapshots in flight at once: selective-cow pipelines them, the
     * other modes keep one. */
    return PyLong_FromLong(m->core.state ? m->core.max_gens : 1);
}

static PyGetSetDef Mirror_getset[] = {
    {"nchunks", (getter)Mirror_get_nchunks, NULL, "number of chunks", NULL},
    {"max_snapshots", (getter)Mirror_get_max_snapshots, NULL,
     "snapshots that can be in flight at once (commit() is Busy beyond)",
     NULL},
    {NULL, NULL, NULL, NULL, NULL}
};

PyTypeObject MirrorType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "blobcr_agent._native.Mirror",
    .tp_basicsize = sizeof(Mirror),
    .tp_dealloc = (destructor)Mirror_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Mirror(directory, size, chunk_size, mode='selective-cow', "
              "cow_chunks=64, adaptive=True, spill_chunks=0): per-image mirror state.",
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
    if (PyModule_AddObject(module, "BusyError", BusyError) < 0)
        return -1;
    return PyModule_AddFunctions(module, mirror_functions);
}

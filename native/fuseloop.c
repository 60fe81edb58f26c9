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
 * blobcr_agent._native.FuseLoop: the attached images served by a
 * multi-threaded libfuse3 low-level loop, in C.
 *
 * pyfuse3 costs about 36 us of CPU per request; this loop serves reads
 * and writes of attached images with one call into the mirror core
 * (core.h) and no Python at all, unless a chunk must be fetched from
 * the repository: then the thread takes the GIL and calls the image's
 * Python fetch function. The namespace is flat: one regular file per
 * attached image, named by its image id, added and removed from Python.
 *
 * The kernel's FUSE connection can outlive the agent (agent.rst, "Agent
 * restarts"): the service manager keeps a duplicate of /dev/fuse's
 * descriptor, and the next agent builds its session on that descriptor
 * instead of mounting. Its libfuse session has never seen the kernel's
 * FUSE_INIT, which the kernel sends once per mount, so the first agent
 * keeps those bytes and the next one replays them into its session:
 * libfuse then negotiates what it negotiated the first time. Its reply
 * carries a request id the kernel does not know, and the kernel drops
 * it (ENOENT). The requests the dead agent had read but not answered
 * are sent again by the kernel on FUSE_NOTIFY_RESEND (Linux 6.9).
 *
 * Copyright BlobCR for OpenStack developers. Apache-2.0.
 */
#define PY_SSIZE_T_CLEAN
#define FUSE_USE_VERSION 35
#include "mirror.h"

#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <linux/fuse.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_ENTRIES 1024
#define TIMEOUT 1.0
/* The kernel's FUSE_INIT request: a header and at most 64 bytes today. */
#define MAX_INIT 512
/* enum fuse_notify_code's FUSE_NOTIFY_RESEND, newer than this system's
 * linux/fuse.h. */
#define NOTIFY_RESEND 7
/* The request id the replayed FUSE_INIT carries: the kernel numbers its
 * requests from 2 up, by 2, and never reaches this one. */
#define REPLAY_UNIQUE (1ULL << 62)

typedef struct {
    char name[128];
    fuse_ino_t ino;
    Mirror *mirror;          /* strong reference, released on remove */
    PyObject *fetch;         /* fetch(list of chunk indices) */
    PyObject *gate;          /* gate(offset, length, writing) or NULL */
    int gated;               /* every request passes the gate first */
    PyObject *flush;         /* flush(datasync) or NULL: a `cluster`
                                volume's flush, which also appends to
                                its write-ahead log (writelog.py) */
    int inflight;            /* requests using it right now */
} Entry;

typedef struct {
    PyObject_HEAD
    struct fuse_session *se;
    pthread_t thread;
    int running;
    pthread_mutex_t lock;
    pthread_cond_t idle;
    Entry *entries[MAX_ENTRIES];
    fuse_ino_t next_ino;
    time_t started;
    int suspended;           /* requests wait for the process to end */
    pthread_cond_t resume;   /* never signalled: see FuseLoop_suspend */
    unsigned char init[MAX_INIT];   /* the kernel's FUSE_INIT, as read */
    size_t init_len;
} FuseLoop;

/* ---- the entry table -------------------------------------------------- */

static Entry *
acquire(FuseLoop *fl, fuse_ino_t ino, const char *name)
{
    Entry *found = NULL;
    pthread_mutex_lock(&fl->lock);
    /* Suspended for a hand-over: the request stays unanswered, and the
     * kernel sends it again to the next agent. */
    while (fl->suspended)
        pthread_cond_wait(&fl->resume, &fl->lock);
    for (int k = 0; k < MAX_ENTRIES && !found; k++) {
        Entry *e = fl->entries[k];
        if (e && (name ? strcmp(e->name, name) == 0 : e->ino == ino))
            found = e;
    }
    if (found)
        found->inflight++;
    pthread_mutex_unlock(&fl->lock);
    return found;
}

static void
release(FuseLoop *fl, Entry *e)
{
    pthread_mutex_lock(&fl->lock);
    e->inflight--;
    pthread_cond_broadcast(&fl->idle);
    pthread_mutex_unlock(&fl->lock);
}

static void
fill_attr(FuseLoop *fl, struct stat *st, fuse_ino_t ino, Entry *e)
{
    memset(st, 0, sizeof *st);
    st->st_ino = ino;
    st->st_atime = st->st_mtime = st->st_ctime = fl->started;
    if (!e) {
        /* images/: root's (default_permissions); others may look an
         * image up by its name (a path, as QEMU opens), not list them. */
        st->st_mode = S_IFDIR | 0711;
        st->st_nlink = 2;
    } else {
        st->st_mode = S_IFREG | 0600;
        st->st_nlink = 1;
        st->st_size = e->mirror->core.size;
        st->st_blksize = 4096;
        st->st_blocks = (e->mirror->core.size + 511) / 512;
    }
}

/* Fetch absent chunks through Python; 0 or an errno. */
static int
fetch(Entry *e, int64_t *missing, int64_t n)
{
    int err = 0;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *list = PyList_New(n), *r = NULL;
    for (int64_t k = 0; list && k < n; k++)
        PyList_SET_ITEM(list, k, PyLong_FromLongLong(missing[k]));
    if (list)
        r = PyObject_CallFunctionObjArgs(e->fetch, list, NULL);
    if (!r) {
        PyErr_WriteUnraisable(e->fetch);   /* logged, the guest gets EIO */
        err = EIO;
    }
    Py_XDECREF(r);
    Py_XDECREF(list);
    PyGILState_Release(gil);
    return err;
}

/* The errno of the Python exception set (an OSError's, else EIO, the
 * exception then logged as raised in fn); clears it. GIL held. */
static int
take_errno(PyObject *fn)
{
    int err = EIO;
    if (PyErr_ExceptionMatches(PyExc_OSError)) {
        PyObject *type, *value, *tb, *code = NULL;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        if (value)
            code = PyObject_GetAttrString(value, "errno");
        if (code && PyLong_Check(code) && PyLong_AsLong(code) > 0)
            err = (int)PyLong_AsLong(code);
        PyErr_Clear();
        Py_XDECREF(code);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
    } else {
        PyErr_WriteUnraisable(fn);
    }
    return err;
}

/* An image attached for an incoming live migration (mirror/handoff.py):
 * every request asks Python first, until ungate(). The gate returns
 * None (go on to the core), or for a read the bytes to answer with
 * (served from the repository, not installed), or raises (an OSError's
 * errno, else EIO). 0 or an errno; *served when buf holds the answer. */
static int
pass_gate(Entry *e, long long off, long long len, int writing, char *buf,
          int *served)
{
    int err = 0;
    *served = 0;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *r = PyObject_CallFunction(e->gate, "LLi", off, len, writing);
    if (!r) {
        err = take_errno(e->gate);
    } else if (r != Py_None) {
        if (!writing && PyBytes_Check(r) && PyBytes_GET_SIZE(r) == len) {
            memcpy(buf, PyBytes_AS_STRING(r), (size_t)len);
            *served = 1;
        } else {
            err = EIO;
        }
    }
    Py_XDECREF(r);
    PyGILState_Release(gil);
    return err;
}

static int
is_gated(Entry *e)
{
    return __atomic_load_n(&e->gated, __ATOMIC_ACQUIRE);
}

/* ---- FUSE operations ------------------------------------------------ */

static void
op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    FuseLoop *fl = fuse_req_userdata(req);
    struct fuse_entry_param ep;
    Entry *e = parent == FUSE_ROOT_ID ? acquire(fl, 0, name) : NULL;
    if (!e) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    memset(&ep, 0, sizeof ep);
    ep.ino = e->ino;
    ep.attr_timeout = TIMEOUT;
    /* Names are not cached: an image detached and attached again (after
     * an extend, say) comes back as a new inode, and a cached entry would
     * send the next open to the old one (ENOENT) within TIMEOUT. */
    ep.entry_timeout = 0;
    fill_attr(fl, &ep.attr, e->ino, e);
    release(fl, e);
    fuse_reply_entry(req, &ep);
}

static void
op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    FuseLoop *fl = fuse_req_userdata(req);
    struct stat st;
    Entry *e = NULL;
    if (ino != FUSE_ROOT_ID && !(e = acquire(fl, ino, NULL))) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    fill_attr(fl, &st, ino, e);
    if (e)
        release(fl, e);
    fuse_reply_attr(req, &st, ino == FUSE_ROOT_ID ? 0 : TIMEOUT);
}

static void
op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
           struct fuse_file_info *fi)
{
    if (to_set & FUSE_SET_ATTR_SIZE) {
        fuse_reply_err(req, EPERM);   /* images have a fixed size */
        return;
    }
    op_getattr(req, ino, fi);
}

static void
op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
           struct fuse_file_info *fi)
{
    FuseLoop *fl = fuse_req_userdata(req);
    char *buf;
    size_t used = 0;
    off_t k;
    struct stat st;
    if (ino != FUSE_ROOT_ID) {
        fuse_reply_err(req, ENOTDIR);
        return;
    }
    buf = malloc(size);
    if (!buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    /* Offsets: 1 ".", 2 "..", then 3 + table slot. */
    memset(&st, 0, sizeof st);
    for (k = off; k < MAX_ENTRIES + 2; k++) {
        const char *name = NULL;
        char copy[128];
        if (k == 0 || k == 1) {
            name = k == 0 ? "." : "..";
            st.st_ino = FUSE_ROOT_ID;
            st.st_mode = S_IFDIR;
        } else {
            pthread_mutex_lock(&fl->lock);
            Entry *e = fl->entries[k - 2];
            if (e) {
                strcpy(copy, e->name);
                st.st_ino = e->ino;
                st.st_mode = S_IFREG;
                name = copy;
            }
            pthread_mutex_unlock(&fl->lock);
        }
        if (!name)
            continue;
        size_t need = fuse_add_direntry(req, buf + used, size - used, name,
                                        &st, k + 1);
        if (need > size - used)
            break;
        used += need;
    }
    fuse_reply_buf(req, buf, used);
    free(buf);
}

static void
op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    FuseLoop *fl = fuse_req_userdata(req);
    Entry *e = acquire(fl, ino, NULL);
    if (!e) {
        fuse_reply_err(req, ino == FUSE_ROOT_ID ? EISDIR : ENOENT);
        return;
    }
    release(fl, e);
    fi->keep_cache = 0;
    fuse_reply_open(req, fi);
}

static void
op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
        struct fuse_file_info *fi)
{
    FuseLoop *fl = fuse_req_userdata(req);
    Entry *e = acquire(fl, ino, NULL);
    char *buf = NULL;
    int64_t *missing = NULL, nmissing;
    int err = 0;
    long long len;
    if (!e) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    MirrorCore *m = &e->mirror->core;
    len = off >= m->size ? 0 : (off + (long long)size > m->size ?
                                m->size - off : (long long)size);
    if (len == 0) {
        release(fl, e);
        fuse_reply_buf(req, NULL, 0);
        return;
    }
    buf = malloc((size_t)len);
    missing = mc_index_buffer(m, off, len);
    if (!buf || !missing)
        err = ENOMEM;
    if (!err && is_gated(e)) {
        int served;
        err = pass_gate(e, off, len, 0, buf, &served);
        if (!err && served) {
            release(fl, e);
            fuse_reply_buf(req, buf, (size_t)len);
            free(buf);
            free(missing);
            return;
        }
    }
    while (!err) {
        err = mc_read(m, buf, off, len, missing, &nmissing);
        if (err || !nmissing)
            break;
        err = fetch(e, missing, nmissing);
    }
    release(fl, e);
    if (err)
        fuse_reply_err(req, err);
    else
        fuse_reply_buf(req, buf, (size_t)len);
    free(buf);
    free(missing);
}

static void
op_write(fuse_req_t req, fuse_ino_t ino, const char *data, size_t size,
         off_t off, struct fuse_file_info *fi)
{
    FuseLoop *fl = fuse_req_userdata(req);
    Entry *e = acquire(fl, ino, NULL);
    char *scratch = NULL;
    int64_t *missing = NULL, nmissing;
    int err = 0, busy;
    if (!e) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    MirrorCore *m = &e->mirror->core;
    if (off + (long long)size > m->size) {
        release(fl, e);
        fuse_reply_err(req, ENOSPC);
        return;
    }
    if (size == 0) {
        release(fl, e);
        fuse_reply_write(req, 0);
        return;
    }
    missing = mc_index_buffer(m, off, (long long)size);
    if (m->mode == MODE_LIVE_COW)
        scratch = malloc((size_t)m->chunk_size);
    if (!missing || (m->mode == MODE_LIVE_COW && !scratch))
        err = ENOMEM;
    if (!err && is_gated(e)) {
        int served;
        err = pass_gate(e, off, (long long)size, 1, NULL, &served);
    }
    while (!err) {
        err = mc_write(m, data, off, (long long)size, 0, scratch,
                                missing, &nmissing, &busy);
        if (err || !nmissing)
            break;
        err = fetch(e, missing, nmissing);
    }
    release(fl, e);
    if (err)
        fuse_reply_err(req, err);
    else
        fuse_reply_write(req, size);
    free(scratch);
    free(missing);
}

static void
op_ok(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    fuse_reply_err(req, 0);
}

/* A guest's flush (QEMU sends one per flush with cache=none): every
 * write acknowledged before it is made durable (core_durable.c). */
static void
op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
         struct fuse_file_info *fi)
{
    FuseLoop *fl = fuse_req_userdata(req);
    Entry *e = acquire(fl, ino, NULL);
    int err;
    if (!e) {
        fuse_reply_err(req, ino == FUSE_ROOT_ID ? 0 : ENOENT);
        return;
    }
    if (e->flush) {
        PyGILState_STATE gil = PyGILState_Ensure();
        PyObject *r = PyObject_CallFunction(e->flush, "O",
                                            datasync ? Py_True : Py_False);
        err = r ? 0 : take_errno(e->flush);
        Py_XDECREF(r);
        PyGILState_Release(gil);
    } else {
        err = mc_flush(&e->mirror->core, datasync);
    }
    release(fl, e);
    fuse_reply_err(req, err);
}

static const struct fuse_lowlevel_ops loop_ops = {
    .lookup = op_lookup,
    .getattr = op_getattr,
    .setattr = op_setattr,
    .readdir = op_readdir,
    .open = op_open,
    .read = op_read,
    .write = op_write,
    /* No flush: the kernel then stops sending FLUSH at each close (the
     * first one gets ENOSYS), so a close never waits for the agent; a
     * process closing a descriptor of an image while the agent
     * restarts (every fork's child does, before its exec) would hang. */
    .release = op_ok,
    .fsync = op_fsync,
};

/* ---- the Python object ----------------------------------------------- */

static void *
loop_thread(void *arg)
{
    FuseLoop *fl = arg;
    struct fuse_loop_config cfg;
    /* With FUSE_USE_VERSION 35 this is the 3.2 configuration struct
     * (see native/bench/passthrough.c for why it matters). */
    memset(&cfg, 0, sizeof cfg);
    cfg.clone_fd = 0;
    cfg.max_idle_threads = 10;
    fuse_session_loop_mt(fl->se, &cfg);
    return NULL;
}

/* A fresh mount: read the kernel's FUSE_INIT (its first request),
 * keep its bytes for a later agent, and answer it. 0 or -1. */
static int
first_init(FuseLoop *fl)
{
    struct fuse_buf fbuf;
    struct fuse_in_header *h;
    int res;
    memset(&fbuf, 0, sizeof fbuf);
    res = fuse_session_receive_buf(fl->se, &fbuf);
    h = fbuf.mem;
    if (res <= 0 || (size_t)res < sizeof *h || (size_t)res > MAX_INIT ||
            h->opcode != FUSE_INIT) {
        free(fbuf.mem);
        return -1;
    }
    memcpy(fl->init, fbuf.mem, (size_t)res);
    fl->init_len = (size_t)res;
    fuse_session_process_buf(fl->se, &fbuf);
    free(fbuf.mem);
    return 0;
}

/* A taken-over connection: replay the FUSE_INIT the first agent kept.
 * 0 or -1. */
static int
replay_init(FuseLoop *fl)
{
    struct fuse_buf fbuf;
    unsigned char copy[MAX_INIT];
    struct fuse_in_header *h = (struct fuse_in_header *)copy;
    memcpy(copy, fl->init, fl->init_len);
    if (fl->init_len < sizeof *h || h->len != fl->init_len ||
            h->opcode != FUSE_INIT)
        return -1;
    h->unique = REPLAY_UNIQUE;
    memset(&fbuf, 0, sizeof fbuf);
    fbuf.mem = copy;
    fbuf.size = fl->init_len;
    fuse_session_process_buf(fl->se, &fbuf);
    return 0;
}

static int
FuseLoop_init(FuseLoop *fl, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"mountpoint", "fd", "init", NULL};
    const char *mountpoint;
    char *argv[] = {"blobcr", "-o",
                    "allow_other,default_permissions,fsname=blobcr", NULL};
    struct fuse_args fargs = FUSE_ARGS_INIT(3, argv);
    char device[32];
    int fd = -1, mine = -1, failed;
    Py_buffer init = {0};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|iy*:FuseLoop", kwlist,
                                     &mountpoint, &fd, &init))
        return -1;
    if (fl->se) {
        PyBuffer_Release(&init);
        PyErr_SetString(PyExc_RuntimeError, "already mounted");
        return -1;
    }
    if (fd >= 0 && (init.len < (Py_ssize_t)sizeof(struct fuse_in_header) ||
                    init.len > MAX_INIT)) {
        PyBuffer_Release(&init);
        PyErr_SetString(PyExc_ValueError,
                        "taking over needs the connection's FUSE_INIT");
        return -1;
    }
    if (fd >= 0) {
        memcpy(fl->init, init.buf, (size_t)init.len);
        fl->init_len = (size_t)init.len;
    }
    PyBuffer_Release(&init);
    pthread_mutex_init(&fl->lock, NULL);
    pthread_cond_init(&fl->idle, NULL);
    pthread_cond_init(&fl->resume, NULL);
    fl->next_ino = FUSE_ROOT_ID + 1;
    fl->started = time(NULL);
    fl->se = fuse_session_new(&fargs, &loop_ops, sizeof loop_ops, fl);
    if (!fl->se) {
        PyErr_SetString(PyExc_OSError, "fuse_session_new failed");
        return -1;
    }
    if (fd >= 0) {
        /* The session closes its descriptor: it gets a copy. */
        mine = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        snprintf(device, sizeof device, "/dev/fd/%d", mine);
        failed = mine < 0 || fuse_session_mount(fl->se, device) != 0;
        if (failed && mine >= 0)
            close(mine);
        if (!failed && replay_init(fl) != 0) {
            fuse_session_destroy(fl->se);      /* closes mine */
            fl->se = NULL;
            PyErr_SetString(PyExc_ValueError, "not a FUSE_INIT request");
            return -1;
        }
    } else {
        failed = fuse_session_mount(fl->se, mountpoint) != 0;
        if (!failed && first_init(fl) != 0) {
            fuse_session_unmount(fl->se);
            fuse_session_destroy(fl->se);
            fl->se = NULL;
            PyErr_Format(PyExc_OSError, "no FUSE_INIT on %s", mountpoint);
            return -1;
        }
    }
    if (failed) {
        fuse_session_destroy(fl->se);
        fl->se = NULL;
        PyErr_Format(PyExc_OSError, "cannot mount FUSE on %s", mountpoint);
        return -1;
    }
    return 0;
}

static PyObject *
FuseLoop_start(FuseLoop *fl, PyObject *noargs)
{
    if (!fl->se || fl->running) {
        PyErr_SetString(PyExc_RuntimeError, "not mounted, or started");
        return NULL;
    }
    if (pthread_create(&fl->thread, NULL, loop_thread, fl) != 0) {
        PyErr_SetString(PyExc_OSError, "cannot start the FUSE loop");
        return NULL;
    }
    fl->running = 1;
    Py_RETURN_NONE;
}

/* The descriptor and the FUSE_INIT a later agent takes over with. */
static PyObject *
FuseLoop_device(FuseLoop *fl, PyObject *noargs)
{
    if (!fl->se) {
        PyErr_SetString(PyExc_RuntimeError, "not mounted");
        return NULL;
    }
    return Py_BuildValue("iy#", fuse_session_fd(fl->se),
                         (const char *)fl->init, (Py_ssize_t)fl->init_len);
}

/* Ask the kernel for every request read by an earlier agent and never
 * answered: they come again, to this loop. */
static PyObject *
FuseLoop_resend(FuseLoop *fl, PyObject *noargs)
{
    struct fuse_out_header h;
    ssize_t n;
    if (!fl->se) {
        PyErr_SetString(PyExc_RuntimeError, "not mounted");
        return NULL;
    }
    memset(&h, 0, sizeof h);
    h.len = sizeof h;
    h.error = NOTIFY_RESEND;
    n = write(fuse_session_fd(fl->se), &h, sizeof h);
    if (n != (ssize_t)sizeof h)
        return PyErr_SetFromErrno(PyExc_OSError);
    Py_RETURN_NONE;
}

/* Before a hand-over: from now on requests wait unanswered until the
 * process ends (the next agent gets them again); returns once those
 * being served are done, so the mirror cores can be closed. */
static PyObject *
FuseLoop_suspend(FuseLoop *fl, PyObject *noargs)
{
    int busy;
    /* Kept alive to the end of the process: its threads wait on its
     * lock, and a request may still come in to touch its table. */
    if (!fl->suspended)
        Py_INCREF(fl);
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&fl->lock);
    fl->suspended = 1;
    do {
        busy = 0;
        for (int k = 0; k < MAX_ENTRIES; k++)
            if (fl->entries[k] && fl->entries[k]->inflight)
                busy = 1;
        if (busy)
            pthread_cond_wait(&fl->idle, &fl->lock);
    } while (busy);
    pthread_mutex_unlock(&fl->lock);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *
FuseLoop_add(FuseLoop *fl, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"name", "mirror", "fetch", "gate", "ino",
                             "flush", NULL};
    const char *name;
    PyObject *mirror, *fetch_fn, *gate_fn = Py_None, *flush_fn = Py_None;
    unsigned long long ino = 0;
    Entry *e;
    int slot = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sO!O|OKO:add", kwlist, &name,
                                     &MirrorType, &mirror, &fetch_fn,
                                     &gate_fn, &ino, &flush_fn))
        return NULL;
    if (ino != 0 && ino <= FUSE_ROOT_ID) {
        PyErr_SetString(PyExc_ValueError, "bad inode number");
        return NULL;
    }
    if (strlen(name) >= sizeof e->name || strchr(name, '/')) {
        PyErr_SetString(PyExc_ValueError, "bad file name");
        return NULL;
    }
    e = calloc(1, sizeof *e);
    if (!e)
        return PyErr_NoMemory();
    strcpy(e->name, name);
    Py_INCREF(mirror);
    Py_INCREF(fetch_fn);
    e->mirror = (Mirror *)mirror;
    e->fetch = fetch_fn;
    if (gate_fn != Py_None) {
        Py_INCREF(gate_fn);
        e->gate = gate_fn;      /* kept until remove: a request may be in it */
        e->gated = 1;
    }
    if (flush_fn != Py_None) {
        Py_INCREF(flush_fn);
        e->flush = flush_fn;
    }
    pthread_mutex_lock(&fl->lock);
    for (int k = 0; k < MAX_ENTRIES; k++) {
        if (fl->entries[k] && (strcmp(fl->entries[k]->name, name) == 0 ||
                               fl->entries[k]->ino == ino)) {
            slot = -2;
            break;
        }
        if (!fl->entries[k] && slot == -1)
            slot = k;
    }
    if (slot >= 0) {
        /* A given number (the one an earlier agent gave it, which the
         * kernel still uses) or the next one. */
        e->ino = ino ? ino : fl->next_ino;
        if (e->ino >= fl->next_ino)
            fl->next_ino = e->ino + 1;
        fl->entries[slot] = e;
    }
    pthread_mutex_unlock(&fl->lock);
    if (slot < 0) {
        Py_DECREF(mirror);
        Py_DECREF(fetch_fn);
        Py_XDECREF(e->gate);
        Py_XDECREF(e->flush);
        free(e);
        PyErr_SetString(PyExc_ValueError, slot == -2 ? "already served"
                                                     : "too many images");
        return NULL;
    }
    return PyLong_FromUnsignedLongLong(e->ino);
}

static PyObject *
FuseLoop_remove(FuseLoop *fl, PyObject *args)
{
    const char *name;
    Entry *e = NULL;
    if (!PyArg_ParseTuple(args, "s:remove", &name))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&fl->lock);
    for (int k = 0; k < MAX_ENTRIES; k++) {
        if (fl->entries[k] && strcmp(fl->entries[k]->name, name) == 0) {
            e = fl->entries[k];
            fl->entries[k] = NULL;       /* no new request finds it */
            break;
        }
    }
    while (e && e->inflight)
        pthread_cond_wait(&fl->idle, &fl->lock);
    pthread_mutex_unlock(&fl->lock);
    Py_END_ALLOW_THREADS
    if (!e) {
        PyErr_Format(PyExc_KeyError, "%s is not served", name);
        return NULL;
    }
    Py_DECREF((PyObject *)e->mirror);
    Py_DECREF(e->fetch);
    Py_XDECREF(e->gate);
    Py_XDECREF(e->flush);
    free(e);
    Py_RETURN_NONE;
}

static PyObject *
FuseLoop_ungate(FuseLoop *fl, PyObject *args)
{
    const char *name;
    int found = 0;
    if (!PyArg_ParseTuple(args, "s:ungate", &name))
        return NULL;
    pthread_mutex_lock(&fl->lock);
    for (int k = 0; k < MAX_ENTRIES; k++) {
        Entry *e = fl->entries[k];
        if (e && strcmp(e->name, name) == 0) {
            __atomic_store_n(&e->gated, 0, __ATOMIC_RELEASE);
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&fl->lock);
    if (!found) {
        PyErr_Format(PyExc_KeyError, "%s is not served", name);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
FuseLoop_stop(FuseLoop *fl, PyObject *noargs)
{
    /* Suspended: its threads wait for the process to end, and the
     * connection is the next agent's. */
    if (fl->running && !fl->suspended) {
        Py_BEGIN_ALLOW_THREADS
        fuse_session_exit(fl->se);
        fuse_session_unmount(fl->se);    /* wakes the loop's threads */
        pthread_join(fl->thread, NULL);
        Py_END_ALLOW_THREADS
        fuse_session_destroy(fl->se);
        fl->se = NULL;
        fl->running = 0;
    }
    Py_RETURN_NONE;
}

static void
FuseLoop_dealloc(FuseLoop *fl)
{
    FuseLoop_stop(fl, NULL);
    for (int k = 0; k < MAX_ENTRIES; k++) {
        if (fl->entries[k]) {
            Py_DECREF((PyObject *)fl->entries[k]->mirror);
            Py_DECREF(fl->entries[k]->fetch);
            Py_XDECREF(fl->entries[k]->gate);
            free(fl->entries[k]);
        }
    }
    Py_TYPE(fl)->tp_free((PyObject *)fl);
}

static PyMethodDef FuseLoop_methods[] = {
    {"add", (PyCFunction)(void (*)(void))FuseLoop_add,
     METH_VARARGS | METH_KEYWORDS,
     "add(name, mirror, fetch[, gate][, ino][, flush]): serve an attached "
     "image as a file (inode ino, else the next free one), returns its "
     "inode; with a gate, every request passes it until ungate(); with "
     "flush, a guest's fsync calls flush(datasync) instead of the core."},
    {"start", (PyCFunction)FuseLoop_start, METH_NOARGS,
     "Start serving requests (add the images first)."},
    {"device", (PyCFunction)FuseLoop_device, METH_NOARGS,
     "(fd, init): the /dev/fuse descriptor and the FUSE_INIT bytes a "
     "later agent takes the connection over with."},
    {"resend", (PyCFunction)FuseLoop_resend, METH_NOARGS,
     "Have the kernel send again what an earlier agent left unanswered."},
    {"suspend", (PyCFunction)FuseLoop_suspend, METH_NOARGS,
     "Leave every further request unanswered (for the next agent); "
     "returns once those being served are done."},
    {"ungate", (PyCFunction)FuseLoop_ungate, METH_VARARGS,
     "ungate(name): requests go straight to the core from now on."},
    {"remove", (PyCFunction)FuseLoop_remove, METH_VARARGS,
     "remove(name): stop serving it, once its requests are done."},
    {"stop", (PyCFunction)FuseLoop_stop, METH_NOARGS,
     "Unmount and stop the request threads."},
    {NULL, NULL, 0, NULL}
};

static PyTypeObject FuseLoopType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "blobcr_agent._native.FuseLoop",
    .tp_basicsize = sizeof(FuseLoop),
    .tp_dealloc = (destructor)FuseLoop_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "FuseLoop(mountpoint[, fd, init]): attached images on a "
              "libfuse3 multi-threaded low-level loop; mounts at mountpoint, "
              "or takes over the connection of fd (see device()).",
    .tp_methods = FuseLoop_methods,
    .tp_init = (initproc)FuseLoop_init,
    .tp_new = PyType_GenericNew,
};

int
blobcr_fuseloop_register(PyObject *module)
{
    if (PyType_Ready(&FuseLoopType) < 0)
        return -1;
    Py_INCREF(&FuseLoopType);
    /* A connection is taken over only by the libfuse that made it. */
    if (PyModule_AddStringConstant(module, "LIBFUSE_VERSION",
                                   fuse_pkgversion()) < 0)
        return -1;
    return PyModule_AddObject(module, "FuseLoop", (PyObject *)&FuseLoopType);
}

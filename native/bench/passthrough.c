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
 * blobcr-passthrough: the baseline of the `blobcr-bench mirror` benchmark.
 *
 * A plain libfuse3 low-level file system that exposes ONE backing file as
 * the only regular file in the mount root:
 *
 *     blobcr-passthrough BACKING_FILE MOUNTPOINT [fuse options...]
 *
 * makes BACKING_FILE readable and writable as MOUNTPOINT/<basename>. Reads
 * and writes are a pread/pwrite on one O_RDWR descriptor of the backing
 * file, served by libfuse's multi-threaded loop: the cheapest honest FUSE
 * data path, against which the BlobCR mirror is measured (ARCHITECTURE.md
 * §8: mirror I/O >= 80% of this).
 *
 * Choices, made to behave like a normal passthrough:
 *  - Caching: direct_io is off and keep_cache is off (the libfuse
 *    defaults), so buffered clients go through the kernel page cache of
 *    the FUSE file, which is dropped on every open. A client that opens
 *    with O_DIRECT (fio --direct=1, qemu -t none) bypasses that page cache:
 *    the kernel turns each of its requests into FUSE_READ/FUSE_WRITE, and
 *    with libaio they are asynchronous (libfuse enables FUSE_CAP_ASYNC_DIO
 *    by default). O_DIRECT is not passed on to the backing file: it is
 *    opened buffered, as a plain passthrough does.
 *  - Size: the file has the size of the backing file at mount time and
 *    keeps it. A FUSE_WRITE request that would reach past the end fails
 *    with EINVAL and writes nothing; truncation to another size fails with
 *    EINVAL. A VM image does not grow behind the hypervisor's back, and a
 *    failed write is easier to notice in a benchmark than a silently grown
 *    file. (A buffered write(2) across the end is split by the kernel at a
 *    page boundary, so the client sees a short write, as on a full disk.)
 *  - The process always stays in the foreground, so that whoever starts
 *    it can stop it by its PID. SIGTERM/SIGINT unmount cleanly.
 *  - Threads: libfuse's multi-threaded loop, up to 10 workers (-s for a
 *    single thread, -o clone_fd and -o max_idle_threads=N are honoured;
 *    -o max_threads is parsed by libfuse but has no effect at this API
 *    version).
 *  - Connection tunables such as -o max_background=N are accepted (see
 *    fuse_parse_conn_info_opts); by default libfuse's values are kept.
 *
 * Copyright BlobCR for OpenStack developers. Apache-2.0.
 */
#define FUSE_USE_VERSION 35
#define _GNU_SOURCE

#include <fuse_lowlevel.h>

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <unistd.h>

/* Inode numbers: the root is FUSE_ROOT_ID (1), the one file is 2. */
#define FILE_INO 2

/* Attributes and names never change behind the kernel's back (except the
 * times, which nobody here relies on), so the kernel may cache them. */
#define ATTR_TIMEOUT 1.0

static struct {
    int fd;                        /* the backing file, O_RDWR */
    off_t size;                    /* its size at mount time, fixed */
    char name[NAME_MAX + 1];       /* basename shown in the mount root */
    struct fuse_conn_info_opts *conn_opts;
} pt;

/* Attributes of an inode; 0 on success or an errno value. */
static int
pt_stat(fuse_ino_t ino, struct stat *st)
{
    if (fstat(pt.fd, st) == -1)
        return errno;
    if (ino == FUSE_ROOT_ID) {
        /* The root takes its times from the backing file: there is no
         * directory behind it. */
        st->st_ino = FUSE_ROOT_ID;
        st->st_mode = S_IFDIR | 0755;
        st->st_nlink = 2;
        st->st_size = 0;
        st->st_blocks = 0;
        st->st_uid = getuid();
        st->st_gid = getgid();
        return 0;
    }
    if (ino == FILE_INO) {
        st->st_ino = FILE_INO;
        st->st_nlink = 1;
        st->st_size = pt.size;
        return 0;
    }
    return ENOENT;
}

static void
pt_init(void *userdata, struct fuse_conn_info *conn)
{
    (void)userdata;
    /* Only what the caller asked for with -o; otherwise libfuse's
     * defaults, which already negotiate 1 MiB requests (max_pages). */
    fuse_apply_conn_info_opts(pt.conn_opts, conn);
}

static void
pt_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct fuse_entry_param e;
    int err;

    if (parent != FUSE_ROOT_ID) {
        fuse_reply_err(req, ENOTDIR);
        return;
    }
    if (strcmp(name, pt.name) != 0) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    memset(&e, 0, sizeof(e));
    err = pt_stat(FILE_INO, &e.attr);
    if (err) {
        fuse_reply_err(req, err);
        return;
    }
    /* Fixed inode numbers: lookup counts need no bookkeeping and
     * forget is a no-op. */
    e.ino = FILE_INO;
    e.attr_timeout = ATTR_TIMEOUT;
    e.entry_timeout = ATTR_TIMEOUT;
    fuse_reply_entry(req, &e);
}

static void
pt_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct stat st;
    int err;

    (void)fi;
    err = pt_stat(ino, &st);
    if (err)
        fuse_reply_err(req, err);
    else
        fuse_reply_attr(req, &st, ATTR_TIMEOUT);
}

/* Only what open(O_TRUNC), ftruncate() to the current size and utimes()
 * need: the size is fixed, the times are the backing file's. */
static void
pt_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
           struct fuse_file_info *fi)
{
    struct timespec times[2] = {
        { .tv_nsec = UTIME_OMIT }, { .tv_nsec = UTIME_OMIT },
    };

    if (ino != FILE_INO) {
        fuse_reply_err(req, EPERM);
        return;
    }
    if ((to_set & FUSE_SET_ATTR_SIZE) && attr->st_size != pt.size) {
        fuse_reply_err(req, EINVAL);
        return;
    }
    if (to_set & (FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_UID |
                  FUSE_SET_ATTR_GID)) {
        fuse_reply_err(req, EPERM);
        return;
    }
    if (to_set & FUSE_SET_ATTR_ATIME_NOW)
        times[0].tv_nsec = UTIME_NOW;
    else if (to_set & FUSE_SET_ATTR_ATIME)
        times[0] = attr->st_atim;
    if (to_set & FUSE_SET_ATTR_MTIME_NOW)
        times[1].tv_nsec = UTIME_NOW;
    else if (to_set & FUSE_SET_ATTR_MTIME)
        times[1] = attr->st_mtim;
    if (futimens(pt.fd, times) == -1) {
        fuse_reply_err(req, errno);
        return;
    }
    pt_getattr(req, ino, fi);
}

static void
pt_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    if (ino != FILE_INO) {
        fuse_reply_err(req, ino == FUSE_ROOT_ID ? EISDIR : ENOENT);
        return;
    }
    /* Every open shares the one backing descriptor: there is no per-open
     * state, so fh stays 0 and release has nothing to do. */
    fi->direct_io = 0;
    fi->keep_cache = 0;
    fuse_reply_open(req, fi);
}

static void
pt_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
        struct fuse_file_info *fi)
{
    size_t done = 0;
    char *buf;

    (void)ino;
    (void)fi;
    /* A malloc per request: glibc serves a freed 1 MiB block again from
     * the heap (dynamic mmap threshold), and the cost is nothing next to
     * the FUSE round trip. */
    buf = malloc(size ? size : 1);
    if (buf == NULL) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    while (done < size) {
        ssize_t n = pread(pt.fd, buf + done, size - done, off + done);
        if (n == -1 && errno == EINTR)
            continue;
        if (n == -1) {
            fuse_reply_err(req, errno);
            free(buf);
            return;
        }
        if (n == 0)
            break;                  /* end of file: a short read */
        done += n;
    }
    fuse_reply_buf(req, buf, done);
    free(buf);
}

static void
pt_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size,
         off_t off, struct fuse_file_info *fi)
{
    size_t done = 0;

    (void)ino;
    (void)fi;
    if (off < 0 || off > pt.size || size > (size_t)(pt.size - off)) {
        fuse_reply_err(req, EINVAL);
        return;
    }
    while (done < size) {
        ssize_t n = pwrite(pt.fd, buf + done, size - done, off + done);
        if (n == -1 && errno == EINTR)
            continue;
        if (n == -1) {
            fuse_reply_err(req, errno);
            return;
        }
        done += n;
    }
    fuse_reply_write(req, done);
}

/* Nothing is buffered here: every write is already in the backing file's
 * page cache when it is acknowledged. */
static void
pt_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    (void)fi;
    fuse_reply_err(req, 0);
}

static void
pt_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    (void)fi;
    fuse_reply_err(req, 0);
}

static void
pt_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
         struct fuse_file_info *fi)
{
    int res;

    (void)ino;
    (void)fi;
    res = datasync ? fdatasync(pt.fd) : fsync(pt.fd);
    fuse_reply_err(req, res == -1 ? errno : 0);
}

/* Add one entry to a readdir reply unless it is before `off` or does not
 * fit; returns the new used length, or `size` + 1 when full. */
static size_t
add_entry(fuse_req_t req, char *buf, size_t used, size_t size,
          const char *name, fuse_ino_t ino, mode_t mode, off_t next)
{
    struct stat st;
    size_t len;

    memset(&st, 0, sizeof(st));
    st.st_ino = ino;
    st.st_mode = mode;
    len = fuse_add_direntry(req, buf + used, size - used, name, &st, next);
    if (len > size - used)
        return size + 1;
    return used + len;
}

static void
pt_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
           struct fuse_file_info *fi)
{
    /* Three entries; `off` is the index of the next one to return. */
    const struct {
        const char *name;
        fuse_ino_t ino;
        mode_t mode;
    } entries[] = {
        { ".", FUSE_ROOT_ID, S_IFDIR },
        { "..", FUSE_ROOT_ID, S_IFDIR },
        { pt.name, FILE_INO, S_IFREG },
    };
    size_t used = 0;
    char *buf;
    off_t i;

    (void)fi;
    if (ino != FUSE_ROOT_ID) {
        fuse_reply_err(req, ENOTDIR);
        return;
    }
    buf = calloc(1, size ? size : 1);
    if (buf == NULL) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    for (i = off; i >= 0 && i < 3; i++) {
        size_t next = add_entry(req, buf, used, size, entries[i].name,
                                entries[i].ino, entries[i].mode, i + 1);
        if (next > size)
            break;
        used = next;
    }
    fuse_reply_buf(req, buf, used);
    free(buf);
}

static void
pt_statfs(fuse_req_t req, fuse_ino_t ino)
{
    struct statvfs sv;

    (void)ino;
    if (fstatvfs(pt.fd, &sv) == -1)
        fuse_reply_err(req, errno);
    else
        fuse_reply_statfs(req, &sv);
}

static const struct fuse_lowlevel_ops pt_ops = {
    .init = pt_init,
    .lookup = pt_lookup,
    .getattr = pt_getattr,
    .setattr = pt_setattr,
    .open = pt_open,
    .read = pt_read,
    .write = pt_write,
    .flush = pt_flush,
    .release = pt_release,
    .fsync = pt_fsync,
    .readdir = pt_readdir,
    .statfs = pt_statfs,
};

static void
usage(const char *prog)
{
    printf("usage: %s BACKING_FILE MOUNTPOINT [options]\n\n"
           "Expose BACKING_FILE as MOUNTPOINT/<its basename>. Always runs\n"
           "in the foreground.\n\n", prog);
    fuse_cmdline_help();
    fuse_lowlevel_help();
}

int
main(int argc, char *argv[])
{
    struct fuse_args args;
    struct fuse_cmdline_opts opts;
    struct fuse_loop_config loop_cfg;
    struct fuse_session *se = NULL;
    struct stat st;
    char *copy;
    int ret = 1;

    if (argc >= 2 && (strcmp(argv[1], "-h") == 0 ||
                      strcmp(argv[1], "--help") == 0)) {
        usage(argv[0]);
        return 0;
    }
    if (argc < 3 || argv[1][0] == '-') {
        usage(argv[0]);
        return 1;
    }

    /* The backing file first, then libfuse parses the rest as if it were
     * a plain "PROG MOUNTPOINT [options]" command line. */
    pt.fd = open(argv[1], O_RDWR | O_CLOEXEC);
    if (pt.fd == -1 || fstat(pt.fd, &st) == -1) {
        fprintf(stderr, "%s: %s: %s\n", argv[0], argv[1], strerror(errno));
        return 1;
    }
    if (!S_ISREG(st.st_mode)) {
        fprintf(stderr, "%s: %s: not a regular file\n", argv[0], argv[1]);
        return 1;
    }
    pt.size = st.st_size;
    copy = strdup(argv[1]);
    if (copy == NULL)
        return 1;
    snprintf(pt.name, sizeof(pt.name), "%s", basename(copy));
    free(copy);

    argv[1] = argv[0];
    args = (struct fuse_args)FUSE_ARGS_INIT(argc - 1, argv + 1);
    if (fuse_parse_cmdline(&args, &opts) != 0)
        goto out_args;
    if (opts.show_help || opts.show_version) {
        if (opts.show_help)
            usage(argv[0]);
        else
            fuse_lowlevel_version();
        ret = 0;
        goto out_opts;
    }
    if (opts.mountpoint == NULL) {
        fprintf(stderr, "%s: no mountpoint\n", argv[0]);
        goto out_opts;
    }
    /* Takes -o max_background=, congestion_threshold=, max_readahead=...
     * out of args before fuse_session_new sees them. */
    pt.conn_opts = fuse_parse_conn_info_opts(&args);
    if (pt.conn_opts == NULL)
        goto out_opts;

    se = fuse_session_new(&args, &pt_ops, sizeof(pt_ops), NULL);
    if (se == NULL)
        goto out_conn;
    if (fuse_set_signal_handlers(se) != 0)
        goto out_session;
    if (fuse_session_mount(se, opts.mountpoint) != 0)
        goto out_signals;

    if (opts.singlethread) {
        ret = fuse_session_loop(se);
    } else {
        /* FUSE_USE_VERSION 35 maps fuse_session_loop_mt() to the 3.2 ABI,
         * which takes this public (v1) struct. Handing it the opaque
         * config of fuse_loop_cfg_create() instead is silently misread
         * (clone_fd on, a new thread for every request). The v1 struct
         * has no max_threads: libfuse's default of 10 applies. An unset
         * max_idle_threads becomes 10, the documented v1 default, which
         * with at most 10 threads never destroys an idle one. */
        loop_cfg.clone_fd = opts.clone_fd;
        loop_cfg.max_idle_threads =
            opts.max_idle_threads == UINT_MAX ? 10 : opts.max_idle_threads;
        ret = fuse_session_loop_mt(se, &loop_cfg);
    }
    /* The loop also ends when someone runs fusermount3 -u: not an error. */
    ret = ret < 0 ? 1 : 0;

    fuse_session_unmount(se);
out_signals:
    fuse_remove_signal_handlers(se);
out_session:
    fuse_session_destroy(se);
out_conn:
    free(pt.conn_opts);
out_opts:
    free(opts.mountpoint);
out_args:
    fuse_opt_free_args(&args);
    close(pt.fd);
    return ret;
}

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
 * The copy-on-write buffer's spill file: buffer slots past the in-memory
 * ones (slot >= cow_slots) live in an anonymous file of the cache
 * directory, so that a guest rewriting more than the memory buffer holds
 * copies its old chunks aside instead of waiting for the store.
 *
 * The file is made with O_TMPFILE: it has no name, so a SIGKILL or a
 * power cut leaves nothing to clean up. Where the file system has no
 * O_TMPFILE (FUSE file systems), it is spill.tmp in the cache directory,
 * removed at close, truncated by the next open after a kill, removed
 * with the cache at detach: some of those cannot even truncate a file
 * once unlinked.
 * Its content is scratch, like the memory buffer's: the state files
 * record only that a chunk was copied aside (ST_COPIED), and recovery
 * counts such untaken chunks as lost, failing that version; their data
 * is in the mirror file, dirty, and the next checkpoint carries it.
 *
 * Copies go through copy_file_range: on a file system with reflinks
 * (XFS, btrfs) the kernel may share the mirror file's blocks instead of
 * copying them; on ext4 it copies page cache to page cache, never
 * through user space. On XFS and btrfs the copy goes by hand instead:
 * a shared block would need its room later, when the guest's write
 * breaks the sharing, and that write would fail (ENOSPC) where a
 * copy-aside can wait. The file is sparse and capped by the budget it
 * was opened with; taken slots are punched out, so its disk use is the
 * copies waiting for the store, not their high-water mark.
 *
 * The spill leaves spill_reserve bytes free on its file system: the
 * agent's own durable writes (the persister's journal, meta.json, the
 * flush record) and the other images' caches need them. A copy that
 * would go below it, or that meets ENOSPC or EDQUOT, takes no slot: the
 * slot goes back, spill slots are left alone for a moment
 * (spill_pause), and writers wait for the store as they do when memory
 * slots run out; slots are used again once there is room.
 *
 * Copyright BlobCR for OpenStack developers. Apache-2.0.
 */

#define _GNU_SOURCE
#include "core_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define XFS_MAGIC 0x58465342
#define BTRFS_MAGIC 0x9123683E
#define SPILL_PAUSE_NS (200 * 1000 * 1000LL)

static off_t
slot_offset(const MirrorCore *m, int64_t slot)
{
    return (off_t)(slot - m->cow_slots) * m->chunk_size;
}

int
spill_open(MirrorCore *m, const char *dir, int64_t spill_chunks,
           char *path, size_t path_len)
{
    int fd;
    m->spill_fd = -1;
    if (spill_chunks <= 0)
        return 0;
    snprintf(path, path_len, "%s", dir);
    fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR ||
                   errno == EINVAL)) {
        snprintf(path, path_len, "%s/spill.tmp", dir);
        fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd >= 0 && !(m->spill_name = strdup(path))) {
            close(fd);
            unlink(path);
            return ENOMEM;
        }
    }
    if (fd < 0)
        return errno;
    m->spill_fd = fd;
    {
        struct statfs fs;
        m->spill_by_hand = fstatfs(fd, &fs) == 0 &&
            ((unsigned long)fs.f_type == XFS_MAGIC ||
             (unsigned long)fs.f_type == BTRFS_MAGIC);
    }
    if (ftruncate(fd, (off_t)(spill_chunks * m->chunk_size)) != 0) {
        int e = errno;
        spill_release(m);
        return e;
    }
    return 0;
}

void
spill_release(MirrorCore *m)
{
    if (m->spill_fd >= 0)
        close(m->spill_fd);
    m->spill_fd = -1;
    if (m->spill_name)
        unlink(m->spill_name);
    free(m->spill_name);
    m->spill_name = NULL;
}

/* Copy chunk c of the mirror file into spill slot; unlocked. */
int
spill_copy_in(MirrorCore *m, int64_t c, int64_t slot, char *scratch)
{
    size_t len = (size_t)mc_chunk_len(m, c), done = 0;
    loff_t from = (loff_t)c * m->chunk_size, to = slot_offset(m, slot);
    int err;
    if (m->spill_reserve > 0) {
        struct statvfs fs;
        if (fstatvfs(m->spill_fd, &fs) == 0 &&
            (int64_t)fs.f_bavail * (int64_t)fs.f_frsize <
            m->spill_reserve + (int64_t)len)
            return ENOSPC;          /* the reserve is not the spill's */
    }
    while (!m->spill_by_hand && done < len) {
        ssize_t n = copy_file_range(m->data_fd, &from, m->spill_fd, &to,
                                    len - done, 0);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n == 0)
            return EIO;          /* the mirror file is shorter: a bug */
        if (errno == EINTR)
            continue;
        if (errno != EXDEV && errno != EINVAL && errno != ENOSYS &&
            errno != EOPNOTSUPP)
            return errno;
        break;                   /* not offered here: copy by hand */
    }
    if (done == len)
        return 0;
    {
        char *tmp = scratch ? scratch : malloc((size_t)m->chunk_size);
        if (!tmp)
            return ENOMEM;
        err = pread_full(m->data_fd, tmp, len - done, (off_t)from);
        if (!err)
            err = pwrite_full(m->spill_fd, tmp, len - done, (off_t)to);
        if (tmp != scratch)
            free(tmp);
    }
    return err;
}

/* Read spill slot (chunk c's copy) into buf; unlocked. */
int
spill_read(MirrorCore *m, int64_t c, int64_t slot, char *buf)
{
    return pread_full(m->spill_fd, buf, (size_t)mc_chunk_len(m, c),
                      slot_offset(m, slot));
}

/* The copy in slot is no longer needed: give its blocks back (lock
 * held; a hint, a failure only keeps them until reused). */
void
spill_punch(MirrorCore *m, int64_t slot)
{
    (void)fallocate(m->spill_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                    slot_offset(m, slot), (off_t)m->chunk_size);
}

int64_t
monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Lock held. */
int
spill_paused(MirrorCore *m)
{
    return m->spill_paused_ns && monotonic_ns() < m->spill_paused_ns;
}

/* Lock held: its file system is full; no spill slot for a moment. */
void
spill_pause(MirrorCore *m)
{
    m->spill_paused_ns = monotonic_ns() + SPILL_PAUSE_NS;
}

void
mc_set_spill_reserve(MirrorCore *m, int64_t bytes)
{
    pthread_mutex_lock(&m->lock);
    m->spill_reserve = bytes > 0 ? bytes : 0;
    pthread_mutex_unlock(&m->lock);
}

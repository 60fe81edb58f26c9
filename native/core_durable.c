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
 * Flushes as durability points, and the cache a power loss leaves (see
 * core.c for the design).
 *
 * state.bin and gens.bin are MAP_SHARED and never synced: they survive a
 * SIGKILL (the page cache keeps them) but not a power loss, after which
 * any subset of their pages and of the mirror file's may have reached
 * the disk. A guest's flush (FUSE fsync, QEMU's flushes with
 * cache=none) therefore writes a separate record, durable.bin, in this
 * order:
 *
 *   1. under the lock, copy which chunks the mirror file (or, live-cow,
 *      the redirect file) holds: every write and install acknowledged
 *      before the flush has already set its chunk's bit;
 *   2. fdatasync the mirror files: what those chunks hold is on disk;
 *   3. only if the copy differs from the last record: write it, with a
 *      sequence number and a CRC, into the older of two slots, and
 *      fdatasync it. The newer slot stays whole while the older one may
 *      be torn.
 *
 * A flush that made no chunk present costs one fdatasync, as on a plain
 * file. Flushes are serialized (flush_lock), so records are written in
 * order; none holds the mirror's lock across I/O.
 *
 * After a power loss (mc_recover_power_loss, before mc_open), the newest
 * whole record is the truth: its chunks are present (a redirected
 * chunk's content folded back into the mirror file), every other chunk
 * is absent (fetched again from the repository: the agent reads it
 * from the newest stable version, cache.py), and every present
 * chunk is dirty. The latter is conservative: a write after the last
 * flush may have reached the disk on a chunk the record has clean, so
 * the next checkpoint persists every cached chunk once. Generations in
 * flight are dropped: their copies aside were in memory. A cache whose
 * two slots are both torn, or that has no record, is refused.
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
#include <unistd.h>

#define D_MAGIC "BCD1"
#define D_HEADER 32             /* magic, crc, seq, nchunks, chunk_size */
#define D_RECORDED (ST_PRESENT | ST_REDIRECT)

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void
crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

static uint32_t
crc32_of(uint32_t crc, const uint8_t *p, size_t n)
{
    pthread_once(&crc_once, crc_init);
    crc = ~crc;
    while (n--)
        crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

static int
sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), err = 0;
    if (fd < 0)
        return errno;
    if (fsync(fd) != 0)
        err = errno;
    close(fd);
    return err;
}

static size_t
slot_len(int64_t nchunks)
{
    return ((size_t)(D_HEADER + nchunks) + 4095) & ~(size_t)4095;
}

static uint32_t
record_crc(const uint8_t *slot, int64_t nchunks)
{
    return crc32_of(0, slot + 8, (size_t)(D_HEADER - 8 + nchunks));
}

/* The newest whole record of fd into body (nchunks bytes): its sequence
 * number, or 0 if neither slot is whole. */
static uint64_t
read_record(int fd, int64_t nchunks, int64_t chunk_size, uint8_t *body)
{
    size_t len = slot_len(nchunks);
    uint8_t *slot = malloc(len);
    uint64_t best = 0;
    if (!slot)
        return 0;
    for (int k = 0; k < 2; k++) {
        uint64_t seq, n, cs;
        uint32_t crc;
        if (pread_full(fd, (char *)slot, len, (off_t)(k * len)) != 0)
            continue;
        memcpy(&crc, slot + 4, 4);
        memcpy(&seq, slot + 8, 8);
        memcpy(&n, slot + 16, 8);
        memcpy(&cs, slot + 24, 8);
        if (memcmp(slot, D_MAGIC, 4) != 0 || n != (uint64_t)nchunks ||
            cs != (uint64_t)chunk_size || seq <= best ||
            crc != record_crc(slot, nchunks))
            continue;
        best = seq;
        memcpy(body, slot + D_HEADER, (size_t)nchunks);
    }
    free(slot);
    return best;
}

static int
write_record(int fd, int64_t nchunks, int64_t chunk_size, uint64_t seq,
             const uint8_t *body)
{
    size_t len = slot_len(nchunks);
    uint8_t *slot = calloc(1, len);
    uint64_t n = (uint64_t)nchunks, cs = (uint64_t)chunk_size;
    uint32_t crc;
    int err;
    if (!slot)
        return ENOMEM;
    memcpy(slot, D_MAGIC, 4);
    memcpy(slot + 8, &seq, 8);
    memcpy(slot + 16, &n, 8);
    memcpy(slot + 24, &cs, 8);
    memcpy(slot + D_HEADER, body, (size_t)nchunks);
    crc = record_crc(slot, nchunks);
    memcpy(slot + 4, &crc, 4);
    MC_CRASH_POINT("durable_record");
    err = pwrite_full(fd, (char *)slot, len, (off_t)((seq & 1) * len));
    if (!err && fdatasync(fd) != 0)
        err = errno;
    free(slot);
    return err;
}

int
durable_open(MirrorCore *m, const char *dir, char *path, size_t path_len)
{
    int err;
    snprintf(path, path_len, "%s/durable.bin", dir);
    m->durable_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (m->durable_fd < 0)
        return errno;
    m->durable_last = calloc((size_t)m->nchunks, 1);
    m->durable_next = calloc((size_t)m->nchunks, 1);
    if (!m->durable_last || !m->durable_next)
        return ENOMEM;
    /* Both slots' blocks now: a flush on a full file system then only
     * overwrites (the reserve is not a promise every file system keeps
     * for a file's first write). Where fallocate is not offered, the
     * first two records allocate them. */
    (void)posix_fallocate(m->durable_fd, 0, (off_t)(2 * slot_len(m->nchunks)));
    m->durable_seq = read_record(m->durable_fd, m->nchunks, m->chunk_size,
                                 m->durable_last);
    if (m->durable_seq == 0) {
        /* A new cache (or one from before records): the first record is
         * written now, so that a cache of this release always has one. */
        for (int64_t c = 0; c < m->nchunks; c++)
            m->durable_last[c] = m->state[c] & D_RECORDED;
        if (fdatasync(m->data_fd) != 0 || fdatasync(m->redirect_fd) != 0)
            return errno;
        m->durable_seq = 1;
        if ((err = write_record(m->durable_fd, m->nchunks, m->chunk_size, 1,
                                m->durable_last)))
            return err;
        return sync_dir(dir);
    }
    return 0;
}

void
durable_release(MirrorCore *m)
{
    if (m->durable_fd >= 0)
        close(m->durable_fd);
    m->durable_fd = -1;
    free(m->durable_last);
    free(m->durable_next);
    m->durable_last = m->durable_next = NULL;
}

int
mc_flush(MirrorCore *m, int datasync)
{
    int err = 0, changed;
    pthread_mutex_lock(&m->flush_lock);
    pthread_mutex_lock(&m->lock);
    if (!m->state) {
        pthread_mutex_unlock(&m->lock);
        pthread_mutex_unlock(&m->flush_lock);
        return EBADF;
    }
    for (int64_t c = 0; c < m->nchunks; c++) {
        uint8_t s = m->state[c];
        /* A redirect being filled is read from the mirror file still. */
        if (s & ST_FILLING)
            s &= (uint8_t)~ST_REDIRECT;
        m->durable_next[c] = s & D_RECORDED;
    }
    m->st.flushes++;
    pthread_mutex_unlock(&m->lock);
    changed = memcmp(m->durable_next, m->durable_last,
                     (size_t)m->nchunks) != 0;
    if ((datasync ? fdatasync(m->data_fd) : fsync(m->data_fd)) != 0)
        err = errno;
    if (!err && m->mode == MODE_LIVE_COW && fdatasync(m->redirect_fd) != 0)
        err = errno;
    if (!err && changed) {
        err = write_record(m->durable_fd, m->nchunks, m->chunk_size,
                           m->durable_seq + 1, m->durable_next);
        if (!err) {
            uint8_t *t = m->durable_last;
            m->durable_last = m->durable_next;
            m->durable_next = t;
            m->durable_seq++;
            pthread_mutex_lock(&m->lock);
            m->st.flush_records++;
            pthread_mutex_unlock(&m->lock);
        }
    }
    pthread_mutex_unlock(&m->flush_lock);
    return err;
}

int
mc_recover_power_loss(const char *dir, int64_t size, int64_t chunk_size,
                      int64_t *present, char *path, size_t path_len)
{
    int64_t nchunks = (size + chunk_size - 1) / chunk_size;
    int fd = -1, data = -1, redirect = -1, err = 0;
    uint8_t *body = calloc((size_t)nchunks, 1), *state = NULL;
    char *buf = malloc((size_t)chunk_size);

    *present = 0;
    path[0] = 0;
    if (!body || !buf) {
        err = ENOMEM;
        goto out;
    }
    snprintf(path, path_len, "%s/durable.bin", dir);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        err = errno;
        goto out;
    }
    if (read_record(fd, nchunks, chunk_size, body) == 0) {
        err = EBADMSG;                  /* both slots torn */
        goto out;
    }
    snprintf(path, path_len, "%s/data.raw", dir);
    if ((data = open(path, O_RDWR | O_CLOEXEC)) < 0) {
        err = errno;
        goto out;
    }
    snprintf(path, path_len, "%s/redirect.raw", dir);
    redirect = open(path, O_RDONLY | O_CLOEXEC);
    state = calloc((size_t)nchunks, 1);
    if (!state) {
        err = ENOMEM;
        goto out;
    }
    for (int64_t c = 0; c < nchunks; c++) {
        size_t len = (size_t)(c == nchunks - 1
                              ? size - c * chunk_size : chunk_size);
        if (!(body[c] & ST_PRESENT))
            continue;
        if (body[c] & ST_REDIRECT) {
            snprintf(path, path_len, "%s/redirect.raw", dir);
            if (redirect < 0) {
                err = ENOENT;
                goto out;
            }
            if ((err = pread_full(redirect, buf, len, c * chunk_size)) ||
                (err = pwrite_full(data, buf, len, c * chunk_size)))
                goto out;
        }
        state[c] = ST_PRESENT | ST_DIRTY;
        (*present)++;
    }
    snprintf(path, path_len, "%s/data.raw", dir);
    if (fdatasync(data) != 0) {
        err = errno;
        goto out;
    }
    /* The new state, whole and synced, before the generations go: a
     * power loss during this recovery leaves it to be run again. */
    snprintf(path, path_len, "%s/state.bin.recovered", dir);
    {
        int sfd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        char final[4096];
        if (sfd < 0) {
            err = errno;
            goto out;
        }
        err = pwrite_full(sfd, (char *)state, (size_t)nchunks, 0);
        if (!err && fsync(sfd) != 0)
            err = errno;
        close(sfd);
        if (err)
            goto out;
        snprintf(final, sizeof final, "%s/state.bin", dir);
        if (rename(path, final) != 0 || (errno = sync_dir(dir)) != 0) {
            err = errno;
            goto out;
        }
    }
    snprintf(path, path_len, "%s/gens.bin", dir);
    if (unlink(path) != 0 && errno != ENOENT) {
        err = errno;
        goto out;
    }
    /* Every write flushed before the loss is in the write log already;
     * the recovered chunks are dirty, not owed to it (core_log.c). */
    if ((err = log_reset_empty(dir, path, path_len)))
        goto out;
    path[0] = 0;
out:
    if (fd >= 0) close(fd);
    if (data >= 0) close(data);
    if (redirect >= 0) close(redirect);
    free(body); free(state); free(buf);
    return err;
}

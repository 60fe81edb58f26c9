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
 * The write log's map: which 4 KiB blocks the guest wrote since the
 * last entry of the image's write-ahead log (mirror/writelog.py), so
 * that a flush of a `cluster` volume sends those blocks, and only
 * those, to the cluster before it returns.
 *
 * log.bin holds a header and two bitmaps, MAP_SHARED like state.bin
 * (they survive a SIGKILL of the agent, not a power loss):
 *
 *   pending   blocks written since the last cut: a write sets its
 *             blocks' bits once its data is in the mirror file, before
 *             it is acknowledged, under the core's lock;
 *   cut       blocks of the entry being appended: mc_log_cut moves
 *             pending into it (pending is then empty), mc_log_done
 *             clears it once the entry is in the cluster, mc_log_undo
 *             moves it back into pending (the append failed).
 *
 * A cut whose entry never made it (the agent was killed mid-append) is
 * moved back into pending when the map is opened again, so a write
 * acknowledged before any flush is in the log once a later flush
 * returns. A map that is new, torn or of another size marks every block
 * of every dirty chunk (written since the last checkpoint): more than
 * needed, never less. After a power loss (mc_recover_power_loss) the
 * map starts empty: what the guest flushed before it is in the log
 * already, what it wrote unflushed is not owed.
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
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define L_MAGIC "BCL1"
#define L_EMPTY "BCL0"              /* a header alone: start empty */
#define L_HEADER 16                 /* magic, pad, nblocks */

static int64_t
nblocks_of(const MirrorCore *m)
{
    return (m->size + MC_LOG_BLOCK - 1) / MC_LOG_BLOCK;
}

static size_t
words_of(int64_t nblocks)
{
    return (size_t)((nblocks + 63) / 64);
}

static void
mark_range(uint64_t *bits, long long off, long long len)
{
    int64_t b = off / MC_LOG_BLOCK, e = (off + len - 1) / MC_LOG_BLOCK;
    for (; b <= e; b++)
        bits[b >> 6] |= 1ULL << (b & 63);
}

int
log_open(MirrorCore *m, const char *dir, char *path, size_t path_len)
{
    struct stat st;
    int64_t nblocks = nblocks_of(m);
    size_t words = words_of(nblocks);
    size_t want = L_HEADER + 2 * words * sizeof(uint64_t);
    int fd, fresh, fresh_empty, err;

    snprintf(path, path_len, "%s/log.bin", dir);
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return errno;
    if (fstat(fd, &st) != 0)
        goto oserror;
    fresh = (size_t)st.st_size != want;
    /* Left by a power loss's recovery: start empty. */
    fresh_empty = st.st_size == L_HEADER && pread(fd, path, 4, 0) == 4 &&
        memcmp(path, L_EMPTY, 4) == 0;
    snprintf(path, path_len, "%s/log.bin", dir);
    if (fresh && (ftruncate(fd, 0) != 0 || ftruncate(fd, (off_t)want) != 0))
        goto oserror;
    m->lmap = mmap(NULL, want, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m->lmap == MAP_FAILED) {
        m->lmap = NULL;
        goto oserror;
    }
    close(fd);
    m->lmap_len = want;
    m->log_words = words;
    m->log_pending = (uint64_t *)(m->lmap + L_HEADER);
    m->log_cut = m->log_pending + words;
    if (fresh || memcmp(m->lmap, L_MAGIC, 4) != 0 ||
        memcmp(m->lmap + 8, &nblocks, 8) != 0) {
        memset(m->lmap, 0, want);
        if (!fresh_empty) {
            for (int64_t c = 0; c < m->nchunks; c++)
                if (m->state[c] & ST_DIRTY)
                    mark_range(m->log_pending, c * m->chunk_size,
                               mc_chunk_len(m, c));
        }
        memcpy(m->lmap + 8, &nblocks, 8);
        memcpy(m->lmap, L_MAGIC, 4);
    }
    /* A cut left by a killed append: owed again. */
    for (size_t w = 0; w < words; w++) {
        m->log_pending[w] |= m->log_cut[w];
        m->log_cut[w] = 0;
    }
    return 0;
oserror:
    err = errno ? errno : EIO;
    close(fd);
    return err;
}

void
log_release(MirrorCore *m)
{
    if (m->lmap)
        munmap(m->lmap, m->lmap_len);
    m->lmap = NULL;
    m->log_pending = m->log_cut = NULL;
}

void
log_mark(MirrorCore *m, long long off, long long len)
{
    if (m->lmap && len > 0)
        mark_range(m->log_pending, off, len);
}

int
mc_log_cut(MirrorCore *m)
{
    pthread_mutex_lock(&m->lock);
    if (!m->lmap) {
        pthread_mutex_unlock(&m->lock);
        return EBADF;
    }
    for (size_t w = 0; w < m->log_words; w++) {
        m->log_cut[w] |= m->log_pending[w];
        m->log_pending[w] = 0;
    }
    pthread_mutex_unlock(&m->lock);
    return 0;
}

int64_t
mc_log_extents(MirrorCore *m, int64_t *offs, int64_t *lens, int64_t max,
               int64_t *blocks)
{
    int64_t n = 0, nblocks = nblocks_of(m), start = -1;
    *blocks = 0;
    if (!m->lmap)
        return 0;
    /* Runs of set bits, the last block cut to the image's size. Only
     * the flushing thread changes the cut until mc_log_done. */
    for (int64_t b = 0; b <= nblocks; b++) {
        int set;
        if (b < nblocks && !(b & 63) && start < 0 && !m->log_cut[b >> 6]) {
            b += 63;
            continue;
        }
        set = b < nblocks && (m->log_cut[b >> 6] >> (b & 63) & 1);
        if (set) {
            (*blocks)++;
            if (start < 0)
                start = b;
        } else if (start >= 0) {
            long long off = start * MC_LOG_BLOCK;
            long long end = b * MC_LOG_BLOCK;
            if (end > m->size)
                end = m->size;
            if (n < max) {
                offs[n] = off;
                lens[n] = end - off;
            }
            n++;
            start = -1;
        }
    }
    return n;
}

void
mc_log_done(MirrorCore *m, int appended)
{
    pthread_mutex_lock(&m->lock);
    if (m->lmap) {
        for (size_t w = 0; w < m->log_words; w++) {
            if (!appended)
                m->log_pending[w] |= m->log_cut[w];
            m->log_cut[w] = 0;
        }
    }
    pthread_mutex_unlock(&m->lock);
}

int
log_reset_empty(const char *dir, char *path, size_t path_len)
{
    char header[L_HEADER] = L_EMPTY;
    int fd, err = 0;
    snprintf(path, path_len, "%s/log.bin", dir);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return errno == ENOENT ? 0 : errno;
    if (pwrite_full(fd, header, sizeof header, 0) != 0 || fsync(fd) != 0)
        err = errno ? errno : EIO;
    close(fd);
    return err;
}

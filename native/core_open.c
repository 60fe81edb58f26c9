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
 * The mirror core's construction (see core.c for the design): the mirror
 * file and the state files (state.bin, gens.bin) opened or created, a
 * header that does not match refused, and the state an agent's restart
 * finds brought back to what recovery reads.
 *
 * Invariant: nothing is reset that a crash recovery still needs; the
 * generation ring counts only what set_ring recorded.
 *
 * Copyright BlobCR for OpenStack developers. Apache-2.0.
 */

#define _GNU_SOURCE
#include "core_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- construction ------------------------------------------------- */

void
mc_init(MirrorCore *m)
{
    memset(m, 0, sizeof *m);
    m->data_fd = m->redirect_fd = m->precopy_fd = m->durable_fd = -1;
    m->spill_fd = -1;
    pthread_mutex_init(&m->lock, NULL);
    pthread_mutex_init(&m->flush_lock, NULL);
    pthread_cond_init(&m->cond, NULL);
}

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
release_files(MirrorCore *m)
{
    if (m->state && m->state != MAP_FAILED)
        munmap(m->state, m->state_len);
    m->state = NULL;
    if (m->gmap && m->gmap != MAP_FAILED)
        munmap(m->gmap, m->gmap_len);
    m->gmap = m->gens = NULL;
    if (m->data_fd >= 0) close(m->data_fd);
    if (m->redirect_fd >= 0) close(m->redirect_fd);
    if (m->precopy_fd >= 0) close(m->precopy_fd);
    m->data_fd = m->redirect_fd = m->precopy_fd = -1;
    durable_release(m);
    log_release(m);
    spill_release(m);
    free(m->cow); free(m->slot_of); free(m->free_slots);
    free(m->urgent); free(m->in_urgent);
    for (int g = 0; g < MC_MAX_GENS; g++) {
        free(m->order[g]); free(m->copied[g]);
        m->order[g] = m->copied[g] = NULL;
    }
    free(m->first_write); free(m->first_read); free(m->last_write);
    free(m->hist); free(m->hist_prev); free(m->wflight);
    m->cow = NULL; m->slot_of = NULL; m->free_slots = NULL;
    m->urgent = NULL;
    m->in_urgent = NULL;
    m->first_write = m->first_read = m->wflight = m->last_write = NULL;
    m->hist = m->hist_prev = NULL;
}

int
mc_open(MirrorCore *m, const char *dir, int64_t size, int64_t chunk_size,
        int mode, int64_t cow_chunks, int64_t spill_chunks, int adaptive,
        char *path, size_t path_len)
{
    struct stat st;
    int err;

    if (m->state)
        return EBUSY;
    if (size <= 0 || chunk_size <= 0 || cow_chunks < 1 || mode < 0 ||
        mode > MODE_OFFLINE)
        return EINVAL;
    m->mode = mode;
    m->adaptive = adaptive;
    m->size = size;
    m->chunk_size = chunk_size;
    m->nchunks = (size + chunk_size - 1) / chunk_size;
    memset(&m->st, 0, sizeof m->st);
    m->writers = m->committing = m->hold = m->taking = 0;
    m->slot_waiters = 0;
    m->commits = 0;
    m->max_gens = mode == MODE_SELECTIVE ? MC_MAX_GENS : 1;
    m->head = m->ngens = m->parked = 0;
    for (int g = 0; g < MC_MAX_GENS; g++)
        m->order_len[g] = m->order_pos[g] = m->left[g] = m->ncopied[g] = 0;
    m->scheduled = 0;
    m->nurgent = 0;
    m->seq = m->read_seq = m->wclock = 0;

    snprintf(path, path_len, "%s/data.raw", dir);
    if ((m->data_fd = open_file(path, size)) < 0)
        goto oserror;
    snprintf(path, path_len, "%s/redirect.raw", dir);
    if ((m->redirect_fd = open_file(path, size)) < 0)
        goto oserror;
    snprintf(path, path_len, "%s/precopy.raw", dir);
    if ((m->precopy_fd = open_file(path, size)) < 0)
        goto oserror;

    /* The state file survives a SIGKILL through the page cache. */
    snprintf(path, path_len, "%s/state.bin", dir);
    {
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (fd < 0)
            goto oserror;
        if (fstat(fd, &st) != 0 ||
            (st.st_size != m->nchunks && ftruncate(fd, m->nchunks) != 0)) {
            err = errno;
            close(fd);
            errno = err;
            goto oserror;
        }
        m->state_len = (size_t)m->nchunks;
        m->state = mmap(NULL, m->state_len, PROT_READ | PROT_WRITE,
                        MAP_SHARED, fd, 0);
        close(fd);
        if (m->state == MAP_FAILED) {
            m->state = NULL;
            goto oserror;
        }
    }
    /* The generations in flight survive the same way. */
    snprintf(path, path_len, "%s/gens.bin", dir);
    {
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        off_t want = (off_t)(G_HEADER + m->nchunks);
        int fresh;
        if (fd < 0)
            goto oserror;
        if (fstat(fd, &st) != 0) {
            err = errno;
            close(fd);
            errno = err;
            goto oserror;
        }
        fresh = st.st_size != want;
        if (fresh && (ftruncate(fd, 0) != 0 || ftruncate(fd, want) != 0)) {
            err = errno;
            close(fd);
            errno = err;
            goto oserror;
        }
        m->gmap_len = (size_t)want;
        m->gmap = mmap(NULL, m->gmap_len, PROT_READ | PROT_WRITE,
                       MAP_SHARED, fd, 0);
        close(fd);
        if (m->gmap == MAP_FAILED) {
            m->gmap = NULL;
            goto oserror;
        }
        m->gens = m->gmap + G_HEADER;
        if (fresh || memcmp(m->gmap, "BCG1", 4) != 0 ||
            m->gmap[4] >= MC_MAX_GENS || m->gmap[5] > MC_MAX_GENS) {
            /* New, or a cache from before generations: its one snapshot
             * in flight (if any) becomes generation 0. */
            int any = 0;
            memset(m->gmap, 0, m->gmap_len);
            for (int64_t c = 0; c < m->nchunks; c++) {
                if (m->state[c] & ST_SNAP)
                    PUT_GENS(m, c, m->gens[c] | G_MEMBER(0));
                if (m->state[c] & ST_SCHED)
                    PUT_GENS(m, c, m->gens[c] | G_MEMBER(0) | G_UNTAKEN(0));
                any |= m->gens[c] != 0;
            }
            memcpy(m->gmap, "BCG1", 4);
            set_ring(m, 0, any);
        }
        m->head = m->gmap[4];
        m->parked = m->gmap[5];
    }
    m->cow_slots = cow_chunks;
    m->spill_slots = spill_chunks > 0 ? spill_chunks : 0;
    m->cow = malloc((size_t)(cow_chunks * chunk_size));
    m->slot_of = malloc(sizeof(int32_t) * (size_t)m->nchunks * MC_MAX_GENS);
    m->free_slots = malloc(sizeof(int64_t) *
                           (size_t)(cow_chunks + m->spill_slots));
    m->urgent = malloc(sizeof(int64_t) * (size_t)m->nchunks);
    m->in_urgent = calloc((size_t)m->nchunks, 1);
    for (int g = 0; g < MC_MAX_GENS; g++) {
        m->order[g] = malloc(sizeof(int64_t) * (size_t)m->nchunks);
        m->copied[g] = malloc(sizeof(int64_t) * (size_t)m->nchunks);
        if (!m->order[g] || !m->copied[g]) {
            release_files(m);
            path[0] = 0;
            return ENOMEM;
        }
    }
    m->first_write = calloc((size_t)m->nchunks, sizeof(uint32_t));
    m->last_write = calloc((size_t)m->nchunks, sizeof(uint32_t));
    m->first_read = calloc((size_t)m->nchunks, sizeof(uint32_t));
    m->wflight = calloc((size_t)m->nchunks, sizeof(uint32_t));
    m->hist = calloc((size_t)m->nchunks, 1);
    m->hist_prev = calloc((size_t)m->nchunks, 1);
    if (!m->cow || !m->slot_of || !m->free_slots ||
        !m->urgent || !m->in_urgent || !m->first_write || !m->last_write ||
        !m->first_read || !m->wflight || !m->hist || !m->hist_prev) {
        release_files(m);
        path[0] = 0;
        return ENOMEM;
    }
    for (int64_t c = 0; c < m->nchunks; c++) {
        uint8_t ring = 0;
        for (int g = 0; g < MC_MAX_GENS; g++)
            m->slot_of[c * MC_MAX_GENS + g] = -1;
        /* transient: whoever set them is gone */
        PUT_STATE(m, c, m->state[c] & ~(ST_PENDING | ST_FILLING));
        /* Bits of a generation outside the persisted ring: a COMMIT cut
         * short before it counted it. Its chunks are dirty again. */
        for (int k = 0; k < m->parked; k++)
            ring |= G_MEMBER(gen_at(m, k)) | G_UNTAKEN(gen_at(m, k));
        if (m->gens[c] & (uint8_t)~ring & G_MEMBERS)
            PUT_STATE(m, c, m->state[c] | ST_DIRTY);
        PUT_GENS(m, c, m->gens[c] & ring);
        sync_bits(m, c);
    }
    /* A stack: the spill file's slots at the bottom, so that memory
     * ones are used first. */
    m->nfree = 0;
    for (int64_t s = cow_chunks + m->spill_slots - 1; s >= 0; s--)
        m->free_slots[m->nfree++] = s;
    if ((err = spill_open(m, dir, m->spill_slots, path, path_len)) != 0) {
        release_files(m);
        return err;
    }
    if ((err = durable_open(m, dir, path, path_len)) != 0) {
        release_files(m);
        return err;
    }
    if ((err = log_open(m, dir, path, path_len)) != 0) {
        release_files(m);
        return err;
    }
    return 0;
oserror:
    err = errno ? errno : EIO;
    release_files(m);
    return err;
}

void
mc_close(MirrorCore *m, int flush)
{
    if (flush && m->state)
        mc_flush(m, 1);
    pthread_mutex_lock(&m->lock);
    if (flush && m->state)
        msync(m->state, m->state_len, MS_SYNC);
    if (flush && m->gmap)
        msync(m->gmap, m->gmap_len, MS_SYNC);
    if (flush && m->data_fd >= 0)
        fsync(m->data_fd);
    release_files(m);
    pthread_mutex_unlock(&m->lock);
}

void
mc_destroy(MirrorCore *m)
{
    release_files(m);
    pthread_mutex_destroy(&m->lock);
    pthread_mutex_destroy(&m->flush_lock);
    pthread_cond_destroy(&m->cond);
}

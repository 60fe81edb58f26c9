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
 * The mirror core's I/O paths (see core.c for the design, "The cut"):
 * reads, writes and installs of repository content.
 *
 * Invariants: a write passes the gate, then prepares each chunk (copy
 * aside, wait PENDING, or wait for a buffer slot), then pwrites; a chunk
 * is marked dirty before its data lands; a write cut by a COMMIT while it
 * waited for a slot prepares every chunk again against the new
 * generation; an install never writes over a chunk a write holds in
 * flight.
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
#include <time.h>
#include <unistd.h>

/* ---- reads -------------------------------------------------------- */

int
mc_read(MirrorCore *m, char *buf, long long off, long long len,
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
    PAUSE(MC_AT_READ);
    if (!redirected)
        return pread_full(m->data_fd, buf, (size_t)len, off);
    /* Chunk by chunk: some live in the redirect file. */
    for (c = first; c <= last && !err; c++) {
        long long cs = c * m->chunk_size;
        long long s = off > cs ? off : cs;
        long long e = off + len < cs + mc_chunk_len(m, c) ?
            off + len : cs + mc_chunk_len(m, c);
        int fd;
        pthread_mutex_lock(&m->lock);
        fd = (m->state[c] & ST_REDIRECT) ? m->redirect_fd : m->data_fd;
        pthread_mutex_unlock(&m->lock);
        err = pread_full(fd, buf + (s - off), (size_t)(e - s), s);
    }
    return err;
}

/* ---- writes ------------------------------------------------------- */

/* A free buffer slot can be taken now: a memory one, or a spill one
 * while the spill is not paused (its file system was full a moment
 * ago). A memory slot under spill ones comes to the top. Lock held. */
static int
slot_ready(MirrorCore *m)
{
    if (m->nfree == 0)
        return 0;
    if (m->free_slots[m->nfree - 1] < m->cow_slots || !spill_paused(m))
        return 1;
    for (int64_t k = m->nfree - 2; k >= 0; k--) {
        if (m->free_slots[k] < m->cow_slots) {
            int64_t t = m->free_slots[k];
            m->free_slots[k] = m->free_slots[m->nfree - 1];
            m->free_slots[m->nfree - 1] = t;
            return 1;
        }
    }
    return 0;
}

int
pwrite_room(MirrorCore *m, int fd, const char *buf, size_t len, off_t off)
{
    const struct timespec pause = {0, 50 * 1000 * 1000};
    int err;
    /* The cache's file system is full (the mirror file is sparse): the
     * guest's write waits for room, as on a full thin pool, rather than
     * failing. The data is rewritten whole each time. */
    while ((err = pwrite_full(fd, buf, len, off)) == ENOSPC ||
           err == EDQUOT) {
        __atomic_add_fetch(&m->st.room_waits, 1, __ATOMIC_RELAXED);
        nanosleep(&pause, NULL);
    }
    return err;
}


/* Make chunk c safe to overwrite; lock held, may wait. whole: the write
 * covers the chunk; epoch: m->commits when the write passed the gate.
 * Returns 0, an errno, -1 when it would wait and nonblock is set, or
 * MC_CUT. A copy aside runs unlocked: a failed snapshot (snapshot_done)
 * may take the chunk out of the schedule meanwhile, so the copy is kept
 * only if the chunk is still scheduled after it. */
int
prepare_chunk(MirrorCore *m, int64_t c, int whole, int nonblock,
              char *scratch, uint32_t epoch)
{
    int waited = 0;
    for (;;) {
        uint8_t s = m->state[c];
        int g;
        if (s & ST_PENDING) {
            if (nonblock)
                return -1;
            m->st.waits++;
            m->hist[c] |= H_WAITED;
            pthread_cond_wait(&m->cond, &m->lock);
            continue;
        }
        /* The generation still reading the chunk from the mirror file:
         * the newest holding it, if not yet taken by it nor copied. */
        g = newest_of(m, c, m->ngens);
        if (g < 0 || !(m->gens[c] & G_UNTAKEN(g))) {
            if (!(s & ST_SCHED) && (m->hist[c] & H_TAKEN) &&
                !(m->hist[c] & H_AVOIDED)) {
                /* Persisted before this write came: a copy avoided. */
                m->hist[c] |= H_AVOIDED;
                m->st.avoided++;
            }
            return 0;
        }
        if (s & (ST_COPIED | ST_REDIRECT))
            return 0;
        if (m->mode == MODE_LIVE_COW && whole) {
            /* Nothing of the old content survives the write: redirect
             * without copying. Until the write is done the redirect file
             * holds no valid data for the chunk, so readers keep reading
             * the mirror file (FILLING, not REDIRECT) and other writers
             * and the persister wait (PENDING); mc_write ends both. */
            PUT_STATE(m, c, m->state[c] | ST_PENDING | ST_FILLING);
            m->st.redirects++;
            m->st.redirects_nocopy++;
            return 0;
        }
        if (m->mode == MODE_LIVE_COW) {
            int err;
            PUT_STATE(m, c, m->state[c] | ST_PENDING);
            pthread_mutex_unlock(&m->lock);
            err = copy_chunk(m, m->data_fd, m->redirect_fd, c, scratch);
            PAUSE(MC_AT_COPY);
            pthread_mutex_lock(&m->lock);
            PUT_STATE(m, c, m->state[c] & ~ST_PENDING);
            if (!err && !(m->gens[c] & G_UNTAKEN(g))) {
                m->st.copies_dropped++;   /* the mirror file is current */
            } else if (!err) {
                PUT_STATE(m, c, m->state[c] | ST_REDIRECT);
                m->st.redirects++;
            }
            pthread_cond_broadcast(&m->cond);
            return err;
        }
        /* selective-cow */
        if (!slot_ready(m)) {
            if (nonblock)
                return -1;
            if (!waited) {
                waited = 1;
                m->st.waits++;
                m->hist[c] |= H_WAITED;
            }
            if (g == m->head) {
                /* The oldest generation: its persister takes c next. A
                 * newer one waits for the slots the oldest frees. */
                if (!m->in_urgent[c])
                    m->st.urgent++;
                push_urgent(m, c);
            }
            /* Also wakes a COMMIT draining writers: it need not wait
             * for this one (the cut, above). */
            pthread_cond_broadcast(&m->cond);
            m->slot_waiters++;
            if (m->nfree) {
                /* Only spill slots, paused: look again once it ends. */
                struct timespec until;      /* the cond's clock */
                clock_gettime(CLOCK_REALTIME, &until);
                until.tv_nsec += 50 * 1000 * 1000;
                if (until.tv_nsec >= 1000000000L) {
                    until.tv_sec++;
                    until.tv_nsec -= 1000000000L;
                }
                pthread_cond_timedwait(&m->cond, &m->lock, &until);
            } else {
                pthread_cond_wait(&m->cond, &m->lock);
            }
            m->slot_waiters--;
            if (m->commits != epoch)
                return MC_CUT;      /* ordered after that COMMIT */
            continue;
        }
        {
            int64_t slot = m->free_slots[--m->nfree];
            int spill = slot >= m->cow_slots, err;
            PUT_STATE(m, c, m->state[c] | ST_PENDING);
            pthread_mutex_unlock(&m->lock);
            if (spill)
                err = spill_copy_in(m, c, slot, scratch);
            else
                err = pread_full(m->data_fd, m->cow + slot * m->chunk_size,
                                 (size_t)mc_chunk_len(m, c),
                                 (off_t)c * m->chunk_size);
            PAUSE(MC_AT_COPY);
            pthread_mutex_lock(&m->lock);
            PUT_STATE(m, c, m->state[c] & ~ST_PENDING);
            if (spill && (err == ENOSPC || err == EDQUOT)) {
                /* The file system is full (or down to the reserve):
                 * the slot goes back, spill slots rest a moment, and
                 * the write takes a memory slot or waits for the store,
                 * as with no spill file. Nothing was lost. */
                spill_punch(m, slot);
                m->free_slots[m->nfree++] = slot;
                spill_pause(m);
                m->st.spill_full++;
                pthread_cond_broadcast(&m->cond);
                continue;
            }
            /* No COMMIT while we copied (we are a writer in flight, not
             * waiting for a slot): g is still the newest holding c; only
             * a failure can have ended it. */
            if (err || !(m->gens[c] & G_UNTAKEN(g))) {
                /* An error, or the snapshot failed while we copied: the
                 * next COMMIT must not find this stale copy. */
                m->free_slots[m->nfree++] = slot;
                if (!err)
                    m->st.copies_dropped++;
            } else {
                m->slot_of[c * MC_MAX_GENS + g] = (int32_t)slot;
                PUT_STATE(m, c, m->state[c] | ST_COPIED);
                m->copied[g][m->ncopied[g]++] = c;
                m->st.cow_copies++;
                if (spill)
                    m->st.spilled++;
                if (g != gen_at(m, m->ngens - 1))
                    m->st.copies_older++;
                m->hist[c] |= H_COPIED;
            }
            pthread_cond_broadcast(&m->cond);
            return err;
        }
    }
}

/* Per chunk of the range, where its bytes go: 1 the redirect file. */
static int
ends_redirected(MirrorCore *m, int64_t c)
{
    return (m->state[c] & (ST_REDIRECT | ST_FILLING)) != 0;
}

/* Chunk c is about to be written (lock held, the write in flight: no
 * COMMIT can come before its data lands). A present chunk turns dirty
 * now, not after the pwrite: a kill in between must leave neither data
 * that no checkpoint carries nor a chunk that recovery would requeue
 * for a snapshot its new data then leaks into (mc_requeue trusts a
 * clean chunk). An error leaves it dirty: harmless, the next snapshot
 * reads it again. An absent chunk (a whole-chunk write) turns present
 * and dirty only once written: until then the repository holds its
 * content, and a dirty absent chunk would be persisted from a mirror
 * file that does not hold it. */
static void
mark_written(MirrorCore *m, int64_t c)
{
    if (m->state[c] & ST_PRESENT)
        PUT_STATE(m, c, m->state[c] | ST_DIRTY);
}

int
mc_write(MirrorCore *m, const char *buf, long long off, long long len,
         int nonblock, char *scratch, int64_t *missing, int64_t *nmissing,
         int *busy)
{
    int64_t first = off / m->chunk_size;
    int64_t last = (off + len - 1) / m->chunk_size, c, done;
    int err = 0, any_redirect = 0;
    uint32_t epoch;

    *nmissing = 0;
    *busy = 0;
    pthread_mutex_lock(&m->lock);
    for (c = first; c <= last; c++) {
        long long cs = c * m->chunk_size, ce = cs + mc_chunk_len(m, c);
        if (!(m->state[c] & ST_PRESENT) && !(off <= cs && off + len >= ce))
            missing[(*nmissing)++] = c;
    }
    if (*nmissing) {
        pthread_mutex_unlock(&m->lock);
        return 0;
    }
    /* COMMIT flips the state between writes, never inside one. */
gate:
    while (m->committing || m->hold) {
        if (nonblock) {
            pthread_mutex_unlock(&m->lock);
            *busy = 1;
            return 0;
        }
        pthread_cond_wait(&m->cond, &m->lock);
    }
    m->writers++;
    epoch = m->commits;
    /* missing[] now marks the chunks whose redirect this write fills
     * (FILLING: PENDING for everyone else). */
    for (c = first; c <= last; c++)
        missing[c - first] = 0;
again:
    for (done = first; done <= last; done++) {
        long long cs = done * m->chunk_size;
        long long ce = cs + mc_chunk_len(m, done);
        int r;
        if (missing[done - first])
            continue;
        r = prepare_chunk(m, done, off <= cs && off + len >= ce, nonblock,
                          scratch, epoch);
        if (r == MC_CUT) {
            /* After the cut: out of flight, through the gate again, and
             * every chunk prepared anew (selective-cow: no FILLING). */
            m->writers--;
            pthread_cond_broadcast(&m->cond);
            goto gate;
        }
        if (r == -1)
            *busy = 1;
        else
            err = r;
        if (r)
            break;
        if (m->state[done] & ST_FILLING)
            missing[done - first] = 1;
    }
    if (!*busy && !err) {
        /* A prepare that waited or copied let the persister in: it may
         * be folding back a chunk prepared before (live-cow, PENDING).
         * Write only once every chunk is safe at the same time. */
        for (c = first; c <= last; c++)
            if ((m->state[c] & ST_PENDING) && !missing[c - first])
                goto again;
    }
    if (*busy || err) {
        /* Give back the whole-chunk redirects this write started. */
        for (c = first; c <= last; c++)
            if (missing[c - first]) {
                PUT_STATE(m, c, m->state[c] & ~(ST_FILLING | ST_PENDING));
                m->st.redirects--;
                m->st.redirects_nocopy--;
            }
        goto out;
    }
    /* In flight until the data is written: an install waits rather than
     * overwrite it with older repository content (a whole-chunk write
     * makes an absent chunk present only once its pwrite is done), and
     * a redirect is not folded back under it. Where each chunk's bytes
     * go is decided now, under the lock. A present chunk is dirty from
     * now on (before its data lands, see mark_written). */
    for (c = first; c <= last; c++) {
        if (!m->first_write[c])
            m->first_write[c] = ++m->seq;
        m->last_write[c] = ++m->wclock;
        m->wflight[c]++;
        missing[c - first] = ends_redirected(m, c);
        any_redirect |= (int)missing[c - first];
        mark_written(m, c);
    }
    pthread_mutex_unlock(&m->lock);
    PAUSE(MC_AT_WRITE);
    if (!any_redirect) {
        err = pwrite_room(m, m->data_fd, buf, (size_t)len, off);
    } else {
        for (c = first; c <= last && !err; c++) {
            long long cs = c * m->chunk_size;
            long long s = off > cs ? off : cs;
            long long e = off + len < cs + mc_chunk_len(m, c) ?
                off + len : cs + mc_chunk_len(m, c);
            err = pwrite_room(m, missing[c - first] ? m->redirect_fd
                                                 : m->data_fd,
                              buf + (s - off), (size_t)(e - s), s);
        }
    }
    pthread_mutex_lock(&m->lock);
    for (c = first; c <= last; c++) {
        m->wflight[c]--;
        if (m->state[c] & ST_FILLING) {
            /* On an error the mirror file still holds the chunk's
             * current (snapshot) content: it stays unredirected. */
            PUT_STATE(m, c, (m->state[c] & ~(ST_FILLING | ST_PENDING)) |
                      (err ? 0 : ST_REDIRECT));
        }
        if (!err)
            PUT_STATE(m, c, m->state[c] | ST_PRESENT | ST_DIRTY);
    }
    /* Owed to the write log before the write is acknowledged. */
    if (!err)
        log_mark(m, off, len);
out:
    m->writers--;
    pthread_cond_broadcast(&m->cond);
    pthread_mutex_unlock(&m->lock);
    return err;
}

int
mc_install(MirrorCore *m, int64_t c, const char *data, int *installed)
{
    int err = 0, waited = 0;
    *installed = 0;
    pthread_mutex_lock(&m->lock);
    /* A write in flight on an absent chunk covers it whole and makes it
     * present when done: wait for it, then find the chunk present. */
    while ((m->state[c] & ST_PENDING) || m->wflight[c]) {
        if (m->wflight[c] && !waited) {
            waited = 1;
            m->st.install_waits++;
        }
        pthread_cond_wait(&m->cond, &m->lock);
    }
    if (!(m->state[c] & ST_PRESENT)) {
        /* a racing write waits for us */
        PUT_STATE(m, c, m->state[c] | ST_PENDING);
        pthread_mutex_unlock(&m->lock);
        PAUSE(MC_AT_INSTALL);
        err = pwrite_room(m, m->data_fd, data,
                          (size_t)mc_chunk_len(m, c),
                          (off_t)c * m->chunk_size);
        pthread_mutex_lock(&m->lock);
        PUT_STATE(m, c, m->state[c] & ~ST_PENDING);
        if (!err) {
            PUT_STATE(m, c, m->state[c] | ST_PRESENT);
            *installed = 1;
        }
        pthread_cond_broadcast(&m->cond);
    } else if (waited) {
        m->st.installs_skipped++;
    }
    pthread_mutex_unlock(&m->lock);
    return err;
}

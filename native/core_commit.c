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
 * The mirror core's generations: COMMIT, the persister's takes, and
 * snapshot_done (journal paper, Algorithms 1-4; see core.c).
 *
 * Invariants: a COMMIT's generation counts only once set_ring records it,
 * and ST_COPIED of its chunks goes only after that (forget_copies); the
 * oldest generation is taken first and ends first, so versions turn
 * stable in order; a chunk leaving a snapshot turns dirty before its
 * snapshot bits clear; live-cow folds a redirected chunk back only once
 * the chunk is taken.
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

/* ---- COMMIT and the persister -------------------------------------- */

/* Flush order (ai-ckpt Algorithm 4), as one sort key per chunk: the
 * class from last epoch's history, then the first write of this epoch
 * (never written sorts last), then the index. */
typedef struct { uint64_t key; int64_t c; } SortKey;

static int
compare_keys(const void *a, const void *b)
{
    const SortKey *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->c < y->c ? -1 : (x->c > y->c);
}

static int
flush_class(MirrorCore *m, int64_t c)
{
    uint8_t h = m->hist_prev[c];
    if (h & H_WAITED) return 0;
    if (h & H_COPIED) return 1;
    if (h & H_AVOIDED) return 2;
    return 3;
}

static void
order_schedule(MirrorCore *m, int64_t *order, int64_t n)
{
    SortKey *keys = malloc(sizeof(SortKey) * (size_t)n);
    if (!keys)
        return;                  /* index order: still a valid schedule */
    for (int64_t k = 0; k < n; k++) {
        int64_t c = order[k];
        keys[k].key = ((uint64_t)flush_class(m, c) << 32) |
                      (uint32_t)(m->first_write[c] - 1);
        keys[k].c = c;
    }
    qsort(keys, (size_t)n, sizeof(SortKey), compare_keys);
    for (int64_t k = 0; k < n; k++)
        order[k] = keys[k].c;
    free(keys);
}

/* Left over from snapshots that are no longer in flight (a crash whose
 * generations were given up without resume, a COMMIT cut short, or a
 * failed fold): a redirected chunk is folded home and every chunk of a
 * parked generation is written again, so that this COMMIT reads every
 * chunk's current content in place. Lock held, no writer in flight, no
 * generation live. */
static int
fold_leftovers(MirrorCore *m, char *scratch)
{
    for (int64_t c = 0; c < m->nchunks; c++) {
        uint8_t s = m->state[c];
        if (s & ST_REDIRECT) {
            int err = copy_chunk(m, m->redirect_fd, m->data_fd, c, scratch);
            if (err)
                return err;
            PUT_STATE(m, c, (s & ~ST_REDIRECT) | ST_DIRTY);
        }
        if (m->gens[c] || (m->state[c] & (ST_SNAP | ST_SCHED))) {
            /* Dirty first: a kill between the two leaves it dirty. */
            PUT_STATE(m, c, (m->state[c] &
                             ~(ST_SCHED | ST_SNAP | ST_COPIED)) | ST_DIRTY);
            PUT_GENS(m, c, 0);
        }
    }
    m->parked = 0;
    set_ring(m, m->head, 0);
    return 0;
}

/* The n chunks of the new generation g: the newest holding them is g,
 * which reads them in place, so ST_COPIED (an older generation's
 * content is in the buffer) no longer holds. Only once the ring counts
 * g: a kill before that leaves g out of the restarted ring, and an
 * older generation's recovery must still see that the mirror file no
 * longer holds its content (else it would persist newer data into
 * it). Lock held. */
static void
forget_copies(MirrorCore *m, int g, int64_t n)
{
    for (int64_t k = 0; k < n; k++) {
        int64_t c = m->order[g][k];
        PUT_STATE(m, c, m->state[c] & ~ST_COPIED);
    }
}

/* Why a COMMIT cannot start now (an MC_BUSY_*), or 0. Busy for a full
 * buffer: another generation would only add copies to a buffer the
 * persister has to drain first. Lock held. */
static int
commit_refusal(const MirrorCore *m)
{
    if (m->committing)
        return MC_BUSY_COMMIT;
    if (m->ngens >= m->max_gens)
        return MC_BUSY_GENS;
    if (m->ngens && m->mode == MODE_SELECTIVE && m->nfree == 0)
        return MC_BUSY_FULL;
    return 0;
}

static int64_t
now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

int
mc_commit(MirrorCore *m, int hold, int64_t *count, int *busy)
{
    int err = 0, g;
    int64_t n = 0;
    char *scratch = malloc((size_t)m->chunk_size);

    int64_t asked = now_ns(), locked, drained;

    *busy = 0;
    *count = 0;
    if (!scratch)
        return ENOMEM;
    pthread_mutex_lock(&m->lock);
    locked = now_ns();
    drained = locked;
    if ((*busy = commit_refusal(m))) {
        m->st.busy_gens += *busy == MC_BUSY_GENS;
        m->st.busy_full += *busy == MC_BUSY_FULL;
        goto out;
    }
    m->committing = 1;
    /* Drain the writes in flight but those waiting for a buffer slot:
     * they are cut (ordered after this snapshot; they start over when
     * they wake, seeing m->commits changed). The others never wait on
     * anything that waits for us, so the drain ends. */
    while (m->writers > m->slot_waiters)
        pthread_cond_wait(&m->cond, &m->lock);
    drained = now_ns();
    /* No writer in flight but slot waiters, which cannot run before we
     * are done (we keep the lock from here on): ngens cannot have grown
     * (only a COMMIT adds) and a failure waits for us; the oldest may
     * have ended (stable). */
    if (!m->ngens && (err = fold_leftovers(m, scratch)))
        goto done;
    g = gen_at(m, m->ngens);
    m->order_len[g] = m->order_pos[g] = m->ncopied[g] = 0;
    for (int64_t c = 0; c < m->nchunks; c++) {
        PUT_GENS(m, c, m->gens[c] & ~(G_MEMBER(g) | G_UNTAKEN(g)));
        if (m->state[c] & ST_DIRTY) {
            if (m->gens[c] & G_MEMBERS)
                m->st.multi_gen++;
            PUT_GENS(m, c, m->gens[c] | G_MEMBER(g) | G_UNTAKEN(g));
            /* The new generation reads it in place; older ones hold
             * their copies in the buffer (a write copied it first).
             * ST_COPIED stays until the ring counts g: see below. */
            PUT_STATE(m, c, (m->state[c] & ~ST_DIRTY) | ST_SCHED | ST_SNAP);
            m->order[g][n++] = c;
        }
    }
    /* The finished epoch becomes the history the order follows. */
    uint8_t *t = m->hist_prev;
    m->hist_prev = m->hist;
    m->hist = t;
    memset(m->hist, 0, m->state_len);
    if (m->adaptive && n > 1)
        order_schedule(m, m->order[g], n);
    memset(m->first_write, 0, sizeof(uint32_t) * m->state_len);
    m->seq = 0;
    m->order_len[g] = n;
    m->left[g] = n;
    if (!m->ngens)
        clear_urgent(m);
    if (m->mode == MODE_PRECOPY) {
        /* Copies under the lock: no writer can enter (committing). */
        for (int64_t k = 0; k < n && !err; k++) {
            int64_t c = m->order[g][k];
            err = FAULT(MC_AT_PRECOPY);
            if (!err)
                err = copy_chunk(m, m->data_fd, m->precopy_fd, c, scratch);
            if (!err)
                PUT_STATE(m, c, m->state[c] | ST_COPIED);
        }
        if (err) {
            /* Nothing stays scheduled without a persister: the chunks
             * are dirty again for the next COMMIT. */
            for (int64_t k = 0; k < n; k++) {
                int64_t c = m->order[g][k];
                PUT_STATE(m, c, (m->state[c] &
                                 ~(ST_SCHED | ST_SNAP | ST_COPIED)) |
                          ST_DIRTY);
                PUT_GENS(m, c, 0);
            }
            m->order_len[g] = m->left[g] = 0;
            m->st.precopy_undone++;
            n = 0;
            goto done;
        }
    }
    m->scheduled += n;
    m->ngens++;
    set_ring(m, m->head, m->ngens);
    if (m->mode != MODE_PRECOPY)
        forget_copies(m, g, n);
    m->hold = hold;
    /* The cut: every slot waiter is now after this snapshot. */
    m->commits++;
    m->st.cut_writers += m->slot_waiters;
done:
    m->committing = 0;
    pthread_cond_broadcast(&m->cond);
out:
    m->commit_wait_ns = locked - asked;
    m->commit_drain_ns = drained - locked;
    m->commit_held_ns = now_ns() - locked;
    pthread_mutex_unlock(&m->lock);
    free(scratch);
    *count = n;
    return err;
}

int
mc_commit_room(MirrorCore *m)
{
    int busy;
    pthread_mutex_lock(&m->lock);
    busy = commit_refusal(m);
    pthread_mutex_unlock(&m->lock);
    return busy;
}

void
mc_release_hold(MirrorCore *m)
{
    pthread_mutex_lock(&m->lock);
    m->hold = 0;
    pthread_cond_broadcast(&m->cond);
    pthread_mutex_unlock(&m->lock);
}

/* The next chunk of generation g to persist, by flush order; -1 if
 * none. Lock held. */
static int64_t
pick(MirrorCore *m, int g)
{
    while (m->nurgent) {
        int64_t c = m->urgent[--m->nurgent];
        m->in_urgent[c] = 0;
        if (m->gens[c] & G_UNTAKEN(g))
            return c;
    }
    if (m->adaptive) {
        while (m->ncopied[g]) {
            int64_t c = m->copied[g][--m->ncopied[g]];
            if (m->gens[c] & G_UNTAKEN(g))
                return c;
        }
    }
    while (m->order_pos[g] < m->order_len[g]) {
        int64_t c = m->order[g][m->order_pos[g]++];
        if (m->gens[c] & G_UNTAKEN(g))
            return c;
    }
    return -1;
}

/* Chunk c is taken by generation g. Lock held. */
static void
mark_taken(MirrorCore *m, int64_t c, int g)
{
    PUT_GENS(m, c, m->gens[c] & ~G_UNTAKEN(g));
    if (newest_of(m, c, m->ngens) == g)
        PUT_STATE(m, c, m->state[c] & ~ST_COPIED);
    sync_bits(m, c);
    m->hist[c] |= H_TAKEN;
    m->left[g]--;
    m->scheduled--;
}

/* live-cow: fold the redirected data of the taken chunk c back in place
 * (the extra I/O classic copy-on-write pays). Lock held, dropped for the
 * I/O; c is PENDING. Only once c is taken: the fold overwrites the
 * snapshot's content in the mirror file, and a kill during it must not
 * leave c untaken (recovery would persist the new data into the
 * snapshot). Taken, and dirty since written, recovery finds it gone
 * unless the persister journaled it. On an error the data stays
 * redirected (both files valid) and the caller fails the version. */
static int
fold_taken(MirrorCore *m, int64_t c)
{
    char *tmp;
    int err;
    pthread_mutex_unlock(&m->lock);
    tmp = malloc((size_t)m->chunk_size);
    err = tmp ? copy_chunk(m, m->redirect_fd, m->data_fd, c, tmp) : ENOMEM;
    free(tmp);
    pthread_mutex_lock(&m->lock);
    if (!err)
        PUT_STATE(m, c, m->state[c] & ~ST_REDIRECT);
    return err;
}

int
mc_take(MirrorCore *m, char *buf, int64_t *out)
{
    int64_t c = -1;
    int err = 0, from = 0;   /* 0 mirror file, 1 buffer, 2 pre-copy */
    int g;
    uint8_t s = 0;

    pthread_mutex_lock(&m->lock);
    m->taking++;
    g = m->head;
    for (;;) {
        if (!m->ngens) {
            c = -1;
            break;
        }
        c = pick(m, g);
        if (c < 0)
            break;
        s = m->state[c];
        /* A writer is copying it (or filling its redirect) right now, or
         * writing into its redirect file that the fold below would read:
         * take it once that is done. */
        if (!(s & ST_PENDING) && !((s & ST_REDIRECT) && m->wflight[c]))
            break;
        push_urgent(m, c);
        pthread_cond_wait(&m->cond, &m->lock);
    }
    if (c >= 0) {
        int in_file = newest_of(m, c, m->ngens) == g && !(s & ST_COPIED);
        if ((s & ST_COPIED) && m->mode == MODE_PRECOPY) {
            from = 2;
        } else if (!in_file) {
            int32_t slot = m->slot_of[c * MC_MAX_GENS + g];
            from = 1;
            if (slot < 0) {
                err = EIO;        /* cannot happen: a copy precedes it */
            } else if (slot < m->cow_slots) {
                memcpy(buf, m->cow + (int64_t)slot * m->chunk_size,
                       (size_t)mc_chunk_len(m, c));
                free_slot(m, c, g);
            } else {
                /* Read unlocked; PENDING keeps other takers off c (and
                 * writers of c wait, briefly: a page-cache read). No
                 * snapshot_done frees the slot while we take. */
                PUT_STATE(m, c, m->state[c] | ST_PENDING);
                pthread_mutex_unlock(&m->lock);
                err = spill_read(m, c, slot, buf);
                PAUSE(MC_AT_TAKE);
                pthread_mutex_lock(&m->lock);
                if (!err)
                    free_slot(m, c, g);
            }
        } else {
            /* In the mirror file, which no write can reach while it is
             * scheduled and uncopied, nor while PENDING. */
            PUT_STATE(m, c, m->state[c] | ST_PENDING);
        }
        if (from != 1) {
            pthread_mutex_unlock(&m->lock);
            err = pread_full(from == 2 ? m->precopy_fd : m->data_fd, buf,
                             (size_t)mc_chunk_len(m, c),
                             (off_t)c * m->chunk_size);
            PAUSE(MC_AT_TAKE);
            pthread_mutex_lock(&m->lock);
        }
        if (!err) {
            mark_taken(m, c, g);
            if (s & ST_REDIRECT)
                err = fold_taken(m, c);
        }
        PUT_STATE(m, c, m->state[c] & ~ST_PENDING);
        pthread_cond_broadcast(&m->cond);
    }
    m->taking--;
    pthread_cond_broadcast(&m->cond);
    pthread_mutex_unlock(&m->lock);
    *out = err ? -1 : c;
    return err;
}

/* The oldest generation's version is stable: it ends (its chunks are
 * all taken; any left are dropped). Writes go on: nothing they do
 * depends on a fully taken generation, and a writer may be waiting for
 * buffer slots that only the next generation's takes free. */
static void
end_oldest(MirrorCore *m)
{
    int g = m->head;
    uint8_t bits = G_MEMBER(g) | G_UNTAKEN(g);
    for (int64_t c = 0; c < m->nchunks; c++) {
        if (!(m->gens[c] & bits))
            continue;
        if (m->gens[c] & G_UNTAKEN(g))
            m->scheduled--;
        free_slot(m, c, g);
        if (newest_of(m, c, m->ngens) == g)
            PUT_STATE(m, c, m->state[c] & ~ST_COPIED);
        PUT_GENS(m, c, m->gens[c] & ~bits);
        sync_bits(m, c);
    }
    m->order_len[g] = m->order_pos[g] = m->left[g] = m->ncopied[g] = 0;
    clear_urgent(m);
    m->ngens--;
    set_ring(m, (m->head + 1) % MC_MAX_GENS, m->ngens);
}

void
mc_snapshot_done(MirrorCore *m, int stable)
{
    char *tmp = NULL;
    pthread_mutex_lock(&m->lock);
    while (m->taking)
        pthread_cond_wait(&m->cond, &m->lock);
    if (stable) {
        if (m->ngens)
            end_oldest(m);
        pthread_cond_broadcast(&m->cond);
        pthread_mutex_unlock(&m->lock);
        return;
    }
    pthread_mutex_unlock(&m->lock);
    tmp = malloc((size_t)m->chunk_size);
    pthread_mutex_lock(&m->lock);
    /* As COMMIT: no write enters while the states change. */
    while (m->committing)
        pthread_cond_wait(&m->cond, &m->lock);
    m->committing = 1;
    while (m->taking)
        pthread_cond_wait(&m->cond, &m->lock);
    /* Writers in flight may wait for buffer space or be copying a chunk
     * aside for a generation: out of the schedule, the waiting ones go
     * on and the copying ones drop their copy (prepare_chunk). Then wait
     * for them all, so that none marks a chunk copied or writes into the
     * redirect file after this returns. */
    for (int64_t c = 0; c < m->nchunks; c++) {
        PUT_GENS(m, c, m->gens[c] & G_MEMBERS);
        sync_bits(m, c);
    }
    pthread_cond_broadcast(&m->cond);
    while (m->writers)
        pthread_cond_wait(&m->cond, &m->lock);
    /* Every generation, live or parked (after a restart), and any bit
     * left from a COMMIT cut short. */
    for (int64_t c = 0; c < m->nchunks; c++) {
        if (!(m->state[c] & ST_SNAP) && !m->gens[c])
            continue;
        PUT_STATE(m, c, m->state[c] | ST_DIRTY);
        for (int g = 0; g < MC_MAX_GENS; g++)
            free_slot(m, c, g);
        if (m->state[c] & ST_REDIRECT) {
            /* A failed live-cow snapshot: bring the current data home so
             * the next snapshot reads it in place (else the next COMMIT
             * does: fold_leftovers). */
            if (tmp && copy_chunk(m, m->redirect_fd, m->data_fd, c,
                                  tmp) == 0)
                PUT_STATE(m, c, m->state[c] & ~ST_REDIRECT);
        }
        PUT_GENS(m, c, 0);
        PUT_STATE(m, c, m->state[c] & ~(ST_SNAP | ST_SCHED | ST_COPIED));
    }
    m->scheduled = 0;
    for (int g = 0; g < MC_MAX_GENS; g++)
        m->order_len[g] = m->order_pos[g] = m->left[g] = m->ncopied[g] = 0;
    m->ngens = m->parked = 0;
    set_ring(m, m->head, 0);
    clear_urgent(m);
    m->committing = 0;
    pthread_cond_broadcast(&m->cond);
    pthread_mutex_unlock(&m->lock);
    free(tmp);
}

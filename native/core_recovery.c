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
 * The mirror core after a crash, and its inspection (see core.c,
 * "Crash safety"): what recovery reads from the state files of a killed
 * agent, resume, requeue, and the counts the agent and tests read.
 *
 * Invariant: recovery reads only what the store order guarantees (every
 * state byte stored before the kill, in store order), so a kill between
 * any two stores gives the same answer as the state just before or just
 * after it.
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

/* ---- recovery and inspection ---------------------------------------- */

/* Generations to look at: the live ones, else the parked ones. */
static int
ring_len(const MirrorCore *m)
{
    return m->ngens ? m->ngens : m->parked;
}

void
mc_recovery(MirrorCore *m, int oldest, int64_t *snap, int64_t *untaken,
            int64_t *lost)
{
    *snap = *untaken = *lost = 0;
    pthread_mutex_lock(&m->lock);
    int n = ring_len(m), g0 = m->head;
    for (int64_t c = 0; c < m->nchunks; c++) {
        uint8_t s = m->state[c];
        int newest = newest_of(m, c, n), gone = 0;
        if (oldest) {
            /* The oldest generation alone: its untaken content is lost
             * unless the mirror file still holds it (no newer
             * generation holds the chunk, nothing copied it aside). */
            if (!n || !(m->gens[c] & G_MEMBER(g0)))
                continue;
            (*snap)++;
            if (!(m->gens[c] & G_UNTAKEN(g0)))
                continue;
            (*untaken)++;
            *lost += g0 != newest ||
                ((s & ST_COPIED) && m->mode != MODE_PRECOPY);
            continue;
        }
        if (s & ST_SNAP) (*snap)++;
        if (!(s & ST_SCHED))
            continue;
        (*untaken)++;
        /* A generation's content not in the mirror file was in the
         * in-memory buffer: an older generation's, or a copied one's
         * (the pre-copy file survives). */
        for (int k = 0; k < n; k++) {
            int g = gen_at(m, k);
            if (!(m->gens[c] & G_UNTAKEN(g)))
                continue;
            if (g != newest ||
                ((s & ST_COPIED) && m->mode != MODE_PRECOPY))
                gone = 1;
        }
        *lost += gone;
    }
    pthread_mutex_unlock(&m->lock);
}

int64_t
mc_resume(MirrorCore *m)
{
    int64_t n = 0;
    int g;
    pthread_mutex_lock(&m->lock);
    g = m->head;
    /* Only the oldest parked generation is resumed: the chunks of later
     * ones are dirty again (recovery fails their versions). */
    for (int64_t c = 0; c < m->nchunks; c++) {
        if (m->gens[c] & (uint8_t)~(G_MEMBER(g) | G_UNTAKEN(g))) {
            /* COPIED was about a later generation's content (the
             * oldest's, if it still needed it, was lost: recovery
             * checked). Dirty first: a kill between the two must not
             * leave a chunk in no snapshot and not dirty either. */
            PUT_STATE(m, c, (m->state[c] & ~ST_COPIED) | ST_DIRTY);
            PUT_GENS(m, c, m->gens[c] & (G_MEMBER(g) | G_UNTAKEN(g)));
        }
        if (m->gens[c] & G_UNTAKEN(g))
            m->order[g][n++] = c;
        sync_bits(m, c);
    }
    m->order_len[g] = n;
    m->order_pos[g] = m->ncopied[g] = 0;
    m->left[g] = n;
    m->scheduled = n;
    m->parked = 0;
    m->ngens = 1;                /* the persister ends it: snapshot_done */
    set_ring(m, g, 1);
    pthread_mutex_unlock(&m->lock);
    return n;
}

int
mc_requeue(MirrorCore *m, int64_t c)
{
    pthread_mutex_lock(&m->lock);
    int g = m->head, n = ring_len(m);
    uint8_t s = m->state[c];
    /* The oldest generation's content is still in the mirror file: not
     * taken yet, or taken and neither written since nor in a newer
     * generation (which it could only be after a write). */
    int ok = n > 0 && (m->gens[c] & G_MEMBER(g)) &&
        ((m->gens[c] & G_UNTAKEN(g)) ||
         (!(s & ST_DIRTY) && newest_of(m, c, n) == g));
    if (ok) {
        PUT_GENS(m, c, m->gens[c] | G_UNTAKEN(g));
        sync_bits(m, c);
    }
    pthread_mutex_unlock(&m->lock);
    return ok;
}

int64_t
mc_gen_chunks(MirrorCore *m, int k, int64_t *out)
{
    int64_t n = 0;
    pthread_mutex_lock(&m->lock);
    int len = ring_len(m);
    if (k < 0)
        k += len;
    if (k < 0 || k >= len) {
        pthread_mutex_unlock(&m->lock);
        return -1;
    }
    uint8_t bit = G_MEMBER(gen_at(m, k));
    for (int64_t c = 0; c < m->nchunks; c++)
        if (m->gens[c] & bit)
            out[n++] = c;
    pthread_mutex_unlock(&m->lock);
    return n;
}

int64_t
mc_snapshot_chunks(MirrorCore *m, int64_t *out)
{
    int64_t n = mc_gen_chunks(m, 0, out);
    return n < 0 ? 0 : n;
}

int64_t
mc_read_order(MirrorCore *m, int64_t *out)
{
    /* Chunks in the order they were first read since attach. */
    int64_t n = 0;
    pthread_mutex_lock(&m->lock);
    uint32_t total = m->read_seq;
    int64_t *by_seq = calloc((size_t)total + 1, sizeof(int64_t));
    if (by_seq) {
        for (int64_t c = 0; c < m->nchunks; c++)
            if (m->first_read[c])
                by_seq[m->first_read[c]] = c + 1;
        for (uint32_t s = 1; s <= total; s++)
            if (by_seq[s])
                out[n++] = by_seq[s] - 1;
    }
    pthread_mutex_unlock(&m->lock);
    free(by_seq);
    return by_seq ? n : -1;
}

int64_t
mc_quiet_dirty(MirrorCore *m, uint32_t since, int all, int64_t *out,
               uint32_t *last, uint32_t *now)
{
    int64_t n = 0;
    pthread_mutex_lock(&m->lock);
    for (int64_t c = 0; c < m->nchunks; c++) {
        uint8_t s = m->state[c];
        if ((s & (ST_DIRTY | ST_PRESENT)) != (ST_DIRTY | ST_PRESENT) ||
            (s & (ST_PENDING | ST_REDIRECT)) || m->wflight[c])
            continue;
        /* wrap-safe: written at or before since */
        if (all || (int32_t)(m->last_write[c] - since) <= 0) {
            last[n] = m->last_write[c];
            out[n++] = c;
        }
    }
    *now = m->wclock;
    pthread_mutex_unlock(&m->lock);
    return n;
}

void
mc_stats(MirrorCore *m, MirrorStats *out)
{
    pthread_mutex_lock(&m->lock);
    *out = m->st;
    out->present = out->dirty = 0;
    for (int64_t c = 0; c < m->nchunks; c++) {
        out->present += (m->state[c] & ST_PRESENT) != 0;
        out->dirty += (m->state[c] & ST_DIRTY) != 0;
    }
    out->scheduled = m->scheduled;
    out->in_flight = m->ngens;
    pthread_mutex_unlock(&m->lock);
}

uint32_t
mc_write_clock(MirrorCore *m, int64_t c)
{
    uint32_t clock;
    pthread_mutex_lock(&m->lock);
    clock = c < 0 ? m->wclock : m->last_write[c];
    pthread_mutex_unlock(&m->lock);
    return clock;
}

int
mc_is_present(MirrorCore *m, int64_t c)
{
    int present;
    pthread_mutex_lock(&m->lock);
    present = (m->state[c] & ST_PRESENT) != 0;
    pthread_mutex_unlock(&m->lock);
    return present;
}

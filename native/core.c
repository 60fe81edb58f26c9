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
 * The mirror core: one struct per attached image, no Python.
 *
 * It owns the local sparse mirror file, one state byte per chunk (in a
 * MAP_SHARED file, so that a SIGKILL of the agent loses no state: the
 * page cache keeps it), the bounded copy-on-write buffer, and the queue
 * the background persister takes chunks from. Every function locks the
 * mirror itself; none holds the lock across file I/O except COMMIT's
 * live-precopy copies and the fold of redirected chunks when a live-cow
 * snapshot fails (both with every write held off).
 *
 * Snapshot protocol (journal paper, Algorithms 1-4):
 *   COMMIT      waits for in-flight writes (but not for those blocked for
 *               a buffer slot: see "The cut" below), turns every DIRTY
 *               chunk into SCHEDULED (+SNAP), and orders the schedule.
 *   persister   takes chunks one at a time: PENDING while it reads one
 *               from the mirror file, or straight from the buffer if a
 *               writer copied it there; then the chunk is Idle again.
 *   writer      on a SCHEDULED chunk: selective-cow copies the old
 *               content into the buffer and writes in place; live-cow
 *               redirects the write to a second file (classic CoW); a
 *               PENDING chunk waits; a full buffer waits and makes the
 *               chunk URGENT so the persister takes it next.
 *   snapshot_done  stable: the oldest generation ends. Failed: every
 *               generation ends like a COMMIT: writes held off, in-flight
 *               ones drained (a copy aside that outlives its snapshot is
 *               dropped, never kept for the next one).
 *
 * Generations (selective-cow pipelines up to MC_MAX_GENS snapshots; the
 * other modes keep one): each COMMIT freezes its own set behind those in
 * flight; the persister takes the oldest one, which then ends, so that
 * versions turn stable in order. Per chunk, at most ONE generation can
 * still have its content in the mirror file: the newest one holding the
 * chunk, unless it was copied aside (ST_COPIED) since. Every older one's
 * content is in a buffer slot keyed by (generation, chunk): a write
 * copies the chunk aside for the newest generation that holds it before
 * it overwrites it, so that when a later COMMIT adds the chunk to a new
 * generation, the older ones already have their copies. With the buffer
 * full, a write waits: it makes its chunk urgent if its generation is
 * the oldest; a newer generation's waits for the slots the oldest frees
 * (the oldest's chunks in the mirror file need no slot, so the oldest
 * always finishes). A COMMIT with the buffer full is refused Busy.
 *
 * The cut (which writes a COMMIT's snapshot holds). A write goes
 *
 *     gate --> prepare (per chunk: copy aside | wait PENDING | wait for
 *       ^        |       a buffer slot)
 *       |        +--> pwrite --> DIRTY, done
 *       +--- cut: woke from a slot wait to a new COMMIT (m->commits)
 *
 * The gate holds writes off while a COMMIT works (committing), so a
 * write that passed it is "in flight" (m->writers) until done. COMMIT
 * waits for every write in flight EXCEPT those waiting for a buffer
 * slot (m->slot_waiters): such a write has changed nothing in the
 * mirror file yet (pwrite comes after every prepare; what its earlier
 * prepares did are copies of snapshot content, never written over), so
 * it can be ordered AFTER the snapshot. Waiting for it instead would
 * keep the COMMIT (and the guest, if held) until the persister frees a
 * slot, up to a whole persist: the core used to answer Busy then, and
 * every other write still blocked at the gate. When it wakes and sees
 * m->commits changed it gives up its prepares and goes back to the
 * gate: it prepares every chunk again against the new generation
 * (a chunk it had found safe may now be in the new snapshot, read in
 * place), so nothing it writes can reach the snapshot just frozen; and
 * everything written before the cut is in it (those writes were
 * drained). Slot waits happen in selective-cow only (no FILLING chunk
 * to give back); a waiter cannot act while COMMIT holds the lock, and
 * COMMIT does not drop it once the drain is over.
 *
 * Races the design closes (tests/native/stress_core.c hits each):
 *   - a write is "in flight" on its chunks (wflight) from the end of its
 *     prepare to the end of its pwrite: an install waits for it and then
 *     finds a whole-chunk write's chunk present, instead of writing the
 *     repository's older content over it; a live-cow fold waits too;
 *   - a write proceeds only when all its chunks are safe at the same
 *     instant (a prepare that waited let the persister fold an earlier
 *     chunk back);
 *   - a live-cow write that covers a chunk redirects it without copying;
 *     readers keep reading the mirror file until it is done (FILLING);
 *   - a write cut by a COMMIT while it waited for a slot prepares again
 *     the chunks it had prepared: one of them may be in the new
 *     generation (else its pwrite would land in that snapshot).
 *
 * Crash safety. A SIGKILL keeps every byte stored into state.bin and
 * gens.bin before it (MAP_SHARED: the page cache), in store order, so
 * each transition orders its stores for a kill between any two to leave
 * a state that recovery reads right (tests/native/crash_core.c kills
 * the process at every one, the crash points): a chunk leaving a
 * snapshot turns dirty first; a COMMIT's generation counts only once
 * set_ring records it, and ST_COPIED of its chunks (an older one's
 * content is in the volatile buffer) goes only after that; a write marks
 * a present chunk dirty before its data lands; live-cow folds a
 * redirected chunk back only once the chunk is taken.
 *
 * The core's files, each keeping the invariants its top comment names:
 * this one (crash points, the per-chunk helpers), core_open.c,
 * core_io.c, core_commit.c and core_recovery.c; what they share is
 * core_internal.h.
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

/* ---- crash points (core.h) ----------------------------------------- */

int mc_crash_armed;
static long crash_at, crash_passed;

void
mc_crash_arm(long at)
{
    __atomic_store_n(&crash_passed, 0, __ATOMIC_SEQ_CST);
    crash_at = at;
    mc_crash_armed = at >= 0;
}

long
mc_crash_passed(void)
{
    return __atomic_load_n(&crash_passed, __ATOMIC_SEQ_CST);
}

void
mc_crash_point(const char *where)
{
    long k = __atomic_add_fetch(&crash_passed, 1, __ATOMIC_SEQ_CST);
    if (k == crash_at) {
        char msg[128];
        int n = snprintf(msg, sizeof msg, "crash point %ld: %s\n", k, where);
        ssize_t ignored = write(2, msg, (size_t)n);
        (void)ignored;
        kill(getpid(), SIGKILL);     /* the whole process, at once */
        _exit(137);
    }
}

/* Read once, before any mirror opens or thread starts. */
__attribute__((constructor)) static void
crash_arm_from_env(void)
{
    const char *at = getenv("BLOBCR_CORE_CRASH_AT");
    if (at && *at)
        mc_crash_arm(strtol(at, NULL, 10));
}


const char *const mc_mode_names[] = {
    "selective-cow", "live-cow", "live-precopy", "offline", NULL
};

int
mc_mode(const char *name)
{
    for (int i = 0; mc_mode_names[i]; i++)
        if (strcmp(name, mc_mode_names[i]) == 0)
            return i;
    return -1;
}

/* ---- helpers (lock held unless noted) ------------------------------ */

int64_t
mc_chunk_len(const MirrorCore *m, int64_t c)
{
    int64_t left = m->size - c * m->chunk_size;
    return left < m->chunk_size ? left : m->chunk_size;
}

int64_t *
mc_index_buffer(const MirrorCore *m, long long off, long long len)
{
    return malloc(sizeof(int64_t) *
                  (size_t)((off + len - 1) / m->chunk_size -
                           off / m->chunk_size + 1));
}

/* The urgent queue holds each chunk once: writers re-queue the chunk
 * they wait for every time they wake. */
void
push_urgent(MirrorCore *m, int64_t c)
{
    if (!m->in_urgent[c]) {
        m->in_urgent[c] = 1;
        m->urgent[m->nurgent++] = c;
    }
}

void
clear_urgent(MirrorCore *m)
{
    while (m->nurgent)
        m->in_urgent[m->urgent[--m->nurgent]] = 0;
}

/* Ring slot of the k-th generation from the oldest. */
int
gen_at(const MirrorCore *m, int k)
{
    return (m->head + k) % MC_MAX_GENS;
}

/* The newest of the first n generations from the oldest that holds c,
 * or -1. */
int
newest_of(const MirrorCore *m, int64_t c, int n)
{
    for (int k = n - 1; k >= 0; k--)
        if (m->gens[c] & G_MEMBER(gen_at(m, k)))
            return gen_at(m, k);
    return -1;
}

/* ST_SNAP and ST_SCHED follow the generation bits. */
void
sync_bits(MirrorCore *m, int64_t c)
{
    uint8_t g = m->gens[c], s = m->state[c] & (uint8_t)~(ST_SNAP | ST_SCHED);
    if (g & G_MEMBERS)
        s |= ST_SNAP;
    if (g & (uint8_t)~G_MEMBERS)
        s |= ST_SCHED;
    PUT_STATE(m, c, s);
}

void
free_slot(MirrorCore *m, int64_t c, int g)
{
    int32_t *p = &m->slot_of[c * MC_MAX_GENS + g];
    if (*p >= 0) {
        if (*p >= m->cow_slots)
            spill_punch(m, *p);
        m->free_slots[m->nfree++] = *p;
        *p = -1;
    }
}

/* The ring as the persisted header says, written at every change (the
 * page cache keeps it through a SIGKILL, as the state files). */
void
set_ring(MirrorCore *m, int head, int n)
{
    uint8_t ring[2] = { (uint8_t)head, (uint8_t)n };
    uint16_t both;
    m->head = head;
    memcpy(&both, ring, sizeof both);
    if (memcmp(m->gmap + 4, ring, sizeof ring) != 0)
        MC_CRASH_POINT(__func__);
    /* One store: a kill leaves the old ring or the new, never a head
     * from one and a count from the other. */
    __atomic_store_n((uint16_t *)(void *)(m->gmap + 4), both,
                     __ATOMIC_RELAXED);
}

/* Full pread/pwrite loops; no lock needed. Return 0 or an errno. */
int
pread_full(int fd, char *buf, size_t len, off_t off)
{
    while (len) {
        ssize_t n = pread(fd, buf, len, off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        if (n == 0) {           /* sparse hole past EOF reads as zeros */
            memset(buf, 0, len);
            return 0;
        }
        buf += n; len -= (size_t)n; off += n;
    }
    return 0;
}

int
pwrite_full(int fd, const char *buf, size_t len, off_t off)
{
    MC_CRASH_POINT(__func__);
    while (len) {
        ssize_t n = pwrite(fd, buf, len, off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        buf += n; len -= (size_t)n; off += n;
    }
    return 0;
}

int
copy_chunk(MirrorCore *m, int from_fd, int to_fd, int64_t c, char *scratch)
{
    off_t off = (off_t)c * m->chunk_size;
    int err = pread_full(from_fd, scratch, (size_t)mc_chunk_len(m, c), off);
    if (!err)
        err = pwrite_full(to_fd, scratch, (size_t)mc_chunk_len(m, c), off);
    return err;
}

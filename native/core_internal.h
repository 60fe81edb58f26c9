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
 * What the mirror core's files share and nothing else may use (the
 * public API is core.h). The core is one state machine cut where it has
 * seams, each file saying at its top which invariants it keeps:
 *
 *   core.c           the design, crash points, the per-chunk helpers
 *                    (generations ring, urgent queue, file copies)
 *   core_open.c      construction: state files opened, checked, reset
 *   core_io.c        reads, writes (the cut), installs from the
 *                    repository
 *   core_commit.c    COMMIT, the persister's takes, snapshot_done
 *   core_recovery.c  recovery after a crash, inspection
 *   core_durable.c   flushes (durable records), recovery after a power
 *                    loss
 *   core_log.c       the write log's map: blocks written since the
 *                    last entry of a `cluster` volume's log
 *
 * Copyright BlobCR for OpenStack developers. Apache-2.0.
 */

#ifndef BLOBCR_CORE_INTERNAL_H
#define BLOBCR_CORE_INTERNAL_H

#include "core.h"

#include <stdint.h>
#include <sys/types.h>

#ifdef MC_TEST_HOOKS
#define PAUSE(at) mc_test_pause(at)
#define FAULT(at) mc_test_fault(at)
#else
#define PAUSE(at) ((void)0)
#define FAULT(at) 0
#endif

/* Every change of a persisted byte (state.bin, gens.bin) passes a crash
 * point first. */
static inline void
put_byte(uint8_t *p, uint8_t v, const char *where)
{
    if (__builtin_expect(mc_crash_armed, 0) && *p != v)
        mc_crash_point(where);
    *p = v;
}
#define PUT_STATE(m, c, v) put_byte(&(m)->state[c], (uint8_t)(v), __func__)
#define PUT_GENS(m, c, v) put_byte(&(m)->gens[c], (uint8_t)(v), __func__)

/* prepare_chunk's answer when a COMMIT cut the write while it waited
 * for a buffer slot: start over from the gate. */
#define MC_CUT (-2)

/* Helpers of core.c (lock held unless noted) and core_io.c's prepare. */
#pragma GCC visibility push(hidden)
void clear_urgent(MirrorCore *m);
int copy_chunk(MirrorCore *m, int from_fd, int to_fd, int64_t c,
    char *scratch);
void free_slot(MirrorCore *m, int64_t c, int g);
int gen_at(const MirrorCore *m, int k);
int newest_of(const MirrorCore *m, int64_t c, int n);
int pread_full(int fd, char *buf, size_t len, off_t off);
void push_urgent(MirrorCore *m, int64_t c);
int pwrite_full(int fd, const char *buf, size_t len, off_t off);
void set_ring(MirrorCore *m, int head, int n);
void sync_bits(MirrorCore *m, int64_t c);
int prepare_chunk(MirrorCore *m, int64_t c, int whole, int nonblock,
    char *scratch, uint32_t epoch);
/* core_durable.c: the flush record opened (read, or written first) */
int durable_open(MirrorCore *m, const char *dir, char *path,
    size_t path_len);
void durable_release(MirrorCore *m);
/* core_log.c: the write log's map (lock held for log_mark) */
int log_open(MirrorCore *m, const char *dir, char *path, size_t path_len);
void log_release(MirrorCore *m);
void log_mark(MirrorCore *m, long long off, long long len);
int log_reset_empty(const char *dir, char *path, size_t path_len);
/* core_spill.c: buffer slots past the memory ones, in a nameless file */
int spill_open(MirrorCore *m, const char *dir, int64_t spill_chunks,
    char *path, size_t path_len);
void spill_release(MirrorCore *m);
int spill_copy_in(MirrorCore *m, int64_t c, int64_t slot, char *scratch);
int spill_read(MirrorCore *m, int64_t c, int64_t slot, char *buf);
void spill_punch(MirrorCore *m, int64_t slot);
int spill_paused(MirrorCore *m);
void spill_pause(MirrorCore *m);
int64_t monotonic_ns(void);
/* core_io.c: pwrite_full that waits for room (ENOSPC, EDQUOT); unlocked */
int pwrite_room(MirrorCore *m, int fd, const char *buf, size_t len,
    off_t off);
#pragma GCC visibility pop

#endif

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
 * The mirror core: per-image chunk states, selective copy-on-write and
 * the persist schedule, in plain C (no Python.h, no GIL). The CPython
 * binding (mirror.c), the libfuse3 loop (fuseloop.c) and the stress
 * tests (tests/native/) all drive this one implementation.
 *
 * Copyright BlobCR for OpenStack developers. Apache-2.0.
 */
#ifndef BLOBCR_CORE_H
#define BLOBCR_CORE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* Persistent state bits (the mmap'd state file). */
#define ST_PRESENT  0x01   /* the mirror file holds this chunk */
#define ST_DIRTY    0x02   /* written since the last COMMIT */
#define ST_SCHED    0x04   /* in a snapshot in flight, not yet taken by
                              it (any generation: see gens below) */
#define ST_PENDING  0x08   /* being read or copied: writers wait */
#define ST_COPIED   0x10   /* the content of the NEWEST generation holding
                              the chunk is in the CoW buffer or the
                              pre-copy file, not in the mirror file */
#define ST_REDIRECT 0x20   /* live-cow: current data is in the redirect
                              file */
#define ST_SNAP     0x40   /* belongs to a snapshot in flight */
#define ST_FILLING  0x80   /* live-cow: a whole-chunk write is filling the
                              redirect file (with PENDING); readers still
                              read the mirror file */

/* Generations: snapshots in flight at once (selective-cow; the other
 * modes keep one). Each is a slot g of a ring; per chunk one byte of
 * the second state file (gens.bin, also MAP_SHARED) holds G_MEMBER(g)
 * (the chunk is in generation g) and G_UNTAKEN(g) (not yet taken by
 * it). ST_SNAP and ST_SCHED are the unions of those bits. The file
 * starts with a header (magic, ring head, count) so that a restart
 * knows which generations were in flight. */
#define MC_MAX_GENS   4
#define G_MEMBER(g)   ((uint8_t)(0x01u << (g)))
#define G_UNTAKEN(g)  ((uint8_t)(0x10u << (g)))
#define G_MEMBERS     0x0f
#define G_HEADER      16

/* History bits for adaptive flushing (ai-ckpt Algorithm 4). */
#define H_WAITED  0x01
#define H_COPIED  0x02
#define H_AVOIDED 0x04
#define H_TAKEN   0x08     /* taken by the persister this epoch */

enum { MODE_SELECTIVE, MODE_LIVE_COW, MODE_PRECOPY, MODE_OFFLINE };
extern const char *const mc_mode_names[];

typedef struct {
    int64_t present, dirty, scheduled;
    int64_t cow_copies;      /* chunks copied into the CoW buffer */
    int64_t redirects;       /* live-cow chunks redirected */
    int64_t redirects_nocopy;/* ... by a whole-chunk write: no copy */
    int64_t waits;           /* writes that waited for the persister */
    int64_t avoided;         /* copies avoided (persisted first) */
    int64_t urgent;          /* chunks made urgent by a full buffer */
    int64_t install_waits;   /* installs that waited for a write */
    int64_t installs_skipped;/* installs a write made needless */
    int64_t copies_dropped;  /* copy-asides whose snapshot ended */
    int64_t precopy_undone;  /* live-precopy commits undone by an error */
    int64_t copies_older;    /* copy-asides for a generation older than
                                the newest in flight */
    int64_t multi_gen;       /* chunks committed while an older
                                generation in flight still held them */
    int64_t busy_gens;       /* COMMITs refused: MAX generations in flight */
    int64_t busy_full;       /* COMMITs refused: the CoW buffer is full */
    int64_t spilled;         /* copy-asides into the spill file */
    int64_t spill_full;      /* spill slots given up: the file system
                                was full (ENOSPC, EDQUOT) */
    int64_t cut_writers;     /* writers blocked for a buffer slot that a
                                COMMIT ordered after its snapshot (cut)
                                instead of waiting for them */
    int64_t room_waits;      /* guest writes and installs that waited for
                                room on the cache's file system (ENOSPC,
                                EDQUOT) instead of failing */
    int64_t in_flight;       /* generations in flight now */
    int64_t flushes;         /* guest flushes (mc_flush) */
    int64_t flush_records;   /* ... that wrote a new durable record */
} MirrorStats;

typedef struct MirrorCore {
    int data_fd, redirect_fd, precopy_fd;
    uint8_t *state;
    size_t state_len;
    int64_t size, chunk_size, nchunks;
    int mode, adaptive;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int writers;            /* writes past the COMMIT gate */
    int committing;         /* COMMIT or snapshot_done at work: writes
                               wait at the gate */
    int hold;               /* offline: writes wait until released */
    int taking;             /* mc_take calls at work */
    int slot_waiters;       /* writers waiting for a free buffer slot
                               (counted in writers too) */
    /* The last COMMIT's times (ns): waiting for the lock, then holding
     * it (the guest's writes wait), of which draining writes in flight. */
    int64_t commit_wait_ns, commit_held_ns, commit_drain_ns;
    uint32_t commits;       /* COMMITs taken: a slot waiter that wakes to
                               a new value was cut (mc_write starts over) */
    /* generations: live ones are ring slots head .. head+ngens-1 (oldest
     * first); after a restart the persisted ones are "parked" (counted
     * in parked, not served) until mc_resume or mc_snapshot_done. */
    int max_gens, head, ngens, parked;
    uint8_t *gmap;          /* gens.bin: G_HEADER bytes, then gens */
    size_t gmap_len;
    uint8_t *gens;          /* per chunk: G_MEMBER / G_UNTAKEN bits */
    uint32_t *wflight;      /* per chunk: writes between their prepare and
                               the end of their pwrite */
    /* copy-on-write buffer: slots 0 .. cow_slots-1 in memory (cow),
     * cow_slots .. cow_slots+spill_slots-1 in the spill file
     * (core_spill.c) */
    char *cow;
    int64_t cow_slots, spill_slots;
    int spill_fd;
    char *spill_name;       /* its path if it has one (no O_TMPFILE) */
    int spill_by_hand;      /* no copy_file_range: it would share the
                               mirror file's blocks (reflinks) */
    int64_t spill_reserve;  /* bytes the spill leaves free on its file
                               system (the agent's own durable writes) */
    int64_t spill_paused_ns;/* CLOCK_MONOTONIC: no spill slot is taken
                               before (its file system was full) */
    int32_t *slot_of;       /* (chunk, generation) -> buffer slot, -1:
                               slot_of[c * MC_MAX_GENS + g] */
    int64_t *free_slots;
    int64_t nfree;
    /* persist schedule, per generation; urgent: for the oldest only */
    int64_t *order[MC_MAX_GENS], order_len[MC_MAX_GENS];
    int64_t order_pos[MC_MAX_GENS], left[MC_MAX_GENS];
    int64_t *copied[MC_MAX_GENS], ncopied[MC_MAX_GENS];
    int64_t scheduled;      /* untaken (generation, chunk) pairs */
    int64_t *urgent, nurgent;
    uint8_t *in_urgent;     /* no chunk is queued twice */
    /* access history */
    uint32_t seq;
    uint32_t *first_write;  /* first write of the current epoch */
    uint32_t *last_write;   /* wclock at the chunk's latest write */
    uint32_t wclock;        /* writes since open (wraps; never reset):
                               upload-ahead's "quiet since" */
    uint32_t *first_read;   /* first read since attach (restart profile) */
    uint32_t read_seq;
    uint8_t *hist, *hist_prev;
    MirrorStats st;         /* counters (present/dirty/scheduled unused) */
    /* durable record (core_durable.c): which chunks the last flush made
     * durable, and the next one's scratch copy */
    pthread_mutex_t flush_lock;
    int durable_fd;
    uint64_t durable_seq;
    uint8_t *durable_last, *durable_next;
    /* write log map (core_log.c): blocks written since the last entry
     * of the write-ahead log (pending), and those of the entry being
     * appended (cut); both in log.bin */
    uint8_t *lmap;
    size_t lmap_len, log_words;
    uint64_t *log_pending, *log_cut;
} MirrorCore;

/* The write log's block: a write marks every block it touches. */
#define MC_LOG_BLOCK 4096

/* Life cycle. mc_init once (mutex, no files), mc_open to attach the
 * files of a directory (0 or an errno; the failing path in errpath),
 * mc_close to flush and detach, mc_destroy at the end. cow_chunks: the
 * copy-on-write buffer's slots in memory; spill_chunks: more slots in a
 * nameless file of dir, used once those are taken (0: none). */
void mc_init(MirrorCore *m);
int mc_open(MirrorCore *m, const char *dir, int64_t size,
            int64_t chunk_size, int mode, int64_t cow_chunks,
            int64_t spill_chunks, int adaptive,
            char *errpath, size_t errpath_len);
void mc_close(MirrorCore *m, int flush);
void mc_destroy(MirrorCore *m);
int mc_mode(const char *name);        /* -1 if unknown */

int64_t mc_chunk_len(const MirrorCore *m, int64_t c);

/* An array big enough for the chunk indices of [off, off+len). */
int64_t *mc_index_buffer(const MirrorCore *m, long long off, long long len);

/* Read [off, off+len): 0 or an errno; chunks that must be installed
 * first are listed in missing and nothing is read. */
int mc_read(MirrorCore *m, char *buf, long long off, long long len,
            int64_t *missing, int64_t *nmissing);
/* Write [off, off+len): 0 or an errno; may wait unless nonblock (then
 * *busy and nothing written). Partial writes to absent chunks list them
 * in missing (sized by mc_index_buffer; its content is scratch
 * otherwise). scratch: a chunk-sized buffer (live-cow copies). */
int mc_write(MirrorCore *m, const char *buf, long long off, long long len,
             int nonblock, char *scratch, int64_t *missing,
             int64_t *nmissing, int *busy);
/* Store fetched content of chunk c unless it became present (a
 * whole-chunk write won): 0 or an errno, *installed. */
int mc_install(MirrorCore *m, int64_t c, const char *data, int *installed);

/* COMMIT: a new generation, behind those in flight. 0 or an errno;
 * *busy (nothing committed) is MC_BUSY_GENS with max_gens generations
 * in flight (not yet ended by snapshot_done), MC_BUSY_FULL when the
 * copy-on-write buffer is full (no free slot) while generations are in
 * flight, MC_BUSY_COMMIT when another COMMIT or a failure is at work.
 * Writers in flight are drained, except those blocked for a buffer slot:
 * they are ordered after the snapshot (see core.c). *count = chunks in
 * the snapshot. On an error nothing is scheduled (live-precopy's copy
 * errors: the chunks are dirty again) and no hold is taken. */
enum { MC_BUSY_GENS = 1, MC_BUSY_FULL, MC_BUSY_COMMIT };
int mc_commit(MirrorCore *m, int hold, int64_t *count, int *busy);
/* What mc_commit would answer now without taking anything: 0 (it would
 * take a snapshot) or the MC_BUSY_* it would refuse with. A hint: the
 * answer may change before the COMMIT. Cheap (no scan, no wait). */
int mc_commit_room(MirrorCore *m);
void mc_release_hold(MirrorCore *m);
/* The next chunk of the OLDEST generation in flight into buf
 * (chunk_size bytes): 0 or an errno; *c = -1 when that generation is
 * fully taken (or none is in flight). */
int mc_take(MirrorCore *m, char *buf, int64_t *c);
/* stable: the oldest generation's version is stable; that generation
 * ends. Failed: every generation in flight ends (each follows the
 * failed one) and all their chunks are dirty again; after a restart,
 * also those of the parked ones. */
void mc_snapshot_done(MirrorCore *m, int stable);

/* Flush (a guest's fsync): every write and install acknowledged before
 * it survives a power loss of the host. 0 or an errno. See
 * core_durable.c. */
int mc_flush(MirrorCore *m, int datasync);
/* After a power loss, before mc_open: rebuild the state files of the
 * cache in dir from its newest whole flush record (every recorded chunk
 * present and dirty, no generation in flight). 0 or an errno
 * (EBADMSG: no whole record; the failing path in path); *present:
 * chunks kept. */
int mc_recover_power_loss(const char *dir, int64_t size,
                          int64_t chunk_size, int64_t *present,
                          char *path, size_t path_len);

/* The write-ahead log of a `cluster` volume (core_log.c). mc_log_cut:
 * every block written since the last cut (each write acknowledged
 * before the call) becomes the cut (0 or an errno); mc_log_extents: its
 * runs of blocks, at most max of them written into offs/lens (the
 * count is returned; *blocks: 4 KiB blocks in all); mc_log_done: the
 * cut is in the log (appended), or not (its blocks are owed again). One
 * cut at a time: the caller serializes them. */
int mc_log_cut(MirrorCore *m);
int64_t mc_log_extents(MirrorCore *m, int64_t *offs, int64_t *lens,
                       int64_t max, int64_t *blocks);
void mc_log_done(MirrorCore *m, int appended);

/* Crash recovery: the parked generations (one normally). mc_recovery
 * counts the chunks of all of them (oldest: of the oldest alone; lost:
 * untaken chunks whose content was only in the in-memory buffer),
 * mc_requeue and mc_resume work on the oldest (mc_resume makes it live;
 * chunks of later parked ones are dirty again). */
void mc_recovery(MirrorCore *m, int oldest, int64_t *snap,
                 int64_t *untaken, int64_t *lost);
int64_t mc_resume(MirrorCore *m);
int mc_requeue(MirrorCore *m, int64_t c);    /* 1 requeued, 0 lost */

/* Inspection; out arrays hold nchunks entries. mc_snapshot_chunks: the
 * oldest generation (live or parked); mc_gen_chunks: the k-th live or
 * parked one from the oldest (k < 0: from the newest), -1 if none. */
int64_t mc_snapshot_chunks(MirrorCore *m, int64_t *out);
int64_t mc_gen_chunks(MirrorCore *m, int k, int64_t *out);
int64_t mc_read_order(MirrorCore *m, int64_t *out);
/* Upload-ahead: the chunks dirty now whose last write is not after
 * wclock value ``since`` (any, with ``all``), none of them being read in
 * or written right now, with the wclock of that last write (``last``);
 * *now: the wclock, the next call's ``since``. */
int64_t mc_quiet_dirty(MirrorCore *m, uint32_t since, int all,
                       int64_t *out, uint32_t *last, uint32_t *now);
/* The write clock now (``c`` < 0) or at chunk c's last write. */
uint32_t mc_write_clock(MirrorCore *m, int64_t c);
void mc_stats(MirrorCore *m, MirrorStats *out);
/* The room the spill leaves free on its file system (bytes). */
void mc_set_spill_reserve(MirrorCore *m, int64_t bytes);
int mc_is_present(MirrorCore *m, int64_t c);

/* Test hooks: the stress tests build the core with MC_TEST_HOOKS and
 * define mc_test_pause (widen race windows) and mc_test_fault (inject an
 * I/O error: return an errno or 0). Compiled out otherwise. */
enum {
    MC_AT_WRITE,        /* before a write's unlocked pwrite */
    MC_AT_COPY,         /* a copy-aside, between its pread and relock */
    MC_AT_INSTALL,      /* before an install's pwrite */
    MC_AT_TAKE,         /* the persister, between its pread and relock */
    MC_AT_PRECOPY,      /* live-precopy's copy at COMMIT (fault only) */
    MC_AT_READ,         /* a read, between its state check and pread */
};
#ifdef MC_TEST_HOOKS
void mc_test_pause(int where);
int mc_test_fault(int where);
#endif

/* Crash points: every durable-state write of the core (a state or
 * generation byte that changes, the ring header, a write into one of
 * the mirror's files) passes one first; a test driver can add its own
 * (the agent's metadata, its journal) to the same count. Armed, the
 * process SIGKILLs itself at the at-th one passed, after naming it on
 * stderr; at = 0 only counts, at < 0 disarms. The environment arms it
 * when the library loads: BLOBCR_CORE_CRASH_AT=k. Disarmed (production), a
 * crash point costs a load and a predicted branch. */
extern int mc_crash_armed;
void mc_crash_arm(long at);
long mc_crash_passed(void);          /* since the last mc_crash_arm */
void mc_crash_point(const char *where);
#define MC_CRASH_POINT(where)                                 \
    do {                                                      \
        if (__builtin_expect(mc_crash_armed, 0))              \
            mc_crash_point(where);                            \
    } while (0)

#endif

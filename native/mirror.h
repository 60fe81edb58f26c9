/*
 * The native mirror core, shared by the Python binding (mirror.c) and the
 * libfuse3 request loop (fuseloop.c).
 *
 * Copyright BlobCR for OpenStack developers. Apache-2.0.
 */
#ifndef BLOBCR_MIRROR_H
#define BLOBCR_MIRROR_H

#include <Python.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

/* Persistent state bits (the mmap'd state file). */
#define ST_PRESENT  0x01   /* the mirror file holds this chunk */
#define ST_DIRTY    0x02   /* written since the last COMMIT */
#define ST_SCHED    0x04   /* in the snapshot, not yet taken */
#define ST_PENDING  0x08   /* being read or copied: writers wait */
#define ST_COPIED   0x10   /* snapshot content is in the CoW buffer or
                              the pre-copy file, not in the mirror file */
#define ST_REDIRECT 0x20   /* live-cow: current data is in the redirect
                              file */
#define ST_SNAP     0x40   /* belongs to the snapshot being persisted */

/* History bits for adaptive flushing (ai-ckpt Algorithm 4). */
#define H_WAITED  0x01
#define H_COPIED  0x02
#define H_AVOIDED 0x04
#define H_TAKEN   0x08     /* taken by the persister this epoch */

enum { MODE_SELECTIVE, MODE_LIVE_COW, MODE_PRECOPY, MODE_OFFLINE };
extern const char *mode_names[];

typedef struct {
    PyObject_HEAD
    int data_fd, redirect_fd, precopy_fd;
    uint8_t *state;
    size_t state_len;
    int64_t size, chunk_size, nchunks;
    int mode, adaptive;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int writers, committing, hold;
    /* copy-on-write buffer */
    char *cow;
    int64_t cow_slots;
    int32_t *slot_of;       /* chunk -> buffer slot, -1 */
    int64_t *free_slots;
    int64_t nfree;
    /* persist schedule */
    int64_t *order, order_len, order_pos, scheduled;
    int64_t *urgent, nurgent;
    uint8_t *in_urgent;     /* no chunk is queued twice */
    int64_t *copied, ncopied;
    /* access history */
    uint32_t seq;
    uint32_t *first_write;  /* first write of the current epoch */
    uint32_t *first_read;   /* first read since attach (restart profile) */
    uint32_t read_seq;
    uint8_t *hist, *hist_prev;
    /* statistics */
    int64_t cow_copies, redirects, waits, avoided, urgent_count;
} Mirror;

extern PyTypeObject MirrorType;

/* An array big enough for the chunk indices of [off, off+len). */
static inline int64_t *
mirror_index_buffer(Mirror *m, long long off, long long len)
{
    return malloc(sizeof(int64_t) *
                  (size_t)((off + len - 1) / m->chunk_size -
                           off / m->chunk_size + 1));
}

int mirror_core_read(Mirror *m, char *buf, long long off, long long len,
                     int64_t *missing, int64_t *nmissing);
int mirror_core_write(Mirror *m, const char *buf, long long off,
                      long long len, int nonblock, char *scratch,
                      int64_t *missing, int64_t *nmissing, int *busy);

#endif

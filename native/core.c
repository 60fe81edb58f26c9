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
 * Copyright BlobCR for OpenStack developers. Apache-2.0.
 */
#define _GNU_SOURCE
#include "core.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef MC_TEST_HOOKS
#define PAUSE(at) mc_test_pause(at)
#define FAULT(at) mc_test_fault(at)
#else
#define PAUSE(at) ((void)0)
#define FAULT(at) 0
#endif

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
static void
push_urgent(MirrorCore *m, int64_t c)
{
    if (!m->in_urgent[c]) {
        m->in_urgent[c] = 1;
        m->urgent[m->nurgent++] = c;
    }
}

static void
clear_urgent(MirrorCore *m)
{
    while (m->nurgent)
        m->in_urgent[m->urgent[--m->nurgent]] = 0;
}

/* Ring slot of the k-th generation from the oldest. */
static int
gen_at(const MirrorCore *m, int k)
{
    return (m->head + k) % MC_MAX_GENS;
}

/* The newest of the first n generations from the oldest that holds c,
 * or -1. */
static int
newest_of(const MirrorCore *m, int64_t c, int n)
{
    for (int k = n - 1; k >= 0; k--)
        if (m->gens[c] & G_MEMBER(gen_at(m, k)))
            return gen_at(m, k);
    return -1;
}

/* ST_SNAP and ST_SCHED follow the generation bits. */
static void
sync_bits(MirrorCore *m, int64_t c)
{
    uint8_t g = m->gens[c], s = m->state[c] & (uint8_t)~(ST_SNAP | ST_SCHED);
    if (g & G_MEMBERS)
        s |= ST_SNAP;
    if (g & (uint8_t)~G_MEMBERS)
        s |= ST_SCHED;
    PUT_STATE(m, c, s);
}

static void
free_slot(MirrorCore *m, int64_t c, int g)
{
    int32_t *p = &m->slot_of[c * MC_MAX_GENS + g];
    if (*p >= 0) {
        m->free_slots[m->nfree++] = *p;
        *p = -1;
    }
}

/* The ring as the persisted header says, written at every change (the
 * page cache keeps it through a SIGKILL, as the state files). */
static void
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
static int
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

static int
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

static int
copy_chunk(MirrorCore *m, int from_fd, int to_fd, int64_t c, char *scratch)
{
    off_t off = (off_t)c * m->chunk_size;
    int err = pread_full(from_fd, scratch, (size_t)mc_chunk_len(m, c), off);
    if (!err)
        err = pwrite_full(to_fd, scratch, (size_t)mc_chunk_len(m, c), off);
    return err;
}

/* ---- construction ------------------------------------------------- */

void
mc_init(MirrorCore *m)
{
    memset(m, 0, sizeof *m);
    m->data_fd = m->redirect_fd = m->precopy_fd = -1;
    pthread_mutex_init(&m->lock, NULL);
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
    free(m->cow); free(m->slot_of); free(m->free_slots);
    free(m->urgent); free(m->in_urgent);
    for (int g = 0; g < MC_MAX_GENS; g++) {
        free(m->order[g]); free(m->copied[g]);
        m->order[g] = m->copied[g] = NULL;
    }
    free(m->first_write); free(m->first_read);
    free(m->hist); free(m->hist_prev); free(m->wflight);
    m->cow = NULL; m->slot_of = NULL; m->free_slots = NULL;
    m->urgent = NULL;
    m->in_urgent = NULL;
    m->first_write = m->first_read = m->wflight = NULL;
    m->hist = m->hist_prev = NULL;
}

int
mc_open(MirrorCore *m, const char *dir, int64_t size, int64_t chunk_size,
        int mode, int64_t cow_chunks, int adaptive, char *path,
        size_t path_len)
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
    m->seq = m->read_seq = 0;

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
    m->cow = malloc((size_t)(cow_chunks * chunk_size));
    m->slot_of = malloc(sizeof(int32_t) * (size_t)m->nchunks * MC_MAX_GENS);
    m->free_slots = malloc(sizeof(int64_t) * (size_t)cow_chunks);
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
    m->first_read = calloc((size_t)m->nchunks, sizeof(uint32_t));
    m->wflight = calloc((size_t)m->nchunks, sizeof(uint32_t));
    m->hist = calloc((size_t)m->nchunks, 1);
    m->hist_prev = calloc((size_t)m->nchunks, 1);
    if (!m->cow || !m->slot_of || !m->free_slots ||
        !m->urgent || !m->in_urgent || !m->first_write ||
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
    for (int64_t s = 0; s < cow_chunks; s++)
        m->free_slots[s] = s;
    m->nfree = cow_chunks;
    return 0;
oserror:
    err = errno ? errno : EIO;
    release_files(m);
    return err;
}

void
mc_close(MirrorCore *m, int flush)
{
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
    pthread_cond_destroy(&m->cond);
}

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

/* prepare_chunk's answer when a COMMIT cut the write while it waited
 * for a buffer slot: start over from the gate. */
#define MC_CUT (-2)

/* Make chunk c safe to overwrite; lock held, may wait. whole: the write
 * covers the chunk; epoch: m->commits when the write passed the gate.
 * Returns 0, an errno, -1 when it would wait and nonblock is set, or
 * MC_CUT. A copy aside runs unlocked: a failed snapshot (snapshot_done)
 * may take the chunk out of the schedule meanwhile, so the copy is kept
 * only if the chunk is still scheduled after it. */
static int
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
        if (m->nfree == 0) {
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
            pthread_cond_wait(&m->cond, &m->lock);
            m->slot_waiters--;
            if (m->commits != epoch)
                return MC_CUT;      /* ordered after that COMMIT */
            continue;
        }
        {
            int64_t slot = m->free_slots[--m->nfree];
            int err;
            PUT_STATE(m, c, m->state[c] | ST_PENDING);
            pthread_mutex_unlock(&m->lock);
            err = pread_full(m->data_fd, m->cow + slot * m->chunk_size,
                             (size_t)mc_chunk_len(m, c),
                             (off_t)c * m->chunk_size);
            PAUSE(MC_AT_COPY);
            pthread_mutex_lock(&m->lock);
            PUT_STATE(m, c, m->state[c] & ~ST_PENDING);
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
        m->wflight[c]++;
        missing[c - first] = ends_redirected(m, c);
        any_redirect |= (int)missing[c - first];
        mark_written(m, c);
    }
    pthread_mutex_unlock(&m->lock);
    PAUSE(MC_AT_WRITE);
    if (!any_redirect) {
        err = pwrite_full(m->data_fd, buf, (size_t)len, off);
    } else {
        for (c = first; c <= last && !err; c++) {
            long long cs = c * m->chunk_size;
            long long s = off > cs ? off : cs;
            long long e = off + len < cs + mc_chunk_len(m, c) ?
                off + len : cs + mc_chunk_len(m, c);
            err = pwrite_full(missing[c - first] ? m->redirect_fd
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
        err = pwrite_full(m->data_fd, data, (size_t)mc_chunk_len(m, c),
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

int
mc_commit(MirrorCore *m, int hold, int64_t *count, int *busy)
{
    int err = 0, g;
    int64_t n = 0;
    char *scratch = malloc((size_t)m->chunk_size);

    *busy = 0;
    *count = 0;
    if (!scratch)
        return ENOMEM;
    pthread_mutex_lock(&m->lock);
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
            } else {
                memcpy(buf, m->cow + (int64_t)slot * m->chunk_size,
                       (size_t)mc_chunk_len(m, c));
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

int
mc_is_present(MirrorCore *m, int64_t c)
{
    int present;
    pthread_mutex_lock(&m->lock);
    present = (m->state[c] & ST_PRESENT) != 0;
    pthread_mutex_unlock(&m->lock);
    return present;
}

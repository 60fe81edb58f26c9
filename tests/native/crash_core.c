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
 * Crash-point sweep of the mirror core (native/core*.c), without Python.
 *
 * A fixed scenario drives one mirror the way the agent does: writes,
 * checkpoints (version registered in a model repository, recorded in
 * flight in the agent's metadata, then COMMIT), a persister that takes
 * chunks and journals them later (the repository's put takes time, and
 * the guest writes meanwhile), versions turning stable or failing, and
 * agent restarts that recover what was in flight. The agent's durable
 * state (its metadata, the repository's log) lives in files next to the
 * core's, written in the agent's order, each write a crash point too.
 *
 * The core counts the crash points it passes (core.h). A first run
 * counts them all (N); then for every k in 1..N a child process runs the
 * scenario and SIGKILLs itself at the k-th, and this process reopens the
 * mirror, recovers as blobcr_agent/mirror/recovery.py does, takes one
 * more checkpoint, and checks that:
 *   - every stable version is exactly the image at its COMMIT (a
 *     consistent cut: its parent plus its chunks), never holding data
 *     written after it; an interrupted one may only be given up;
 *   - the last checkpoint equals what the guest reads now (no written
 *     chunk that no checkpoint would carry), and that holds every write
 *     acknowledged before the crash (the one cut by the crash: either
 *     content per chunk).
 * Every mode runs the scenario (those with one snapshot in flight first
 * persist the previous one when a checkpoint finds no room).
 *
 *   crash_core [-m mode] [-k k] [-v]     (-k: that crash point alone)
 *
 * Copyright BlobCR for OpenStack developers. Apache-2.0.
 */
#define _GNU_SOURCE
#include "core.h"
#include "stamps.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CS      512                  /* chunk size */
#define NCH     8
#define SIZE    (NCH * CS)
#define WORDS   (CS / 8)
#define SLOTS   3                    /* CoW buffer: fills up at times */
#define SPILL   2                    /* ... of which in the spill file */
#define MAXV    64
#define BAD     UINT64_MAX           /* a torn or mixed chunk */
#define MAXFAIL 8                    /* failures printed per mode */

/* The scenario. W a b: one write of chunks a..b; C: checkpoint; T n:
 * take n chunks of the oldest version (held, not yet journaled); J:
 * journal the held ones; D: persist the oldest to the end (stable);
 * F: the oldest fails (and its followers); R: agent restart. */
typedef struct { char op; int a, b; } Op;

static const Op scenario[] = {
    {'W', 0, 3}, {'C', 0, 0},               /* v1 {0-3} */
    {'W', 2, 4}, {'T', 1, 0}, {'J', 0, 0},  /* 2, 3 copied for v1 */
    {'C', 0, 0},                            /* v2: 2, 3 had copies */
    {'W', 3, 3}, {'T', 2, 0}, {'C', 0, 0},  /* v3 {3} */
    {'W', 5, 6}, {'T', 1, 0},
    {'W', 0, 3}, {'J', 0, 0},               /* over a taken chunk */
    {'D', 0, 0}, {'R', 0, 0},               /* v2 oldest, v3 behind */
    {'W', 1, 2}, {'C', 0, 0}, {'T', 2, 0}, {'J', 0, 0},
    {'W', 7, 7}, {'C', 0, 0}, {'T', 1, 0},
    {'R', 0, 0},                            /* resumed, v5 failed */
    {'W', 6, 7}, {'C', 0, 0}, {'T', 1, 0}, {'J', 0, 0}, {'F', 0, 0},
    {'W', 0, 1}, {'C', 0, 0}, {'T', 1, 0}, {'J', 0, 0},
    {'R', 0, 0},                            /* resumed alone */
    {'W', 2, 2}, {'C', 0, 0}, {'W', 2, 3}, {'D', 0, 0},
};
#define NOPS ((int)(sizeof scenario / sizeof scenario[0]))
#define FINAL NOPS                   /* the checker's own checkpoint */

enum { NONE, ADOPTED, GAVE_UP, RESUMED, NOUTCOMES };
static const char *const outcome_names[] = {
    "nothing in flight", "adopted", "given up", "resumed"
};

static int verbose;

static void
die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "crash_core: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(2);
}

/* ---- content --------------------------------------------------------- */

/* What write op i puts into chunk c (0 is the attached content). */
static uint64_t
stamp(int i, int c)
{
    return ((uint64_t)(i + 1) << 8) | (uint64_t)(c + 1);
}

static void
fill(char *buf, uint64_t v)
{
    stamp_fill(buf, WORDS, v);
}

/* The stamp a chunk holds, or BAD if it is not one stamp throughout. */
static uint64_t
stamp_of(const char *buf)
{
    return stamp_read(buf, WORDS, BAD);
}

/* The image before op i, by the scenario alone: cut[i][c]. */
static uint64_t cut[NOPS + 1][NCH];

static void
build_cuts(void)
{
    memset(cut[0], 0, sizeof cut[0]);
    for (int i = 0; i < NOPS; i++) {
        memcpy(cut[i + 1], cut[i], sizeof cut[i]);
        if (scenario[i].op == 'W')
            for (int c = scenario[i].a; c <= scenario[i].b; c++)
                cut[i + 1][c] = stamp(i, c);
    }
}

/* ---- the agent's durable state -------------------------------------- */

/* meta: the last stable version and the versions in flight, oldest
 * first (the cache metadata, replaced by a rename). */
typedef struct { int last, n, flight[MAXV]; } Meta;

/* repo.log, appended one line at a time: P v parent op (registered at
 * the checkpoint of op), C v c stamp (a chunk put, and journaled), S v
 * (stable), F v (failed). */
typedef struct {
    char state[MAXV + 1];
    int parent[MAXV + 1], op[MAXV + 1], nv;
    uint64_t chunk[MAXV + 1][NCH];
    uint8_t has[MAXV + 1][NCH];
} Repo;

typedef struct {
    MirrorCore m;
    char dir[256];
    int mode;
    int nheld, held[NCH];            /* taken, not journaled */
    uint64_t held_stamp[NCH];
    char scratch[CS];
} Agent;

static void
path_of(const Agent *a, const char *name, char *out, size_t len)
{
    snprintf(out, len, "%s/%s", a->dir, name);
}

static void
load_meta(const Agent *a, Meta *me)
{
    char path[300];
    FILE *f;
    memset(me, 0, sizeof *me);
    path_of(a, "meta", path, sizeof path);
    if (!(f = fopen(path, "r")))
        return;
    if (fscanf(f, "%d", &me->last) != 1)
        die("torn meta");
    while (me->n < MAXV && fscanf(f, "%d", &me->flight[me->n]) == 1)
        me->n++;
    fclose(f);
}

static void
save_meta(const Agent *a, const Meta *me)
{
    char path[300], tmp[300];
    FILE *f;
    path_of(a, "meta", path, sizeof path);
    path_of(a, "meta.tmp", tmp, sizeof tmp);
    if (!(f = fopen(tmp, "w")))
        die("meta.tmp: %s", strerror(errno));
    fprintf(f, "%d", me->last);
    for (int k = 0; k < me->n; k++)
        fprintf(f, " %d", me->flight[k]);
    fprintf(f, "\n");
    fclose(f);
    MC_CRASH_POINT("agent meta");
    if (rename(tmp, path) != 0)
        die("meta: %s", strerror(errno));
}

static void
repo_log(const Agent *a, const char *fmt, ...)
{
    char path[300], line[128];
    va_list ap;
    int fd, n;
    va_start(ap, fmt);
    n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    path_of(a, "repo.log", path, sizeof path);
    MC_CRASH_POINT("agent repository");
    fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd < 0 || write(fd, line, (size_t)n) != n)
        die("repo.log: %s", strerror(errno));
    close(fd);
}

static void
load_repo(const Agent *a, Repo *r)
{
    char path[300], kind;
    int v, x, y;
    unsigned long long s;
    FILE *f;
    memset(r, 0, sizeof *r);
    path_of(a, "repo.log", path, sizeof path);
    if (!(f = fopen(path, "r")))
        return;
    while (fscanf(f, " %c %d", &kind, &v) == 2) {
        if (v < 1 || v > MAXV)
            die("repo.log: version %d", v);
        if (kind == 'P' && fscanf(f, "%d %d", &x, &y) == 2) {
            r->state[v] = 'P';
            r->parent[v] = x;
            r->op[v] = y;
            r->nv = v > r->nv ? v : r->nv;
        } else if (kind == 'C' && fscanf(f, "%d %llx", &x, &s) == 2) {
            /* A chunk put twice must be put the same. */
            r->chunk[v][x] = r->has[v][x] && r->chunk[v][x] != s ? BAD : s;
            r->has[v][x] = 1;
        } else if (kind == 'S' || kind == 'F') {
            r->state[v] = kind;
        } else {
            die("repo.log: bad line");
        }
    }
    fclose(f);
}

/* ---- the agent's steps ------------------------------------------------ */

static void
open_core(Agent *a)
{
    char err[300];
    int e;
    mc_init(&a->m);
    e = mc_open(&a->m, a->dir, SIZE, CS, a->mode, SLOTS - SPILL, SPILL, 1,
                err, sizeof err);
    if (e)
        die("mc_open %s: %s", err, strerror(e));
}

/* The held chunks into the repository and the journal (one line). */
static void
journal(Agent *a)
{
    Meta me;
    load_meta(a, &me);
    for (int k = 0; k < a->nheld; k++)
        repo_log(a, "C %d %d %llx\n", me.flight[0], a->held[k],
                 (unsigned long long)a->held_stamp[k]);
    a->nheld = 0;
}

/* Take one chunk of the oldest version; 0 if it is fully taken. */
static int
take(Agent *a)
{
    char buf[CS];
    int64_t c;
    int e = mc_take(&a->m, buf, &c);
    if (e)
        die("mc_take: %s", strerror(e));
    if (c < 0)
        return 0;
    a->held[a->nheld] = (int)c;
    a->held_stamp[a->nheld++] = stamp_of(buf);
    return 1;
}

/* The oldest version in flight is persisted to the end: stable. */
static void
persist(Agent *a)
{
    Meta me;
    load_meta(a, &me);
    if (!me.n)
        return;
    journal(a);
    while (take(a))
        journal(a);
    repo_log(a, "S %d\n", me.flight[0]);
    mc_snapshot_done(&a->m, 1);
    me.last = me.flight[0];
    memmove(me.flight, me.flight + 1, sizeof(int) * (size_t)--me.n);
    save_meta(a, &me);
}

static void
checkpoint(Agent *a, int op)
{
    Meta me;
    Repo r;
    int64_t count;
    int busy, e, v;
    while (mc_commit_room(&a->m))
        persist(a);               /* the agent waits for room */
    load_meta(a, &me);
    load_repo(a, &r);
    v = r.nv + 1;
    repo_log(a, "P %d %d %d\n", v, me.n ? me.flight[me.n - 1] : me.last,
             op);
    me.flight[me.n++] = v;
    save_meta(a, &me);
    e = mc_commit(&a->m, 0, &count, &busy);
    if (e || busy)
        die("mc_commit: %s, busy %d", strerror(e), busy);
}

/* Every version in flight fails: their chunks are dirty again. */
static void
fail_all(Agent *a, int from)
{
    Meta me;
    load_meta(a, &me);
    for (int k = from; k < me.n; k++)
        repo_log(a, "F %d\n", me.flight[k]);
    mc_snapshot_done(&a->m, 0);
    me.n = 0;
    save_meta(a, &me);
}

static void
write_chunks(Agent *a, int op, int first, int last)
{
    char buf[CS * NCH];
    int64_t missing[NCH], nmissing;
    int busy, e;
    for (int c = first; c <= last; c++)
        fill(buf + (c - first) * CS, stamp(op, c));
    for (;;) {
        e = mc_write(&a->m, buf, (long long)first * CS,
                     (long long)(last - first + 1) * CS, 1, a->scratch,
                     missing, &nmissing, &busy);
        if (e || nmissing)
            die("mc_write: %s, %lld missing", strerror(e),
                (long long)nmissing);
        if (!busy)
            return;
        /* Waits for the persister (a full buffer): it takes the chunk
         * the write waits for next (urgent). */
        if (!take(a))
            persist(a);
    }
}

/* recovery.py's recover(), step by step. */
static int
recover(Agent *a)
{
    Meta me;
    Repo r;
    int64_t snap, untaken, lost, chunks[NCH], n;
    int v;
    load_meta(a, &me);
    load_repo(a, &r);
    if (!me.n)
        return NONE;
    v = me.flight[0];
    for (int k = 1; k < me.n; k++)
        repo_log(a, "F %d\n", me.flight[k]);
    if (r.state[v] == 'S') {
        if (me.n > 1) {
            mc_snapshot_done(&a->m, 0);
        } else {
            mc_resume(&a->m);
            mc_snapshot_done(&a->m, 1);
        }
        me.last = v;
        me.n = 0;
        save_meta(a, &me);
        return ADOPTED;
    }
    if (r.state[v] == 'F')
        goto give_up;             /* CommitAborted */
    mc_recovery(&a->m, 1, &snap, &untaken, &lost);
    if (lost || !snap)
        goto give_up;
    n = mc_snapshot_chunks(&a->m, chunks);
    for (int64_t k = 0; k < n; k++)
        if (!r.has[v][chunks[k]] && !mc_requeue(&a->m, chunks[k]))
            goto give_up;
    mc_resume(&a->m);
    if (me.n > 1) {
        me.n = 1;
        save_meta(a, &me);
    }
    persist(a);
    return RESUMED;
give_up:
    repo_log(a, "F %d\n", v);
    fail_all(a, 1);
    return GAVE_UP;
}

static void
restart(Agent *a)
{
    a->nheld = 0;                 /* the persister's memory is gone */
    mc_close(&a->m, 0);
    mc_destroy(&a->m);
    open_core(a);
    recover(a);
}

/* The scenario; *at tells the checker which op was under way. */
static void
run(Agent *a, volatile int *at)
{
    open_core(a);
    for (int i = 0; i < NOPS; i++) {
        const Op *o = &scenario[i];
        *at = i;
        switch (o->op) {
        case 'W': write_chunks(a, i, o->a, o->b); break;
        case 'C': checkpoint(a, i); break;
        case 'T':
            for (int k = 0; k < o->a && take(a); k++)
                ;
            break;
        case 'J': journal(a); break;
        case 'D': persist(a); break;
        case 'F': a->nheld = 0; fail_all(a, 0); break;
        case 'R': restart(a); break;
        }
    }
    *at = NOPS;
}

/* ---- the checks ------------------------------------------------------ */

/* The failures of one check, the first one in words. */
static int failed_here;
static char first_failure[200];

static void
fail(const char *fmt, ...)
{
    va_list ap;
    if (failed_here++)
        return;
    va_start(ap, fmt);
    vsnprintf(first_failure, sizeof first_failure, fmt, ap);
    va_end(ap);
}

/* The image of stable version v: its parent's plus its chunks; 0 if v
 * is not built on stable versions alone. */
static int
image_of(const Repo *r, int v, uint64_t *img)
{
    if (v == 0) {
        memset(img, 0, sizeof(uint64_t) * NCH);
        return 1;
    }
    if (r->state[v] != 'S' || !image_of(r, r->parent[v], img))
        return 0;
    for (int c = 0; c < NCH; c++)
        if (r->has[v][c])
            img[c] = r->chunk[v][c];
    return 1;
}

static uint64_t
visible(Agent *a, int c)
{
    char buf[CS];
    int64_t missing[1], nmissing;
    int e = mc_read(&a->m, buf, (long long)c * CS, CS, missing, &nmissing);
    if (e)
        die("mc_read: %s", strerror(e));
    return nmissing ? 0 : stamp_of(buf);
}

/* After a crash during op j (NOPS: none): recover, checkpoint, check. */
static int
check(Agent *a, int j)
{
    uint64_t img[NCH];
    Repo r;
    Meta me;
    int outcome;
    open_core(a);
    outcome = recover(a);
    checkpoint(a, FINAL);
    persist(a);
    load_repo(a, &r);
    load_meta(a, &me);
    for (int v = 1; v <= r.nv; v++) {
        if (r.state[v] != 'S')
            continue;
        if (!image_of(&r, v, img)) {
            fail("version %d is built on one that is not stable", v);
            continue;
        }
        if (r.op[v] == FINAL)
            continue;
        for (int c = 0; c < NCH; c++)
            if (img[c] != cut[r.op[v]][c])
                fail("version %d (COMMIT at op %d) holds %llx in "
                     "chunk %d, not %llx", v, r.op[v],
                     (unsigned long long)img[c], c,
                     (unsigned long long)cut[r.op[v]][c]);
    }
    if (!image_of(&r, me.last, img) || r.op[me.last] != FINAL)
        fail("the last checkpoint is not stable");
    for (int c = 0; c < NCH; c++) {
        uint64_t now = visible(a, c);
        int cut_by_crash = j < NOPS && scenario[j].op == 'W' &&
            c >= scenario[j].a && c <= scenario[j].b;
        if (img[c] != now)
            fail("chunk %d reads %llx, the last checkpoint holds %llx",
                 c, (unsigned long long)now, (unsigned long long)img[c]);
        if (now != cut[j][c] && !(cut_by_crash && now == stamp(j, c)))
            fail("chunk %d reads %llx, acknowledged: %llx", c,
                 (unsigned long long)now, (unsigned long long)cut[j][c]);
    }
    mc_close(&a->m, 0);
    mc_destroy(&a->m);
    return outcome;
}

static void
clear_dir(const char *dir)
{
    static const char *const names[] = {
        "data.raw", "redirect.raw", "precopy.raw", "state.bin", "gens.bin",
        "durable.bin", "meta", "meta.tmp", "repo.log", "crash.txt", NULL
    };
    char path[300];
    for (int k = 0; names[k]; k++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[k]);
        unlink(path);
    }
}

/* The scenario in a child that SIGKILLs itself at crash point k;
 * returns the op it was in and its crash message. */
static int
crash_child(Agent *a, int k, char *why, size_t why_len)
{
    volatile int *at = mmap(NULL, sizeof(int), PROT_READ | PROT_WRITE,
                            MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    char path[300];
    int status, j, fd;
    pid_t pid;
    if (at == MAP_FAILED)
        die("mmap: %s", strerror(errno));
    path_of(a, "crash.txt", path, sizeof path);
    pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0)
            dup2(fd, 2);
        alarm(20);                /* a hang fails the sweep */
        mc_crash_arm(k);
        run(a, at);
        _exit(0);
    }
    if (waitpid(pid, &status, 0) != pid)
        die("waitpid: %s", strerror(errno));
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
        die("crash point %d: the child did not crash (status %#x): it "
            "hung, failed, or the count is not deterministic", k, status);
    j = *at;
    munmap((void *)at, sizeof(int));
    why[0] = 0;
    fd = open(path, O_RDONLY);
    if (fd >= 0) {
        ssize_t n = read(fd, why, why_len - 1);
        why[n > 0 ? n - 1 : 0] = 0;     /* no newline */
        close(fd);
    }
    return j;
}

/* Every crash point of the scenario in one mode; the failures. */
static int
sweep(const char *base, int mode, int only, int *points)
{
    static Agent a;
    int counts[NOUTCOMES] = {0}, bad = 0, n;
    char why[128];
    memset(&a, 0, sizeof a);
    a.mode = mode;
    snprintf(a.dir, sizeof a.dir, "%s/%s", base, mc_mode_names[mode]);
    if (mkdir(a.dir, 0700) != 0 && errno != EEXIST)
        die("mkdir %s: %s", a.dir, strerror(errno));
    /* The run without a crash counts the points (and must pass). */
    clear_dir(a.dir);
    mc_crash_arm(0);
    {
        volatile int at;
        run(&a, &at);
    }
    n = (int)mc_crash_passed();
    mc_crash_arm(-1);
    mc_close(&a.m, 0);
    mc_destroy(&a.m);
    failed_here = 0;
    check(&a, NOPS);
    if (failed_here)
        die("%s: the scenario fails without a crash: %s",
            mc_mode_names[mode], first_failure);
    for (int k = only ? only : 1; k <= (only ? only : n); k++) {
        int j, outcome;
        clear_dir(a.dir);
        j = crash_child(&a, k, why, sizeof why);
        failed_here = 0;
        outcome = check(&a, j);
        counts[outcome]++;
        if (failed_here && (bad++ < MAXFAIL || verbose))
            printf("  %s, in op %d '%c', recovery: %s: %s (%d failed "
                   "checks)\n", why, j, scenario[j].op,
                   outcome_names[outcome], first_failure, failed_here);
    }
    clear_dir(a.dir);
    rmdir(a.dir);
    printf("crash_core: %-13s %4d crash points, %d failed; recovery: "
           "%d %s, %d %s, %d %s, %d %s\n", mc_mode_names[mode], n, bad,
           counts[NONE], outcome_names[NONE], counts[ADOPTED],
           outcome_names[ADOPTED], counts[GAVE_UP], outcome_names[GAVE_UP],
           counts[RESUMED], outcome_names[RESUMED]);
    *points = n;
    return bad;
}

int
main(int argc, char **argv)
{
    char base[] = "/tmp/crash_core.XXXXXX";
    int only = 0, mode = -1, bad = 0, total = 0, opt;
    struct timespec t0, t1;
    while ((opt = getopt(argc, argv, "m:k:v")) != -1) {
        if (opt == 'm' && (mode = mc_mode(optarg)) < 0)
            die("unknown mode %s", optarg);
        else if (opt == 'k')
            only = atoi(optarg);
        else if (opt == 'v')
            verbose = 1;
        else if (opt != 'm')
            die("usage: crash_core [-m mode] [-k k] [-v]");
    }
    if (!mkdtemp(base))
        die("mkdtemp: %s", strerror(errno));
    alarm(300);                   /* a hang in recovery fails it too */
    build_cuts();
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int md = 0; mc_mode_names[md]; md++) {
        int n;
        if (mode >= 0 && md != mode)
            continue;
        bad += sweep(base, md, only, &n);
        total += n;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    rmdir(base);
    printf("crash_core: %d crash points swept in %.1f s: %s\n", total,
           (double)(t1.tv_sec - t0.tv_sec) +
           (double)(t1.tv_nsec - t0.tv_nsec) / 1e9,
           bad ? "FAILED" : "ok");
    return bad ? 1 : 0;
}

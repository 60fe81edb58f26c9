#!/usr/bin/env bash
# Copyright 2026 The BlobCR for OpenStack Authors
#
#    Licensed under the Apache License, Version 2.0 (the "License"); you may
#    not use this file except in compliance with the License. You may obtain
#    a copy of the License at
#
#         http://www.apache.org/licenses/LICENSE-2.0
#
#    Unless required by applicable law or agreed to in writing, software
#    distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
#    WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
#    License for the specific language governing permissions and limitations
#    under the License.

# Start/stop a micro Ceph cluster (1 mon, 1 mgr, 3 bluestore OSDs) on 127.0.0.1
# for tests and benchmarks.  All state lives under DIR.
#
# usage: tools/ceph-cluster.sh {start|stop|status|stop-osd N|start-osd N|wait-clean} DIR
#
# Environment:
#   BLOBCR_CEPH_MON_PORT    mon port for a new cluster (default: the first
#                           free port from BLOBCR_CEPH_MON_PORT_FIRST)
#   BLOBCR_CEPH_MON_PORT_FIRST  first of the 100 ports searched (default 40789)
#   BLOBCR_CEPH_OSD_SIZE    size of each sparse OSD block file (default 12 GiB;
#                           sparse: only what is written takes disk space)
#   BLOBCR_CEPH_TIMEOUT     bound in seconds for waits (default 120)
set -euo pipefail

NUM_OSDS=3
WAIT_TIMEOUT=${BLOBCR_CEPH_TIMEOUT:-120}
EC_PROFILE=blobcr_k2m1
DATA_POOL=blobcr-data
META_POOL=blobcr-meta
APP=blobcr

usage() {
    echo "usage: $0 {start|stop|status|stop-osd N|start-osd N|wait-clean} DIR" >&2
    exit 2
}

die() {
    echo "ceph-cluster: error: $*" >&2
    exit 1
}

log() {
    echo "ceph-cluster: $*" >&2
}

# Every ceph call: our conf only, bounded connect time and overall time.
c() {
    timeout 60 ceph -c "$CONF" --connect-timeout 10 "$@"
}

# Same, but print the command's output only when it fails.
cq() {
    local out
    out=$(c "$@" 2>&1) || { echo "$out" >&2; return 1; }
}

# --- pid handling ---------------------------------------------------------

# Print the pid of daemon NAME (e.g. osd.1) if it is alive and really ours
# (its command line names our ceph.conf), so we never signal a foreign process.
daemon_pid() {
    local pidfile="$RUN/$1.pid" pid
    [[ -s $pidfile ]] || return 1
    pid=$(<"$pidfile")
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    [[ -r /proc/$pid/cmdline ]] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "-c $CONF " || return 1
    echo "$pid"
}

# Launch a daemon.  Ceph daemons fork and the parent returns only after the
# child initialised (or failed), then the child writes its pid file.  Output
# goes to a file so the daemon never holds the caller's pipes open.
launch() {
    local name=$1 bin=$2 id=$3 i
    daemon_pid "$name" >/dev/null && return 0
    rm -f "$RUN/$name.pid"
    if ! "$bin" -c "$CONF" -i "$id" </dev/null >>"$LOGDIR/$name.stdout" 2>&1; then
        tail -n 30 "$LOGDIR/$name.log" "$LOGDIR/$name.stdout" >&2 2>/dev/null || true
        die "$bin -i $id failed to start"
    fi
    for ((i = 0; i < 100; i++)); do
        daemon_pid "$name" >/dev/null && return 0
        sleep 0.1
    done
    tail -n 30 "$LOGDIR/$name.log" >&2 2>/dev/null || true
    die "$name did not write a pid file"
}

# Launch OSDs N... in parallel: each takes a few seconds to mount bluestore.
launch_osds() {
    local id pids=() rc=0 p
    for id in "$@"; do
        launch "osd.$id" ceph-osd "$id" &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    ((rc == 0)) || die "some OSDs failed to start"
    for id in "$@"; do
        wait_osd_state "$id" up "$WAIT_TIMEOUT" || die "osd.$id did not come up"
    done
}

# SIGTERM the given daemons, wait up to 20 s, then SIGKILL what is left.
kill_daemons() {
    local name pid i pids=()
    for name in "$@"; do
        if pid=$(daemon_pid "$name"); then
            kill -TERM "$pid" 2>/dev/null || true
            pids+=("$pid")
        fi
    done
    for ((i = 0; i < 200; i++)); do
        local alive=0
        for pid in "${pids[@]}"; do
            kill -0 "$pid" 2>/dev/null && alive=1
        done
        ((alive)) || break
        sleep 0.1
    done
    for pid in "${pids[@]}"; do
        if kill -0 "$pid" 2>/dev/null; then
            log "pid $pid ignored SIGTERM, sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
    done
    # A restarted OSD fails if the old one still holds its block file lock.
    for pid in "${pids[@]}"; do
        for ((i = 0; i < 50; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
    done
    for name in "$@"; do
        rm -f "$RUN/$name.pid" "$RUN/$name.asok"
    done
}

osd_ids() {
    local d
    for d in "$DIR"/osd/*/; do
        [[ -d $d ]] && basename "$d"
    done | sort -n
}

# --- cluster state queries --------------------------------------------------

# "up" or "down" for osd N, per the mon's osdmap.
osd_state() {
    c osd dump -f json | python3 -c '
import json, sys
n = int(sys.argv[1])
for o in json.load(sys.stdin)["osds"]:
    if o["osd"] == n:
        print("up" if o["up"] else "down")
' "$1"
}

wait_osd_state() { # N up|down SECONDS
    local deadline=$((SECONDS + $3))
    while ((SECONDS < deadline)); do
        [[ $(osd_state "$1" 2>/dev/null) == "$2" ]] && return 0
        sleep 0.5
    done
    return 1
}

# Exit 0 when every PG of every pool is active+clean, every "in" OSD is up and
# every PG reported stats after the last OSD came up (the mgr's PG states lag
# the osdmap; with 3 OSDs and size-3 pools every PG maps to every OSD).
pgs_clean() {
    local osd pg
    osd=$(c osd dump -f json) || return 1
    pg=$(c pg ls -f json) || return 1
    # Via stdin, NUL-separated: the JSON can exceed the argv string limit.
    printf '%s\0%s' "$osd" "$pg" | python3 -c '
import json, sys
osd, pg = map(json.loads, sys.stdin.read().split("\0"))
stats = pg.get("pg_stats", []) if isinstance(pg, dict) else pg
osds = osd["osds"]
ok = bool(osds) and all(o["up"] for o in osds if o["in"])
last_up = max([o["up_from"] for o in osds if o["up"]] or [0])
ok = ok and len(stats) == sum(p["pg_num"] for p in osd["pools"])
ok = ok and all(s["state"] == "active+clean" and int(s["reported_epoch"]) >= last_up
                for s in stats)
sys.exit(0 if ok else 1)
'
}

wait_clean() {
    local deadline=$((SECONDS + WAIT_TIMEOUT))
    while ((SECONDS < deadline)); do
        pgs_clean 2>/dev/null && return 0
        sleep 1
    done
    c -s >&2 || true
    die "PGs not active+clean after ${WAIT_TIMEOUT}s"
}

wait_mon() {
    local deadline=$((SECONDS + 30))
    while ((SECONDS < deadline)); do
        c mon stat >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    tail -n 30 "$LOGDIR/mon.a.log" >&2 2>/dev/null || true
    die "mon did not answer within 30s"
}

# --- creation ---------------------------------------------------------------

port_free() {
    python3 -c '
import socket, sys
s = socket.socket()
# Like the mon: a port in TIME_WAIT from an earlier cluster is usable.
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(1)
' "$1"
}

pick_port() {
    local p
    if [[ -n ${BLOBCR_CEPH_MON_PORT:-} ]]; then
        port_free "$BLOBCR_CEPH_MON_PORT" || die "port $BLOBCR_CEPH_MON_PORT is in use"
        echo "$BLOBCR_CEPH_MON_PORT"
        return
    fi
    # Each lane of tools/run-tests.sh searches its own range: two
    # clusters made at once would otherwise both see one port free.
    local first=${BLOBCR_CEPH_MON_PORT_FIRST:-40789}
    for ((p = first; p < first + 100; p++)); do
        port_free "$p" && { echo "$p"; return; }
    done
    die "no free mon port in $first-$((first + 99))"
}

write_conf() { # FSID PORT
    cat >"$CONF" <<EOF
# Loopback-only test cluster made by tools/ceph-cluster.sh.
[global]
fsid = $1
mon_host = [v2:127.0.0.1:$2]
# No authentication: a throwaway cluster bound to 127.0.0.1 only.
auth_cluster_required = none
auth_service_required = none
auth_client_required = none
run_dir = $RUN
crash_dir = $DIR/crash
# All OSDs live on one host: replicate/EC across OSDs, not hosts.
osd_crush_chooseleaf_type = 0
osd_pool_default_size = 3
osd_pool_default_min_size = 2
osd_pool_default_pg_autoscale_mode = off
mon_allow_pool_delete = true
mon_allow_pool_size_one = true
paxos_propose_interval = 0.1
# Fast failure detection.  One host means one reporter subtree, so one
# reporting OSD must suffice or a killed OSD is only noticed after 900 s.
osd_heartbeat_interval = 1
osd_heartbeat_grace = 5
mon_osd_adjust_heartbeat_grace = false
mon_osd_min_down_reporters = 1
mon_osd_reporter_subtree_level = osd
# Never mark a stopped OSD out: no rebalancing during failure tests.
mon_osd_down_out_interval = 86400
# Fresh PG states in the mgr, so waits for active+clean are short.
mgr_stats_period = 1
mon_mgr_digest_period = 1
# Mute warnings that do not matter here (the disk is shared with everything).
mon_data_avail_warn = 2
mon_data_avail_crit = 1
mon_warn_on_pool_no_redundancy = false
mon_warn_on_pool_pg_num_not_power_of_two = false
mon_pg_warn_min_per_osd = 0
mon_warn_on_insecure_global_id_reclaim = false
mon_warn_on_insecure_global_id_reclaim_allowed = false

[mon]
mon_data = $DIR/mon/\$id
admin_socket = $RUN/\$name.asok
pid_file = $RUN/\$name.pid
log_file = $LOGDIR/\$name.log
# Keyrings are unused while auth is none; per section so clients never read them.
keyring = $DIR/mon/\$id/keyring
mon_memory_target = 268435456
# restful needs certificates and nfs needs cephadm: load neither.
mgr_initial_modules = iostat

[mgr]
mgr_data = $DIR/mgr/\$id
admin_socket = $RUN/\$name.asok
pid_file = $RUN/\$name.pid
log_file = $LOGDIR/\$name.log
keyring = $DIR/mgr/\$id/keyring
public_addr = 127.0.0.1

[osd]
osd_data = $DIR/osd/\$id
admin_socket = $RUN/\$name.asok
pid_file = $RUN/\$name.pid
log_file = $LOGDIR/\$name.log
keyring = $DIR/osd/\$id/keyring
public_addr = 127.0.0.1
cluster_addr = 127.0.0.1
osd_objectstore = bluestore
# Not "block" itself: bluestore symlinks "block" to this path.
bluestore_block_path = $DIR/osd/\$id/block.img
bluestore_block_create = true
bluestore_block_size = $OSD_SIZE
bluestore_fsck_on_mkfs = false
# The OSD opens and closes its block file ~6 times at startup and each close
# waits for one aio poll period (250 ms by default).
bdev_aio_poll_ms = 50
osd_memory_target = 1073741824
osd_op_queue = wpq
# No recovery/backfill throttles: a restarted OSD must catch up in seconds.
osd_recovery_sleep = 0
osd_recovery_sleep_hdd = 0
osd_recovery_sleep_ssd = 0
osd_recovery_sleep_hybrid = 0
# 0 in the generic option means "use the device class's" (5 s per
# operation on these file-backed "hdd" OSDs): snapshot trimming and PG
# deletion would then take minutes and keep wait-clean from succeeding.
osd_snap_trim_sleep = 0
osd_snap_trim_sleep_hdd = 0
osd_snap_trim_sleep_ssd = 0
osd_snap_trim_sleep_hybrid = 0
osd_delete_sleep = 0
osd_delete_sleep_hdd = 0
osd_delete_sleep_ssd = 0
osd_delete_sleep_hybrid = 0
osd_max_backfills = 16
osd_recovery_max_active = 16

[client]
# Short timeouts so that clients fail fast instead of hanging forever.
objecter_timeout = 2
objecter_tick_interval = 1
rados_osd_op_timeout = 30
rados_mon_op_timeout = 10
client_mount_timeout = 10
EOF
}

create_cluster() {
    local fsid port i uuid id
    fsid=$(python3 -c 'import uuid; print(uuid.uuid4())')
    port=$(pick_port)
    OSD_SIZE=${BLOBCR_CEPH_OSD_SIZE:-12884901888}
    mkdir -p "$DIR/mon/a" "$DIR/mgr/x" "$DIR/osd" "$DIR/crash"
    write_conf "$fsid" "$port"
    log "creating cluster $fsid, mon on 127.0.0.1:$port"

    monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$port]" \
        "$DIR/monmap" >/dev/null
    ceph-mon -c "$CONF" -i a --mkfs --monmap "$DIR/monmap" >>"$LOGDIR/mon.a.stdout" 2>&1 ||
        { cat "$LOGDIR/mon.a.stdout" >&2; die "ceph-mon --mkfs failed"; }
    launch mon.a ceph-mon a
    wait_mon
    # The balancer could move PGs around under benchmarks; keep maps still.
    cq config set mgr mgr/balancer/active false --force
    launch mgr.x ceph-mgr x

    for ((i = 0; i < NUM_OSDS; i++)); do
        uuid=$(python3 -c 'import uuid; print(uuid.uuid4())')
        id=$(c osd new "$uuid")
        [[ $id == "$i" ]] || die "ceph osd new returned id '$id', expected $i"
        mkdir -p "$DIR/osd/$id"
        # mkfs in parallel: it is the slowest step.
        ceph-osd -c "$CONF" -i "$id" --mkfs --osd-uuid "$uuid" \
            >>"$LOGDIR/osd.$id.stdout" 2>&1 &
        eval "mkfs_$id=$!"
    done
    local failed=
    for ((i = 0; i < NUM_OSDS; i++)); do
        local v="mkfs_$i"
        wait "${!v}" || { tail -n 30 "$LOGDIR/osd.$i.stdout" >&2; failed+=" $i"; }
    done
    [[ -z $failed ]] || die "ceph-osd --mkfs failed for OSD(s)$failed"
    launch_osds $(osd_ids)

    cq osd erasure-code-profile set "$EC_PROFILE" k=2 m=1 crush-failure-domain=osd
    cq osd pool create "$DATA_POOL" 16 16 erasure "$EC_PROFILE"
    # k=2: writes keep working with one of the three OSDs down.
    cq osd pool set "$DATA_POOL" min_size 2
    cq osd pool application enable "$DATA_POOL" "$APP"
    cq osd pool create "$META_POOL" 8 8 replicated
    cq osd pool set "$META_POOL" size 3
    cq osd pool set "$META_POOL" min_size 2
    cq osd pool application enable "$META_POOL" "$APP"
    touch "$DIR/cluster-created"
}

# --- commands ---------------------------------------------------------------

cmd_start() {
    local id
    if [[ -e $DIR/cluster-created ]]; then
        local all=1
        for name in mon.a mgr.x $(osd_ids | sed 's/^/osd./'); do
            daemon_pid "$name" >/dev/null || all=0
        done
        if ((all)); then
            log "cluster already running"
        else
            # On failure, do not leave half a cluster running.
            trap 'log "start failed, stopping daemons"; cmd_stop || true' EXIT
            launch mon.a ceph-mon a
            wait_mon
            launch mgr.x ceph-mgr x
            launch_osds $(osd_ids)
        fi
    elif [[ -e $CONF ]]; then
        die "$DIR holds an incompletely created cluster; stop it and remove $DIR"
    else
        trap 'log "start failed, stopping daemons"; cmd_stop || true' EXIT
        create_cluster
    fi
    wait_clean
    trap - EXIT
    echo "$CONF"
}

cmd_stop() {
    [[ -d $RUN ]] || return 0
    # OSDs first, while the mon can still record them as down.
    kill_daemons $(osd_ids | sed 's/^/osd./')
    kill_daemons mgr.x mon.a
}

cmd_stop_osd() {
    local n=$1
    [[ -d $DIR/osd/$n ]] || die "no osd.$n in $DIR"
    # Even if it is already dead (killed, crashed), wait for the osdmap.
    kill_daemons "osd.$n"
    if ! wait_osd_state "$n" down 15; then
        # Should not happen (the OSD tells the mon on SIGTERM), but be sure.
        log "mon still reports osd.$n up; marking it down"
        cq osd down "$n"
        wait_osd_state "$n" down 15 || die "osd.$n still up in the osdmap"
    fi
}

cmd_start_osd() {
    local n=$1
    [[ -d $DIR/osd/$n ]] || die "no osd.$n in $DIR"
    launch_osds "$n"
}

# --- main ---------------------------------------------------------------------

(($# >= 2)) || usage
CMD=$1
shift
ARG=
if [[ $CMD == stop-osd || $CMD == start-osd ]]; then
    (($# == 2)) || usage
    ARG=$1
    [[ $ARG =~ ^[0-9]+$ ]] || usage
    shift
fi
(($# == 1)) || usage
mkdir -p "$1"
DIR=$(cd "$1" && pwd -P)
CONF=$DIR/ceph.conf
RUN=$DIR/run
LOGDIR=$DIR/log
mkdir -p "$RUN" "$LOGDIR"

case $CMD in
start) cmd_start ;;
stop) cmd_stop ;;
status) c -s ;;
stop-osd) cmd_stop_osd "$ARG" ;;
start-osd) cmd_start_osd "$ARG" ;;
wait-clean) wait_clean ;;
*) usage ;;
esac

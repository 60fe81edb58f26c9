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

# Start/stop a private RabbitMQ broker on 127.0.0.1 for tests and the
# project's scripts.  Everything it writes lives under DIR: config, mnesia,
# logs, the Erlang cookie (HOME=DIR) and its own epmd, on its own port.
#
# usage: tools/rabbitmq.sh start DIR [PORT]   start (no-op if running), print the url
#        tools/rabbitmq.sh stop DIR           stop the broker and its epmd, by pid
#        tools/rabbitmq.sh status DIR         exit 0 and print the url if it answers AMQP
#        tools/rabbitmq.sh url DIR            print the url (from DIR/url)
#        tools/rabbitmq.sh ctl DIR ARGS...    rabbitmqctl against this broker
#
# Files: DIR/url  rabbit://USER:PASS@127.0.0.1:PORT/  (oslo.messaging transport url)
#        DIR/pid  pid of the broker's Erlang VM (beam.smp)
#        DIR/epmd.pid  pid of the epmd this script started for DIR
#        DIR/log/  broker log (NODE.log) and startup.log (stdout/stderr)
#
# Nothing listens on other addresses: AMQP on 127.0.0.1:PORT, Erlang
# distribution on 127.0.0.1:DIST_PORT, epmd on 127.0.0.1:EPMD_PORT (ports
# are picked free at first start and kept in DIR/env).  PORT defaults to a
# free port (the previous one if it is still free).
#
# Environment:
#   BLOBCR_RABBIT_TIMEOUT   seconds to wait for start/stop (default 90)
#   BLOBCR_RABBIT_LOG_LEVEL broker log level (default info)
set -euo pipefail

WAIT_TIMEOUT=${BLOBCR_RABBIT_TIMEOUT:-90}
RMQ_BIN=/usr/lib/rabbitmq/bin
TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

usage() {
    echo "usage: $0 {start DIR [PORT]|stop DIR|status DIR|url DIR|ctl DIR ARGS...}" >&2
    exit 2
}

die() {
    echo "rabbitmq: error: $*" >&2
    exit 1
}

log() {
    echo "rabbitmq: $*" >&2
}

# --- paths and settings for DIR ---------------------------------------------

setup_paths() {
    DIR=$(realpath -m -- "$1")
    NODE_SHORT="blobcr-$(printf '%s' "$DIR" | sha1sum | cut -c1-12)"
    NODENAME="$NODE_SHORT@localhost"
    ENVFILE=$DIR/env
    CONF=$DIR/rabbitmq.conf
    LOGDIR=$DIR/log
    MNESIA=$DIR/mnesia
}

# Load ports and credentials kept from an earlier start (if any).
load_env() {
    AMQP_PORT='' DIST_PORT='' EPMD_PORT='' RUSER='' RPASS=''
    if [[ -s $ENVFILE ]]; then
        # shellcheck disable=SC1090
        . "$ENVFILE"
    fi
}

save_env() {
    local tmp=$ENVFILE.tmp
    {
        echo "AMQP_PORT=$AMQP_PORT"
        echo "DIST_PORT=$DIST_PORT"
        echo "EPMD_PORT=$EPMD_PORT"
        echo "RUSER=$RUSER"
        echo "RPASS=$RPASS"
    } >"$tmp"
    chmod 600 "$tmp"
    mv -f "$tmp" "$ENVFILE"
}

url() {
    echo "rabbit://$RUSER:$RPASS@127.0.0.1:$AMQP_PORT/"
}

# Is TCP port $1 unused on this host (no socket in any state uses it)?
port_free() {
    [[ -z $(ss -Htan "( sport = :$1 )" 2>/dev/null) ]]
}

# Print a free port below the ephemeral range, not among the arguments.
pick_port() {
    local p i taken
    for ((i = 0; i < 200; i++)); do
        p=$((20000 + RANDOM % 12000))
        taken=0
        for q in "$@"; do [[ $q == "$p" ]] && taken=1; done
        ((taken)) && continue
        port_free "$p" && { echo "$p"; return 0; }
    done
    die "no free port found"
}

# The environment every rabbitmq/erl command of this DIR runs with:
# "${RMQ_ENV[@]}" COMMAND...  (an env(1) command line, so it can be exec'd).
set_rmq_env() {
    RMQ_ENV=(env HOME="$DIR"
        RABBITMQ_NODENAME="$NODENAME"
        RABBITMQ_USE_LONGNAME=false
        RABBITMQ_CONF_ENV_FILE="$DIR/rabbitmq-env.conf"
        RABBITMQ_CONFIG_FILE="$CONF"
        RABBITMQ_CONFIG_FILES="$DIR/conf.d"
        RABBITMQ_ADVANCED_CONFIG_FILE="$DIR/advanced.config"
        RABBITMQ_ENABLED_PLUGINS_FILE="$DIR/enabled_plugins"
        RABBITMQ_MNESIA_BASE="$MNESIA"
        RABBITMQ_MNESIA_DIR="$MNESIA/$NODENAME"
        RABBITMQ_LOG_BASE="$LOGDIR"
        RABBITMQ_PID_FILE="$DIR/rabbit.pid"
        RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
        RABBITMQ_NODE_PORT="$AMQP_PORT"
        RABBITMQ_DIST_PORT="$DIST_PORT"
        RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
        RABBITMQ_CTL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
        ERL_EPMD_ADDRESS=127.0.0.1
        ERL_EPMD_PORT="$EPMD_PORT")
}

write_config() {
    mkdir -p "$LOGDIR" "$MNESIA" "$DIR/conf.d"
    : >"$DIR/rabbitmq-env.conf"
    echo '[].' >"$DIR/enabled_plugins"
    echo '[].' >"$DIR/advanced.config"
    cat >"$CONF" <<EOF
# Written by tools/rabbitmq.sh; rewritten at every start.
listeners.tcp.default = 127.0.0.1:$AMQP_PORT
listeners.ssl = none
loopback_users = none
default_user = $RUSER
default_pass = $RPASS
default_vhost = /
default_permissions.configure = .*
default_permissions.read = .*
default_permissions.write = .*
log.file.level = ${BLOBCR_RABBIT_LOG_LEVEL:-info}
log.console = false
# A test box: do not refuse publishes when the disk is nearly full.
disk_free_limit.absolute = 1MB
EOF
}

# --- pid handling ----------------------------------------------------------

# Is pid $1 alive and one of ours (its environment names DIR's mnesia base)?
ours() {
    local pid=$1
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    [[ -r /proc/$pid/environ ]] || return 1
    { tr '\0' '\n' <"/proc/$pid/environ"; } 2>/dev/null \
        | grep -qxF "RABBITMQ_MNESIA_BASE=$MNESIA"
}

# Print the broker's beam pid if it runs.
broker_pid() {
    local pid
    [[ -s $DIR/pid ]] || return 1
    pid=$(<"$DIR/pid")
    ours "$pid" || return 1
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == beam* ]] || return 1
    echo "$pid"
}

# Print the pid of the epmd we started for DIR if it runs.
epmd_pid() {
    local pid
    [[ -s $DIR/epmd.pid ]] || return 1
    pid=$(<"$DIR/epmd.pid")
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == epmd ]] || return 1
    { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null \
        | grep -qF -- "-port $EPMD_PORT " || return 1
    echo "$pid"
}

# TERM pid $1, wait, then KILL.  Returns when it is gone.
stop_pid() {
    local pid=$1 name=$2 i
    kill -TERM "$pid" 2>/dev/null || return 0
    for ((i = 0; i < WAIT_TIMEOUT * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    log "$name (pid $pid) ignored SIGTERM for ${WAIT_TIMEOUT}s, sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    die "$name (pid $pid) did not exit"
}

# --- readiness -------------------------------------------------------------

# Does 127.0.0.1:PORT speak AMQP 0-9-1?  Send the protocol header and expect
# Connection.Start: a method frame (type 1) on channel 0, class 10 method 10.
amqp_ready() {
    local hex
    hex=$(
        exec 2>/dev/null
        exec 3<>"/dev/tcp/127.0.0.1/$AMQP_PORT" || exit 1
        printf 'AMQP\x00\x00\x09\x01' >&3
        timeout 3 head -c 11 <&3 | od -An -tx1 | tr -d ' \n'
    ) || return 1
    [[ $hex == 010000????????000a000a ]]
}

show_logs() {
    local f
    for f in "$LOGDIR/startup.log" "$LOGDIR/$NODENAME.log"; do
        [[ -f $f ]] || continue
        log "--- tail of $f"
        tail -n 40 "$f" >&2 || true
    done
}

# --- commands --------------------------------------------------------------

start_epmd() {
    local pid i
    if pid=$(epmd_pid); then
        return 0
    fi
    port_free "$EPMD_PORT" || EPMD_PORT=$(pick_port "$AMQP_PORT" "$DIST_PORT")
    save_env
    # Foreground epmd in the background: we know its pid and stop it by it.
    # It listens on loopback only: 127.0.0.1 and [::1] (epmd always adds
    # loopback to -address).
    ERL_EPMD_ADDRESS=127.0.0.1 setsid epmd -port "$EPMD_PORT" \
        -address 127.0.0.1 </dev/null >>"$LOGDIR/epmd.log" 2>&1 &
    pid=$!
    echo "$pid" >"$DIR/epmd.pid"
    for ((i = 0; i < 100; i++)); do
        if epmd -port "$EPMD_PORT" -names >/dev/null 2>&1; then
            epmd_pid >/dev/null && return 0
        fi
        # (Not epmd_pid here: just forked, it may not have exec'd epmd yet.)
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    tail -n 20 "$LOGDIR/epmd.log" >&2 2>/dev/null || true
    # Ours for sure (we forked it just now): do not leave it behind.
    kill -TERM "$pid" 2>/dev/null || true
    rm -f "$DIR/epmd.pid"
    die "epmd did not start on 127.0.0.1:$EPMD_PORT"
}

cmd_start() {
    local want_port=${1:-} pid wrapper t0
    t0=$(date +%s%N)
    if [[ -n $want_port && ! $want_port =~ ^[0-9]+$ ]]; then
        die "PORT must be a number, got '$want_port'"
    fi
    mkdir -p "$DIR"
    load_env
    if pid=$(broker_pid) && amqp_ready; then
        if [[ -n $want_port && $want_port != "$AMQP_PORT" ]]; then
            log "already running on port $AMQP_PORT (not $want_port)"
        fi
        url
        return 0
    fi
    if pid=$(broker_pid); then
        die "broker pid $pid runs but does not answer AMQP on port $AMQP_PORT;" \
            "stop it first: $0 stop $DIR"
    fi

    # shellcheck source=tools/lib/apt.sh
    . "$TOP/tools/lib/apt.sh"
    # shellcheck source=tools/lib/service-packages.sh
    . "$TOP/tools/lib/service-packages.sh"
    if ! dpkg-query -W -f='${Status}' rabbitmq-server 2>/dev/null \
            | grep -q 'ok installed'; then
        ensure_packages --no-recommends "${broker_packages[@]}" \
            || die "could not install rabbitmq-server"
        # policy-rc.d must have kept the packages from starting a broker or
        # epmd (Debian runs them as users rabbitmq and epmd).
        local u
        for u in rabbitmq epmd; do
            if id "$u" >/dev/null 2>&1 && pgrep -u "$u" >/dev/null 2>&1; then
                log "WARNING: installing rabbitmq-server started processes" \
                    "of user $u: $(pgrep -u "$u" -d ' ')." \
                    "Not touching them; this is a bug in the install step."
            fi
        done
    fi
    [[ -x $RMQ_BIN/rabbitmq-server ]] || die "$RMQ_BIN/rabbitmq-server missing"

    [[ -n $RUSER ]] || RUSER=blobcr
    [[ -n $RPASS ]] || RPASS=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
    if [[ -n $want_port ]]; then
        AMQP_PORT=$want_port
        port_free "$AMQP_PORT" || die "port $AMQP_PORT is in use"
    elif [[ -z $AMQP_PORT ]] || ! port_free "$AMQP_PORT"; then
        AMQP_PORT=$(pick_port)
    fi
    if [[ -z $DIST_PORT ]] || ! port_free "$DIST_PORT"; then
        DIST_PORT=$(pick_port "$AMQP_PORT")
    fi
    [[ -n $EPMD_PORT ]] || EPMD_PORT=$(pick_port "$AMQP_PORT" "$DIST_PORT")
    [[ $DIST_PORT != "$AMQP_PORT" ]] || DIST_PORT=$(pick_port "$AMQP_PORT")
    save_env
    write_config
    start_epmd
    rm -f "$DIR/pid" "$DIR/rabbit.pid" "$DIR/url"

    # rabbitmq-server (the Debian wrapper in /usr/sbin would su to the
    # rabbitmq user and log to /var/log): run the real script as root.  It
    # stays as a small sh parent that forwards TERM; the broker writes the
    # VM's pid to RABBITMQ_PID_FILE early in its boot.
    set_rmq_env
    (cd "$DIR" && exec "${RMQ_ENV[@]}" setsid "$RMQ_BIN/rabbitmq-server" \
        </dev/null >>"$LOGDIR/startup.log" 2>&1) &
    wrapper=$!
    echo "$wrapper" >"$DIR/wrapper.pid"

    local deadline=$((SECONDS + WAIT_TIMEOUT)) ready=0
    while ((SECONDS < deadline)); do
        if [[ ! -s $DIR/pid && -s $DIR/rabbit.pid ]]; then
            pid=$(<"$DIR/rabbit.pid")
            ours "$pid" && echo "$pid" >"$DIR/pid"
        fi
        if [[ -s $DIR/pid ]] && amqp_ready; then
            ready=1
            break
        fi
        if ! kill -0 "$wrapper" 2>/dev/null && ! broker_pid >/dev/null; then
            break
        fi
        sleep 0.2
    done
    if ((!ready)); then
        show_logs
        log "broker $NODENAME failed to answer AMQP on 127.0.0.1:$AMQP_PORT" \
            "within ${WAIT_TIMEOUT}s; stopping what was started"
        cmd_stop >/dev/null 2>&1 || true
        die "rabbitmq-server did not start (logs in $LOGDIR)"
    fi
    (umask 077 && url >"$DIR/url")
    log "started $NODENAME pid $(<"$DIR/pid") on 127.0.0.1:$AMQP_PORT" \
        "in $((($(date +%s%N) - t0) / 1000000)) ms"
    url
}

cmd_stop() {
    local pid wrapper
    load_env
    if pid=$(broker_pid); then
        stop_pid "$pid" "beam (rabbitmq $NODENAME)"
    elif [[ -s $DIR/rabbit.pid ]] && pid=$(<"$DIR/rabbit.pid") && ours "$pid"; then
        stop_pid "$pid" "beam (rabbitmq $NODENAME)"
    fi
    # The sh parent of the VM exits when the VM does; make sure.
    if [[ -s $DIR/wrapper.pid ]]; then
        wrapper=$(<"$DIR/wrapper.pid")
        if ours "$wrapper"; then
            stop_pid "$wrapper" "rabbitmq-server script"
        fi
    fi
    if [[ -n $EPMD_PORT ]] && pid=$(epmd_pid); then
        stop_pid "$pid" "epmd"
    fi
    rm -f "$DIR/pid" "$DIR/rabbit.pid" "$DIR/wrapper.pid" "$DIR/epmd.pid"
    log "stopped $NODENAME"
}

cmd_status() {
    local pid
    load_env
    if pid=$(broker_pid) && amqp_ready; then
        echo "running pid $pid node $NODENAME url $(url)"
        return 0
    fi
    echo "stopped"
    return 3
}

[[ $# -ge 2 ]] || usage
cmd=$1
setup_paths "$2"
shift 2
case $cmd in
    start)
        [[ $# -le 1 ]] || usage
        cmd_start "$@"
        ;;
    stop)
        [[ $# -eq 0 ]] || usage
        cmd_stop
        ;;
    status)
        [[ $# -eq 0 ]] || usage
        cmd_status
        ;;
    url)
        [[ -s $DIR/url ]] || die "no url: the broker in $DIR was never started"
        cat "$DIR/url"
        ;;
    ctl)
        load_env
        [[ -n $EPMD_PORT ]] || die "the broker in $DIR was never started"
        cd "$DIR"
        # The CLI is an Erlang node too: loopback only, on a free port.
        ctl_port=$(pick_port "$AMQP_PORT" "$DIST_PORT" "$EPMD_PORT")
        set_rmq_env
        exec "${RMQ_ENV[@]}" RABBITMQ_CTL_DIST_PORT_MIN="$ctl_port" \
            RABBITMQ_CTL_DIST_PORT_MAX="$ctl_port" "$RMQ_BIN/rabbitmqctl" "$@"
        ;;
    *)
        usage
        ;;
esac

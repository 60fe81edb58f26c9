#!/bin/bash
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

# The devstack functions the BlobCR plugin (devstack/) calls, for running
# its phases without devstack. devstack's own function library
# (functions-common, inc/ini-config, inc/python, lib/*) is not published on
# any package registry (PyPI's "devstack" is an unrelated tool and
# devstack-tools has only dsconf), so these are written from its
# documentation: each keeps the documented behaviour and appends one line
# per call to $HARNESS_CALLS (fields separated by \x1f), for the test to
# check.
#
# What they do for real: iniset/iniget edit the files (tests/devstack_harness/
# ini.py), the service list and plugin list behave as devstack's,
# run_process starts the command (in the background, its own session, a
# pid file under $HARNESS_DIR/pids, its output in $HARNESS_DIR/logs)
# and stop_process stops it by that pid. What they only record:
# package installs (tools/install-deps.sh installs what the tests need),
# setup_develop (the tree is already installed in the test venv), Keystone
# accounts and grants (create_service_user, openstack). sudo runs the
# command as is: the tests run as root, devstack as a user with
# passwordless sudo.
#
# Environment: HARNESS_DIR, HARNESS_CALLS, HARNESS_BINDIR (devstack's
# bin directory: the test venv's), HARNESS_TRANSPORT_URL (what
# get_transport_url answers; devstack builds it from RABBIT_*),
# HARNESS_RABBIT_DIR (that broker's tools/rabbitmq.sh directory, for
# rabbitmqctl, with the "rabbit" service enabled), and the
# devstack globals the plugin reads (DEST, DATA_DIR, STACK_USER, ...).

HARNESS_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
HARNESS_DIR=${HARNESS_DIR:?the harness work directory}
HARNESS_CALLS=${HARNESS_CALLS:-$HARNESS_DIR/calls}
declare -A GITDIR

function harness_record {
    local IFS=$'\x1f'
    echo "$*" >>"$HARNESS_CALLS"
}

# --- messages and errors (functions-common) --------------------------------

function echo_summary {
    harness_record echo_summary "$@"
    echo "$@"
}

function warn {
    local line=$1
    shift
    harness_record warn "$@"
    echo "WARNING: [line $line] $*" >&2
}

function die {
    local line=$1
    shift
    harness_record die "$@"
    echo "ERROR: [line $line] $*" >&2
    exit 1
}

function trueorfalse {
    local default=$1 value=${!2:-}
    case $value in
        1 | [yY]es | YES | [tT]rue | TRUE) echo True ;;
        0 | [nN]o | NO | [fF]alse | FALSE) echo False ;;
        *) echo "$default" ;;
    esac
}

# --- services and plugins ---------------------------------------------------

function define_plugin {
    harness_record define_plugin "$@"
}

function plugin_requires {
    harness_record plugin_requires "$@"
}

function is_plugin_enabled {
    [[ ,${DEVSTACK_PLUGINS:-}, == *,$1,* ]]
}

# Any of the names enabled; nova, cinder, glance, neutron and swift also
# stand for their n-, c-, g-, q- and s- services.
function is_service_enabled {
    local service prefix
    for service in "$@"; do
        [[ ,${ENABLED_SERVICES:-}, == *,$service,* ]] && return 0
        case $service in
            nova) prefix=n- ;;
            cinder) prefix=c- ;;
            glance) prefix=g- ;;
            neutron) prefix=q- ;;
            swift) prefix=s- ;;
            *) continue ;;
        esac
        [[ ,${ENABLED_SERVICES:-} == *,$prefix* ]] && return 0
    done
    return 1
}

function enable_service {
    local service
    harness_record enable_service "$@"
    for service in "$@"; do
        if [[ ,${DISABLED_SERVICES:-}, == *,$service,* ]]; then
            warn $LINENO "$service was disabled: not enabling it"
            continue
        fi
        is_service_enabled "$service" || ENABLED_SERVICES+=",$service"
    done
    ENABLED_SERVICES=${ENABLED_SERVICES#,}
}

# --- configuration files (inc/ini-config) -----------------------------------

function iniset {
    if [[ $1 == -sudo ]]; then
        shift
    fi
    harness_record iniset "$@"
    python3 "$HARNESS_LIB/ini.py" set "$1" "$2" "$3" "$4"
}

function iniget {
    python3 "$HARNESS_LIB/ini.py" get "$1" "$2" "$3"
}

# --- RPC and Keystone (lib/rpc_backend, lib/keystone) -----------------------

function get_transport_url {
    echo "$HARNESS_TRANSPORT_URL"
}

function get_notification_url {
    echo "$HARNESS_TRANSPORT_URL"
}

function iniset_rpc_backend {
    local file=$2 section=${3:-DEFAULT}
    iniset "$file" "$section" transport_url "$(get_transport_url)"
}

# rabbitmqctl against the test's broker (tools/rabbitmq.sh ctl), the one
# HARNESS_TRANSPORT_URL names, in HARNESS_RABBIT_DIR. The harness's sudo
# is a function too, so the plugin's "sudo rabbitmqctl" reaches this one.
# shellcheck disable=SC2032
function rabbitmqctl {
    harness_record rabbitmqctl "$@"
    # Not the shell's stdin: the test sends the shell its commands there.
    "$HARNESS_LIB/../../tools/rabbitmq.sh" ctl "${HARNESS_RABBIT_DIR:?no broker of the test}" "$@" </dev/null
}

function create_service_user {
    harness_record create_service_user "$@"
}

# The openstack client (devstack's clouds.yaml names the clouds): only
# recorded, as the Keystone accounts are (role grants).
function openstack {
    harness_record openstack "$@"
}

# A service user's keystoneauth password options in SECTION.
function configure_keystoneauth {
    local file=$1 user=$2 section=$3
    iniset "$file" "$section" auth_type password
    iniset "$file" "$section" interface public
    iniset "$file" "$section" auth_url "$KEYSTONE_SERVICE_URI"
    iniset "$file" "$section" username "$user"
    iniset "$file" "$section" password "$SERVICE_PASSWORD"
    iniset "$file" "$section" user_domain_name "$SERVICE_DOMAIN_NAME"
    iniset "$file" "$section" project_name "$SERVICE_PROJECT_NAME"
    iniset "$file" "$section" project_domain_name "$SERVICE_DOMAIN_NAME"
}

function configure_keystone_authtoken_middleware {
    local file=$1 user=$2 section=${3:-keystone_authtoken}
    configure_keystoneauth "$file" "$user" "$section"
    iniset "$file" "$section" www_authenticate_uri "$KEYSTONE_SERVICE_URI"
}

# --- packages and Python (functions-common, inc/python) ---------------------

function install_package {
    harness_record install_package "$@"
}

function setup_develop {
    harness_record setup_develop "$@"
    [[ -f $1/setup.cfg ]] || die $LINENO "setup_develop: no Python project in $1"
}

function get_python_exec_prefix {
    echo "$HARNESS_BINDIR"
}

function sudo {
    "$@"
}

# --- processes (functions-common: run_process under systemd) ----------------

# run_process SERVICE COMMAND [GROUP] [USER]: only enabled services start;
# the command must start with an absolute path (systemd's ExecStart).
function run_process {
    local service=$1 command=$2
    harness_record run_process "$@"
    is_service_enabled "$service" || return 0
    [[ $command == /* ]] || die $LINENO "run_process $service: $command is not an absolute path"
    mkdir -p "$HARNESS_DIR/pids" "$HARNESS_DIR/logs"
    # shellcheck disable=SC2086  # a command line, split as systemd does
    setsid $command </dev/null >>"$HARNESS_DIR/logs/$service.log" 2>&1 &
    echo $! >"$HARNESS_DIR/pids/$service.pid"
}

function stop_process {
    local service=$1 pidfile=$HARNESS_DIR/pids/$1.pid pid i
    harness_record stop_process "$@"
    is_service_enabled "$service" || return 0
    [[ -f $pidfile ]] || return 0
    pid=$(<"$pidfile")
    rm -f "$pidfile"
    kill -TERM "$pid" 2>/dev/null || return 0
    for ((i = 0; i < 600; i++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
}

# --- what stack.sh, unstack.sh and clean.sh do around the plugin ------------

# run_phase MODE [PHASE]: source every enabled plugin's plugin.sh.
function harness_run_phase {
    local plugin
    for plugin in ${DEVSTACK_PLUGINS//,/ }; do
        if [[ -f ${GITDIR[$plugin]}/devstack/plugin.sh ]]; then
            # shellcheck disable=SC1090,SC1091
            source "${GITDIR[$plugin]}/devstack/plugin.sh" "$@"
        fi
    done
}

function harness_load_plugins {
    local plugin
    for plugin in ${DEVSTACK_PLUGINS//,/ }; do
        if [[ -f ${GITDIR[$plugin]}/devstack/override-defaults ]]; then
            # shellcheck disable=SC1090,SC1091
            source "${GITDIR[$plugin]}/devstack/override-defaults"
        fi
    done
    for plugin in ${DEVSTACK_PLUGINS//,/ }; do
        if [[ -f ${GITDIR[$plugin]}/devstack/settings ]]; then
            # shellcheck disable=SC1090,SC1091
            source "${GITDIR[$plugin]}/devstack/settings"
        fi
    done
}

# lib/cinder's configure_cinder, the backend part: each TYPE:NAME of
# CINDER_ENABLED_BACKENDS is configured by configure_cinder_backend_TYPE NAME
# if that function exists, and listed in enabled_backends; the first is
# the default volume type.
function harness_configure_cinder_backends {
    local be names="" first=""
    for be in ${CINDER_ENABLED_BACKENDS//,/ }; do
        if declare -F "configure_cinder_backend_${be%%:*}" >/dev/null; then
            "configure_cinder_backend_${be%%:*}" "${be##*:}"
        fi
        first=${first:-${be##*:}}
        names+=",${be##*:}"
    done
    iniset "$CINDER_CONF" DEFAULT enabled_backends "${names#,}"
    if [[ -n $first ]]; then
        iniset "$CINDER_CONF" DEFAULT default_volume_type "$first"
    fi
}

# stack.sh as far as plugins see it, in two parts: up to the post-config
# phase, then (after stack.sh's "Launch Services", which the test does:
# cinder-volume, ...) the extra and test-config phases. stack.sh runs with
# errexit from before its first phase; so does the test's shell.
function harness_stack_configure {
    harness_load_plugins
    harness_run_phase stack pre-install
    if is_service_enabled c-vol; then
        harness_configure_cinder_backends
    fi
    harness_run_phase stack install
    harness_run_phase stack post-config
}

function harness_stack_finish {
    harness_run_phase stack extra
    harness_run_phase stack test-config
}

# unstack.sh; clean.sh runs unstack.sh first.
function harness_unstack {
    harness_load_plugins
    harness_run_phase unstack
}

function harness_clean {
    harness_unstack
    harness_run_phase clean
}

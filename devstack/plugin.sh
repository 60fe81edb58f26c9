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

# plugin.sh: the BlobCR devstack plugin.
#
# devstack sources this file as "plugin.sh MODE [PHASE]" at fixed points of
# stack.sh, unstack.sh and clean.sh, in its own shell: the functions below
# stay defined afterwards, and lib/cinder calls configure_cinder_backend_blobcr
# NAME for every blobcr:NAME of CINDER_ENABLED_BACKENDS (before the
# "install" phase, so the function is defined at file level, outside the
# dispatch at the end).
#
# What runs when:
#   stack pre-install  check the settings, Debian packages
#   stack install      this tree into devstack's Python (builds the C core)
#   stack post-config  configuration files, data directories, Ceph pools
#                      (or the micro cluster), Nova and Horizon settings;
#                      then blobcr-agent starts: cinder-volume, which stack.sh
#                      starts next, asks it for its status when it starts
#   stack extra        the optional services (vendordata, listener, sync)
#   stack test-config  Tempest's volume feature flags
#   unstack            stop the services (and the micro cluster)
#   clean              unmount, remove state, configuration, enabled files
#
# Settings (and their defaults) are in devstack/settings; doc/source/devstack.rst
# has a local.conf.

BLOBCR_SERVICES="blobcr-agent blobcr-vendordata blobcr-nova-listener blobcr-cinder-sync"
# The secrets made at random when local.conf leaves them empty
# (blobcr_secrets): one per broker user, and the host secret.
BLOBCR_SECRETS="BLOBCR_AGENT_BUS_PASSWORD BLOBCR_CONTROL_BUS_PASSWORD BLOBCR_HOST_SECRET"

# The directory devstack installs console scripts into (its venv's bin).
function blobcr_bindir {
    get_python_exec_prefix
}

# Fail early, with the setting's name, on a value nothing downstream takes.
function blobcr_check_settings {
    local name value allowed
    for name in BLOBCR_BACKEND BLOBCR_CEPH_CLUSTER BLOBCR_QUIESCE \
            BLOBCR_CEPH_DATA_POOL_TYPE BLOBCR_CONNECTION_TYPE; do
        value=${!name}
        case $name in
            BLOBCR_BACKEND) allowed="local ceph" ;;
            BLOBCR_CEPH_CLUSTER) allowed="devstack-plugin-ceph micro" ;;
            BLOBCR_QUIESCE) allowed="none fsfreeze suspend" ;;
            BLOBCR_CEPH_DATA_POOL_TYPE) allowed="auto erasure replicated" ;;
            BLOBCR_CONNECTION_TYPE) allowed="local gpfs blobcr" ;;
        esac
        if [[ " $allowed " != *" $value "* ]]; then
            die $LINENO "BlobCR: $name=$value is not one of: $allowed"
        fi
    done
    if [[ -n $BLOBCR_CINDER_QUIESCE && " none fsfreeze suspend " != *" $BLOBCR_CINDER_QUIESCE "* ]]; then
        die $LINENO "BlobCR: BLOBCR_CINDER_QUIESCE=$BLOBCR_CINDER_QUIESCE is not one of: none fsfreeze suspend"
    fi
    if [[ $BLOBCR_BACKEND == ceph && $BLOBCR_CEPH_CLUSTER == devstack-plugin-ceph ]] \
            && ! is_plugin_enabled devstack-plugin-ceph && [[ ! -r $BLOBCR_CEPH_CONF ]]; then
        die $LINENO "BlobCR: BLOBCR_BACKEND=ceph needs a cluster: enable_plugin devstack-plugin-ceph before blobcr, set BLOBCR_CEPH_CLUSTER=micro, or point BLOBCR_CEPH_CONF at an existing cluster's ceph.conf (no $BLOBCR_CEPH_CONF)"
    fi
    if [[ -n ${BLOBCR_BUS_PASSWORD:-} ]]; then
        die $LINENO "BlobCR: BLOBCR_BUS_PASSWORD is gone: each broker user has a password of its own, BLOBCR_AGENT_BUS_PASSWORD and BLOBCR_CONTROL_BUS_PASSWORD (left empty, each is made at random)"
    fi
    if [[ -n $BLOBCR_AGENT_BUS_PASSWORD && $BLOBCR_AGENT_BUS_PASSWORD == "$BLOBCR_CONTROL_BUS_PASSWORD" ]]; then
        die $LINENO "BlobCR: BLOBCR_AGENT_BUS_PASSWORD and BLOBCR_CONTROL_BUS_PASSWORD are the same: one password for both broker users undoes the split bus"
    fi
}

# blobcr_secrets: each of BLOBCR_SECRETS that local.conf leaves empty is
# read from BLOBCR_SECRETS_FILE, or made at random (24 bytes, in hex) and
# kept there for the next stack: no broker user, no secret, shares a
# password with another or with devstack's (issue 54, finding 7).
function blobcr_secrets {
    local name value python=${PYTHON:-python3}
    for name in $BLOBCR_SECRETS; do
        [[ -z ${!name} ]] || continue
        value=""
        if [[ -f $BLOBCR_SECRETS_FILE ]]; then
            value=$(sed -n "s/^$name=//p" "$BLOBCR_SECRETS_FILE")
        fi
        if [[ -z $value ]]; then
            value=$("$python" -c 'import secrets; print(secrets.token_hex(24))')
            sudo install -d -o "$STACK_USER" -m 0755 "${BLOBCR_SECRETS_FILE%/*}"
            (umask 077 && echo "$name=$value" >>"$BLOBCR_SECRETS_FILE")
        fi
        printf -v "$name" '%s' "$value"
    done
}

# blobcr_new_conf FILE: FILE made anew, empty, the stack user's alone
# (mode 0600) before any credential goes in; the agent, as root, reads
# its own.
function blobcr_new_conf {
    rm -f "$1"
    install -m 0600 /dev/null "$1"
}

function install_blobcr_packages {
    # FUSE and the C core's build, libvirt-python's build, qemu-img for the
    # Cinder driver's image copies, patch for the connection type.
    install_package fuse3 libfuse3-dev pkg-config build-essential python3-dev \
        libvirt-dev qemu-utils patch
    if [[ $BLOBCR_BACKEND == ceph ]]; then
        # The ceph CLI makes the pools; the agent uses the rados binding
        # (devstack's venv sees the system's site-packages).
        install_package ceph-common python3-rados
        if [[ $BLOBCR_CEPH_CLUSTER == micro ]]; then
            install_package ceph-mon ceph-osd ceph-mgr
        fi
    fi
}

function install_blobcr {
    # What the agent, the driver and the Nova side share: before them.
    setup_develop "$BLOBCR_DIR/blobcr-common"
    setup_develop "$BLOBCR_DIR"
    # The driver, the Nova side and the guest side (its tools for guests
    # the plugin's tests boot): pure Python distributions of their own.
    setup_develop "$BLOBCR_DIR/blobcr-cinder"
    setup_develop "$BLOBCR_DIR/blobcr-nova"
    setup_develop "$BLOBCR_DIR/blobcr-guest"
    # The client (openstack blobcr ..., blobcr-restart) and, with Horizon,
    # the panel: distributions of their own in the tree.
    setup_develop "$BLOBCR_DIR/python-blobcrclient"
    if blobcr_horizon_wanted; then
        setup_develop "$BLOBCR_DIR/blobcr-dashboard"
    fi
    # devstack's Python (PYTHON: its global venv's when GLOBAL_VENV).
    local python=${PYTHON:-python3}
    if [[ $BLOBCR_BACKEND == ceph ]] && ! "$python" -c 'import rados' 2>/dev/null; then
        die $LINENO "BlobCR: $python cannot import rados (python3-rados): use devstack's global venv, which sees the system's site-packages"
    fi
    if [[ $BLOBCR_CONNECTION_TYPE == blobcr ]]; then
        # Nova's libvirt volume drivers and os-brick's connectors are
        # fixed tables: add BlobCR's (after stack.sh installed both).
        bash "$BLOBCR_DIR/tools/apply-connection-patches.sh" "$python" \
            || die $LINENO "BlobCR: the connection patches do not fit this Nova or os-brick: set BLOBCR_CONNECTION_TYPE=gpfs"
    fi
}

# --- the split bus ------------------------------------------------------------

function blobcr_split_bus {
    [[ $BLOBCR_SPLIT_BUS == True ]] && is_service_enabled rabbit
}

# blobcr_bus_url USER PASSWORD VHOST: devstack's transport URL, as USER
# (with PASSWORD) on VHOST.
function blobcr_bus_url {
    local python=${PYTHON:-python3}
    "$python" - "$(get_transport_url)" "$1" "$2" "$3" <<'EOF_URL'
import sys
from urllib import parse
url, user, password, vhost = sys.argv[1:]
parts = parse.urlsplit(url)
hosts = [h.rsplit('@', 1)[-1] for h in parts.netloc.split(',')]
cred = '%s:%s@' % (parse.quote(user, ''), parse.quote(password, ''))
print(parse.urlunsplit((parts.scheme, ','.join(cred + h for h in hosts),
                        '/' + parse.quote(vhost, ''), parts.query, '')))
EOF_URL
}

function blobcr_bus_vhost {
    if ! sudo rabbitmqctl list_vhosts -q | grep -qxF "$1"; then
        sudo rabbitmqctl add_vhost "$1"
    fi
}

# blobcr_bus_user USER PASSWORD VHOST...: USER (its password set anew to
# PASSWORD) with every permission on each VHOST (made if missing).
function blobcr_bus_user {
    local user=$1 password=$2 vhost
    shift 2
    if ! sudo rabbitmqctl list_users -q | awk '{print $1}' | grep -qxF "$user"; then
        sudo rabbitmqctl add_user "$user" "$password"
    fi
    sudo rabbitmqctl change_password "$user" "$password"
    for vhost in "$@"; do
        blobcr_bus_vhost "$vhost"
        sudo rabbitmqctl set_permissions -p "$vhost" "$user" '.*' '.*' '.*'
    done
}

# blobcr_bus_peer USER HOST: USER's permissions on the peer vhost, as the
# authenticated peer side wants them (blobcr_common.rpc.bus
# peer_permissions): declare and read HOST's own two queues
# (blobcr-peer.HOST, blobcr-peer-reply.HOST), publish through the default
# exchange only.
function blobcr_bus_peer {
    local user=$1 host=$2 own python=${PYTHON:-python3}
    own="^blobcr\\-peer(\\-reply)?\\.$("$python" -c 'import re, sys; print(re.escape(sys.argv[1]))' "$host")\$"
    blobcr_bus_vhost blobcr-peer
    sudo rabbitmqctl set_permissions -p blobcr-peer "$user" "$own" '^amq\.default$' "$own"
}

function configure_blobcr_bus {
    local vhost=blobcr-$BLOBCR_AGENT_HOST
    blobcr_bus_user "$vhost" "$BLOBCR_AGENT_BUS_PASSWORD" "$vhost"
    blobcr_bus_peer "$vhost" "$BLOBCR_AGENT_HOST"
    blobcr_bus_user blobcr-control "$BLOBCR_CONTROL_BUS_PASSWORD" "$vhost"
}

# blobcr_bus_caller FILE SECTION OPTION: a caller of the agents (cinder-
# volume, the listener) as the control user, each agent on its vhost.
function blobcr_bus_caller {
    local file=$1 section=$2 option=$3
    blobcr_secrets
    iniset "$file" "$section" "$option" "$(blobcr_bus_url blobcr-control "$BLOBCR_CONTROL_BUS_PASSWORD" /)"
    iniset "$file" blobcr_bus host_vhosts True
}

# configure_cinder_backend_blobcr NAME: the [NAME] section of cinder.conf.
# lib/cinder lists NAME in enabled_backends and makes a volume type NAME
# whose volume_backend_name is NAME.
function configure_cinder_backend_blobcr {
    local be_name=$1
    iniset "$CINDER_CONF" "$be_name" volume_driver blobcr_cinder.driver.BlobCRDriver
    iniset "$CINDER_CONF" "$be_name" volume_backend_name "$be_name"
    # Detached volumes go to this host's agent.
    iniset "$CINDER_CONF" "$be_name" blobcr_agent_host "$BLOBCR_AGENT_HOST"
    iniset "$CINDER_CONF" "$be_name" blobcr_exchange_dir "$BLOBCR_EXPORT_DIR"
    iniset "$CINDER_CONF" "$be_name" blobcr_rpc_timeout "$BLOBCR_RPC_TIMEOUT"
    iniset "$CINDER_CONF" "$be_name" blobcr_connection_type "$BLOBCR_CONNECTION_TYPE"
    if [[ -n $BLOBCR_CINDER_QUIESCE ]]; then
        iniset "$CINDER_CONF" "$be_name" blobcr_default_quiesce "$BLOBCR_CINDER_QUIESCE"
    fi
    if blobcr_split_bus; then
        blobcr_bus_caller "$CINDER_CONF" "$be_name" blobcr_transport_url
    fi
}

# The cinder-volume services (host@NAME) of the blobcr backends.
function blobcr_cinder_backends {
    local host be list=""
    host=$(iniget "$CINDER_CONF" DEFAULT host)
    host=${host:-$(hostname)}
    for be in ${CINDER_ENABLED_BACKENDS//,/ }; do
        if [[ ${be%%:*} == blobcr ]]; then
            list+=",$host@${be##*:}"
        fi
    done
    echo "${list#,}"
}

function blobcr_ceph {
    sudo timeout 120 ceph -c "$BLOBCR_CEPH_CONF" --name "$BLOBCR_CEPH_CLIENT" \
        --connect-timeout 30 "$@"
}

function blobcr_ceph_has_pool {
    blobcr_ceph osd pool ls | grep -qxF "$1"
}

# The data pool (erasure-coded when the cluster has the OSDs for it) and
# the metadata pool; existing pools are left as they are.
function init_blobcr_ceph {
    if [[ $BLOBCR_CEPH_CLUSTER == micro ]]; then
        sudo bash "$BLOBCR_DIR/tools/ceph-cluster.sh" start "$BLOBCR_CEPH_DIR"
    fi
    local kind=$BLOBCR_CEPH_DATA_POOL_TYPE pg=$BLOBCR_CEPH_PG_NUM up
    if [[ $kind == auto ]]; then
        up=$(blobcr_ceph osd stat -f json | python3 -c \
            'import json, sys; print(json.load(sys.stdin)["num_up_osds"])')
        kind=replicated
        if (( up >= BLOBCR_CEPH_EC_K + BLOBCR_CEPH_EC_M )); then
            kind=erasure
        fi
    fi
    if ! blobcr_ceph_has_pool "$BLOBCR_CEPH_DATA_POOL"; then
        if [[ $kind == erasure ]]; then
            local profile=blobcr_k${BLOBCR_CEPH_EC_K}m${BLOBCR_CEPH_EC_M}
            blobcr_ceph osd erasure-code-profile set "$profile" \
                "k=$BLOBCR_CEPH_EC_K" "m=$BLOBCR_CEPH_EC_M" crush-failure-domain=osd
            blobcr_ceph osd pool create "$BLOBCR_CEPH_DATA_POOL" "$pg" "$pg" erasure "$profile"
        else
            blobcr_ceph osd pool create "$BLOBCR_CEPH_DATA_POOL" "$pg" "$pg" replicated
        fi
        blobcr_ceph osd pool application enable "$BLOBCR_CEPH_DATA_POOL" blobcr
    fi
    if ! blobcr_ceph_has_pool "$BLOBCR_CEPH_META_POOL"; then
        blobcr_ceph osd pool create "$BLOBCR_CEPH_META_POOL" "$pg" "$pg" replicated
        blobcr_ceph osd pool application enable "$BLOBCR_CEPH_META_POOL" blobcr
    fi
}

# blobcr.conf, the agent's configuration, written anew.
function configure_blobcr_agent {
    local conf=$BLOBCR_CONF
    blobcr_new_conf "$conf"
    iniset "$conf" DEFAULT debug "$ENABLE_DEBUG_LOG_LEVEL"
    if blobcr_split_bus; then
        local user=blobcr-$BLOBCR_AGENT_HOST
        iniset "$conf" DEFAULT transport_url "$(blobcr_bus_url "$user" "$BLOBCR_AGENT_BUS_PASSWORD" "$user")"
        iniset "$conf" blobcr_bus host_vhosts True
        iniset "$conf" blobcr_bus peer_transport_url "$(blobcr_bus_url "$user" "$BLOBCR_AGENT_BUS_PASSWORD" blobcr-peer)"
        # The broker tells each agent which host calls (user_id).
        iniset "$conf" blobcr_bus authenticated_peers True
    else
        iniset_rpc_backend blobcr "$conf"
    fi
    iniset "$conf" agent host "$BLOBCR_AGENT_HOST"
    iniset "$conf" agent state_path "$BLOBCR_STATE_DIR"
    iniset "$conf" agent mountpoint "$BLOBCR_MOUNTPOINT"
    iniset "$conf" agent admin_socket "$BLOBCR_ADMIN_SOCKET"
    # blobcr-manage works for the stack user without sudo.
    iniset "$conf" agent admin_group "$(id -gn "$STACK_USER")"
    iniset "$conf" agent export_dir "$BLOBCR_EXPORT_DIR"
    iniset "$conf" agent quiesce "$BLOBCR_QUIESCE"
    iniset "$conf" agent libvirt_uri "$BLOBCR_LIBVIRT_URI"
    iniset "$conf" proxy listen "$BLOBCR_PROXY_LISTEN"
    iniset "$conf" proxy port "$BLOBCR_PROXY_PORT"
    iniset "$conf" proxy host_secret "$BLOBCR_HOST_SECRET"
    if [[ -n $BLOBCR_METADATA_SECRET ]]; then
        iniset "$conf" proxy metadata_proxy_shared_secret "$BLOBCR_METADATA_SECRET"
    fi
    if [[ $BLOBCR_BACKEND == ceph ]]; then
        iniset "$conf" repository backend rados
        iniset "$conf" rados conffile "$BLOBCR_CEPH_CONF"
        iniset "$conf" rados client_name "$BLOBCR_CEPH_CLIENT"
        iniset "$conf" rados data_pool "$BLOBCR_CEPH_DATA_POOL"
        iniset "$conf" rados meta_pool "$BLOBCR_CEPH_META_POOL"
        if [[ -n $BLOBCR_CEPH_NAMESPACE ]]; then
            iniset "$conf" rados namespace "$BLOBCR_CEPH_NAMESPACE"
        fi
    else
        iniset "$conf" repository backend local
        iniset "$conf" local_store path "$BLOBCR_STORE_DIR"
    fi
}

function configure_blobcr_vendordata {
    local conf=$BLOBCR_VENDORDATA_CONF
    blobcr_new_conf "$conf"
    iniset "$conf" DEFAULT debug "$ENABLE_DEBUG_LOG_LEVEL"
    iniset "$conf" vendordata listen "$BLOBCR_VENDORDATA_LISTEN"
    iniset "$conf" vendordata port "$BLOBCR_VENDORDATA_PORT"
    iniset "$conf" vendordata token_secret "$BLOBCR_HOST_SECRET"
    create_service_user "$BLOBCR_SERVICE_USER"
    configure_keystone_authtoken_middleware "$conf" "$BLOBCR_SERVICE_USER"
    # It asks Nova's API which host runs an instance (its tokens are
    # bound to it), as Nova's service user (admin in devstack); only
    # that user, who calls it for Nova's metadata API, gets tokens.
    configure_keystoneauth "$conf" nova nova
    iniset "$conf" vendordata allowed_users nova
    if is_service_enabled nova; then
        # Nova's metadata API asks blobcr-vendordata, as its own user
        # (which has the service role blobcr-vendordata asks for).
        iniset "$NOVA_CONF" api vendordata_providers StaticJSON,DynamicJSON
        iniset "$NOVA_CONF" api vendordata_dynamic_targets \
            "blobcr@http://$BLOBCR_VENDORDATA_LISTEN:$BLOBCR_VENDORDATA_PORT/"
        configure_keystoneauth "$NOVA_CONF" nova vendordata_dynamic_auth
    fi
}

function configure_blobcr_listener {
    local conf=$BLOBCR_LISTENER_CONF
    blobcr_new_conf "$conf"
    iniset "$conf" DEFAULT debug "$ENABLE_DEBUG_LOG_LEVEL"
    if blobcr_split_bus; then
        blobcr_bus_caller "$conf" DEFAULT transport_url
    else
        iniset_rpc_backend blobcr "$conf"
    fi
    iniset "$conf" oslo_messaging_notifications transport_url "$(get_notification_url)"
    # The listener acts only on what Nova's and Cinder's APIs confirm: it
    # asks them as Nova's service user (admin in devstack).
    configure_keystoneauth "$conf" nova nova
    if is_service_enabled nova; then
        # Versioned notifications, with the volumes of each instance
        # (nova-compute's nova-cpu.conf is a copy of nova.conf made when
        # it starts, after this phase).
        iniset "$NOVA_CONF" notifications notification_format both
        iniset "$NOVA_CONF" notifications bdms_in_notifications True
        iniset "$NOVA_CONF" oslo_messaging_notifications driver messagingv2
    fi
}

function configure_blobcr_sync {
    local conf=$BLOBCR_SYNC_CONF backends
    backends=$(blobcr_cinder_backends)
    if [[ -z $backends ]]; then
        die $LINENO "BlobCR: blobcr-cinder-sync is enabled but CINDER_ENABLED_BACKENDS=$CINDER_ENABLED_BACKENDS has no blobcr:NAME"
    fi
    blobcr_new_conf "$conf"
    iniset "$conf" DEFAULT debug "$ENABLE_DEBUG_LOG_LEVEL"
    iniset "$conf" blobcr_sync backends "$backends"
    # A Keystone user of its own, granted the admin role on every project
    # of the Default domain (inherited) here, as install.rst (step 5) has
    # the operator grant it. [blobcr_sync] assign_admin_role stays off
    # (its default): the sync grants itself nothing.
    create_service_user "$BLOBCR_SYNC_USER"
    openstack --os-cloud devstack-system-admin role add --user "$BLOBCR_SYNC_USER" \
        --user-domain "$SERVICE_DOMAIN_NAME" --domain Default --inherited admin
    configure_keystoneauth "$conf" "$BLOBCR_SYNC_USER" blobcr_sync
}

# The panel's enabled files into Horizon (its collectstatic runs after
# post-config).
function configure_blobcr_horizon {
    local enabled_dir=$HORIZON_DIR/openstack_dashboard/local/enabled file copied=0
    for file in "$BLOBCR_DIR"/blobcr-dashboard/blobcr_dashboard/enabled/_[0-9]*.py; do
        [[ -f $file ]] || continue
        cp "$file" "$enabled_dir/"
        copied=$((copied + 1))
    done
    if (( copied == 0 )); then
        warn $LINENO "BlobCR: no Horizon enabled file in $BLOBCR_DIR/blobcr-dashboard/blobcr_dashboard/enabled: no Checkpoints panel"
    fi
}

function blobcr_horizon_wanted {
    [[ $BLOBCR_ENABLE_HORIZON == True ]] && is_service_enabled horizon
}

function configure_blobcr {
    sudo install -d -o "$STACK_USER" -m 0755 "$BLOBCR_CONF_DIR"
    sudo install -d -m 0755 "$BLOBCR_DATA_DIR" "$BLOBCR_MOUNTPOINT"
    sudo install -d -m 0700 "$BLOBCR_STATE_DIR"
    # cinder-volume (the stack user) converts Glance images into it; the
    # agent (root) imports and exports there.
    sudo install -d -o "$STACK_USER" -m 0700 "$BLOBCR_EXPORT_DIR"
    if [[ $BLOBCR_BACKEND == ceph ]]; then
        init_blobcr_ceph
    else
        sudo install -d -m 0700 "$BLOBCR_STORE_DIR"
    fi
    blobcr_secrets
    if blobcr_split_bus; then
        configure_blobcr_bus
    fi
    configure_blobcr_agent
    if is_service_enabled blobcr-vendordata; then
        configure_blobcr_vendordata
    fi
    if is_service_enabled blobcr-nova-listener; then
        configure_blobcr_listener
    fi
    if is_service_enabled blobcr-cinder-sync; then
        configure_blobcr_sync
    fi
    if blobcr_horizon_wanted; then
        configure_blobcr_horizon
    fi
}

# Wait until the agent answers on its admin socket (it mounts first).
function wait_for_blobcr_agent {
    local deadline=$((SECONDS + BLOBCR_START_TIMEOUT))
    until sudo "$(blobcr_bindir)/blobcr-manage" --config-file "$BLOBCR_CONF" status >/dev/null 2>&1; do
        if (( SECONDS >= deadline )); then
            die $LINENO "BlobCR: blobcr-agent does not answer on $BLOBCR_ADMIN_SOCKET after $BLOBCR_START_TIMEOUT s (its log: journalctl -u devstack@blobcr-agent)"
        fi
        sleep 1
    done
}

# The agent runs as root: it mounts the FUSE mirror and drives libvirt.
function start_blobcr_agent {
    run_process blobcr-agent "$(blobcr_bindir)/blobcr-agent --config-file $BLOBCR_CONF" "" root
    if is_service_enabled blobcr-agent; then
        wait_for_blobcr_agent
    fi
}

function start_blobcr_services {
    local bin
    bin=$(blobcr_bindir)
    run_process blobcr-vendordata "$bin/blobcr-vendordata --config-file $BLOBCR_VENDORDATA_CONF"
    run_process blobcr-nova-listener "$bin/blobcr-nova-listener --config-file $BLOBCR_LISTENER_CONF"
    run_process blobcr-cinder-sync "$bin/blobcr-cinder-sync --config-file $BLOBCR_SYNC_CONF"
}

function stop_blobcr {
    local service
    for service in $BLOBCR_SERVICES; do
        stop_process "$service"
    done
    if [[ $BLOBCR_BACKEND == ceph && $BLOBCR_CEPH_CLUSTER == micro ]]; then
        sudo bash "$BLOBCR_DIR/tools/ceph-cluster.sh" stop "$BLOBCR_CEPH_DIR"
    fi
}

function cleanup_blobcr {
    local path file
    # A mount left by an agent that died: remove nothing through it.
    for path in "$BLOBCR_MOUNTPOINT/images" "$BLOBCR_MOUNTPOINT/versions" "$BLOBCR_MOUNTPOINT"; do
        if mountpoint -q "$path"; then
            sudo fusermount3 -u -z "$path"
        fi
    done
    if mountpoint -q "$BLOBCR_MOUNTPOINT"; then
        die $LINENO "BlobCR: $BLOBCR_MOUNTPOINT is still mounted: not removing $BLOBCR_DATA_DIR"
    fi
    sudo rm -rf --one-file-system "$BLOBCR_DATA_DIR"
    sudo rm -f "$BLOBCR_CONF" "$BLOBCR_VENDORDATA_CONF" "$BLOBCR_LISTENER_CONF" "$BLOBCR_SYNC_CONF" \
        "$BLOBCR_SECRETS_FILE"
    if [[ -d $HORIZON_DIR/openstack_dashboard/local/enabled ]]; then
        for file in "$BLOBCR_DIR"/blobcr-dashboard/blobcr_dashboard/enabled/_[0-9]*.py; do
            [[ -f $file ]] || continue
            rm -f "$HORIZON_DIR/openstack_dashboard/local/enabled/${file##*/}"
        done
    fi
}

function configure_blobcr_tempest {
    # What the driver supports (doc/source/cinder.rst); no online extend.
    iniset "$TEMPEST_CONFIG" volume-feature-enabled snapshot True
    iniset "$TEMPEST_CONFIG" volume-feature-enabled clone True
    iniset "$TEMPEST_CONFIG" volume-feature-enabled volume_revert True
    iniset "$TEMPEST_CONFIG" volume-feature-enabled manage_volume True
    iniset "$TEMPEST_CONFIG" volume-feature-enabled manage_snapshot True
    # An unmanaged snapshot is managed again by its old id, as RBD's.
    iniset "$TEMPEST_CONFIG" volume manage_snapshot_ref "source-name,snapshot-%s"
    iniset "$TEMPEST_CONFIG" volume-feature-enabled extend_attached_volume False
    iniset "$TEMPEST_CONFIG" volume storage_protocol file
    iniset "$TEMPEST_CONFIG" volume vendor_name "BlobCR for OpenStack"
}

# shellcheck disable=SC2086  # BLOBCR_SERVICES is a list of words
if is_service_enabled $BLOBCR_SERVICES; then
    case "$1/${2:-}" in
        stack/pre-install)
            echo_summary "BlobCR: checking settings, installing packages"
            blobcr_check_settings
            install_blobcr_packages
            ;;
        stack/install)
            echo_summary "BlobCR: installing"
            install_blobcr
            ;;
        stack/post-config)
            echo_summary "BlobCR: configuring, starting blobcr-agent"
            configure_blobcr
            start_blobcr_agent
            ;;
        stack/extra)
            echo_summary "BlobCR: starting the optional services"
            start_blobcr_services
            ;;
        stack/test-config)
            if is_service_enabled tempest; then
                configure_blobcr_tempest
            fi
            ;;
        unstack/*)
            stop_blobcr
            ;;
        clean/*)
            cleanup_blobcr
            ;;
    esac
fi

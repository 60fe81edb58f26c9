# Sourced by the tools: install the Debian packages of the arguments that
# are missing, and only those (apt-get update only when one is).
#   ensure_packages [--no-recommends] PACKAGE...
# Package scripts may not start services while we install: the project
# starts its own (RabbitMQ, libvirt) on loopback, under its own data dirs,
# so a policy-rc.d refuses every start for the duration of the install.
ensure_packages() {
    local missing=() p extra=()
    if [ "${1:-}" = "--no-recommends" ]; then
        extra=(--no-install-recommends)
        shift
    fi
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null \
            | grep -q 'ok installed' || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "$(basename "$0"): installing ${missing[*]}" >&2
        local policy=/usr/sbin/policy-rc.d placed=
        if [ ! -e "$policy" ]; then
            printf '#!/bin/sh\nexit 101\n' >"$policy"
            chmod 755 "$policy"
            placed=1
        fi
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${extra[@]}" \
            "${missing[@]}" >/dev/null || { [ -n "$placed" ] && rm -f "$policy"; return 1; }
        [ -n "$placed" ] && rm -f "$policy"
    fi
    return 0
}

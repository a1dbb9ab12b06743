# tests/chaos/nemesis.sh — the chaos harness's nemesis interface and its
# implementation for a cluster of deploy/local-cluster --netns, where every
# process is a host of its own in a network namespace (deploy/netns.sh).
# Sourced (not run) by tests/chaos/run; needs root. A schedule names nodes
# (the config's process names: r1 s1 s2 i1 i2 with one replica a partition,
# s1..sN i1..iN with N replicas, each storage node hosting a router) and
# calls only these functions, so another implementation (ssh to real hosts)
# can replace this file:
#
#   nem_init DIR              the cluster folder (cluster.json, pids/, netns)
#   nem_nodes                 every process name, one a line (a router a
#                             storage node hosts is not a process: killing,
#                             pausing or cutting off the node does it too)
#   nem_kill NODE             SIGKILL, and wait until it is gone
#   nem_start NODE            start it again, and wait until it is ready
#   nem_pause NODE            SIGSTOP          nem_resume NODE   SIGCONT
#   nem_cut A B               drop every packet between A and B (both ways)
#   nem_drop FROM TO          drop the packets from FROM to TO only (one way)
#   nem_isolate SPEC          SPEC "a,b/c,d,e": groups; every pair of nodes in
#                             different groups is cut
#   nem_heal                  the network whole again (every rule removed)
#   nem_clock NODE OFFSET     restart NODE with its wall clock stepped by
#                             OFFSET ("+5", "-3": seconds; libfaketime from
#                             Debian's faketime package, monotonic clock
#                             untouched); OFFSET 0 restarts it on the real clock
#   nem_disk NODE full|free   full: NODE's data folder moved onto a tmpfs of
#                             its own (NODE restarted), then the tmpfs filled,
#                             so its writes fail with ENOSPC; free: the filler
#                             removed and NODE restarted on its real folder
#   nem_fsync NODE fail|ok    fail: NODE's file size limit lowered to a byte
#                             (prlimit: its next log writes fail with EFBIG,
#                             as on a failing disk); ok: lifted, and
#                             NODE restarted (a node that met a write error
#                             refuses writes until it restarts)
#   nem_heal_all              everything above undone: network healed, every
#                             node resumed, clocks and disks restored, every
#                             stopped node started
#
# The network faults are iptables DROP rules inside the namespaces (INPUT
# for packets to a node, so a one-way cut is one rule in the receiver's
# namespace). Every function returns non-zero, saying why on stderr, when
# it could not do what it says.

NEM_REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"
NEM_DIR=""
declare -A NEM_ADDRS=() # node -> address, read once by nem_init
NEM_FAKETIME_LIB="/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"

nem_init() {
    local n a
    NEM_DIR="$1"
    [ -f "$NEM_DIR/cluster.json" ] && [ -f "$NEM_DIR/netns" ] || {
        echo "nemesis: $NEM_DIR is not a --netns local cluster" >&2
        return 1
    }
    NEM_ADDRS=()
    while read -r n a; do NEM_ADDRS[$n]="$a"; done < <(
        jq -r '(.index[], .storage[], .routers[]) | "\(.name) \(.url)"' "$NEM_DIR/cluster.json" |
            sed -E 's| [a-z+]+://| |; s|:[0-9]+$||')
}

nem_lc() { "$NEM_REPO/deploy/local-cluster" "$@" --dir "$NEM_DIR"; }

nem_nodes() {
    jq -r '(.index[], .storage[], (.routers[] | select(.host == null))) | .name' \
        "$NEM_DIR/cluster.json"
}

# nem_addr NODE: its address; nem_ns NODE: its namespace
nem_addr() {
    [ -n "${NEM_ADDRS[$1]:-}" ] || { echo "nemesis: no node $1" >&2; return 1; }
    echo "${NEM_ADDRS[$1]}"
}
nem_ns() { echo "sx$(cat "$NEM_DIR/netns")-$1"; }

nem_pid() { cat "$NEM_DIR/pids/$1.pid"; }

nem_kill() { nem_lc kill "$1" >/dev/null; }

nem_start() { nem_lc start "$1" >/dev/null; }

nem_pause() { kill -STOP "$(nem_pid "$1")"; }

nem_resume() { kill -CONT "$(nem_pid "$1")"; }

nem_drop() {
    ip netns exec "$(nem_ns "$2")" iptables -w -A INPUT -s "$(nem_addr "$1")" -j DROP
}

nem_cut() {
    nem_drop "$1" "$2" && nem_drop "$2" "$1"
}

# one rule per node, naming every address of the other groups, all nodes
# at once (a rule a pair, one after the other, took over a second)
nem_isolate() {
    local spec="$1" groups=() i j a b src pids=() rc=0
    IFS=/ read -r -a groups <<<"$spec"
    for ((i = 0; i < ${#groups[@]}; i++)); do
        for a in ${groups[$i]//,/ }; do
            src=""
            for ((j = 0; j < ${#groups[@]}; j++)); do
                ((j != i)) || continue
                for b in ${groups[$j]//,/ }; do src+="${src:+,}$(nem_addr "$b")"; done
            done
            [ -n "$src" ] || continue
            ip netns exec "$(nem_ns "$a")" iptables -w -A INPUT -s "$src" -j DROP &
            pids+=($!)
        done
    done
    for i in "${pids[@]}"; do wait "$i" || rc=1; done
    return "$rc"
}

nem_heal() {
    local n
    for n in $(nem_nodes); do
        ip netns exec "$(nem_ns "$n")" iptables -w -F INPUT || return 1
    done
}

nem_clock() {
    local n="$1" off="$2"
    nem_kill "$n" || return 1
    if [ "$off" = 0 ]; then
        rm -f "$NEM_DIR/chaos-clock-$n"
        nem_start "$n"
    else
        touch "$NEM_DIR/chaos-clock-$n"
        [ -f "$NEM_FAKETIME_LIB" ] || {
            echo "nemesis: $NEM_FAKETIME_LIB is missing (apt-get install faketime)" >&2
            return 1
        }
        LD_PRELOAD="$NEM_FAKETIME_LIB" FAKETIME="$off" FAKETIME_DONT_FAKE_MONOTONIC=1 \
            FAKETIME_NO_CACHE=1 nem_start "$n"
    fi
}

# the data folder of NODE, and where its real one waits while on a tmpfs
nem_data() { echo "$NEM_DIR/data/$1"; }

nem_disk() {
    local n="$1" d used
    d="$(nem_data "$n")"
    case "$2" in
        full)
            if ! mountpoint -q "$d"; then
                nem_kill "$n" || return 1
                mv "$d" "$d.real" && mkdir "$d" || return 1
                used="$(du -sm "$d.real" | cut -f1)"
                mount -t tmpfs -o "size=$((used + 256))m" chaos-disk "$d" || return 1
                cp -a "$d.real/." "$d/" || return 1
                nem_start "$n" || return 1
            fi
            # the rest of the tmpfs taken: the node's next writes meet ENOSPC
            fallocate -l "$(($(df -B1 --output=avail "$d" | tail -n 1) - 4096))" \
                "$d/chaos-filler" 2>/dev/null ||
                head -c "$(df -B1 --output=avail "$d" | tail -n 1)" /dev/zero >"$d/chaos-filler" 2>/dev/null ||
                true
            ;;
        free)
            mountpoint -q "$d" || return 0
            rm -f "$d/chaos-filler"
            nem_kill "$n" || return 1
            rm -rf "$d.real" && mkdir "$d.real" && cp -a "$d/." "$d.real/" || return 1
            umount "$d" && rmdir "$d" && mv "$d.real" "$d" || return 1
            nem_start "$n"
            ;;
        *) echo "nemesis: nem_disk NODE full|free" >&2; return 2 ;;
    esac
}

nem_fsync() {
    local n="$1" pid
    pid="$(nem_pid "$n")"
    case "$2" in
        fail)
            # a write at any offset past the limit fails, within a
            # preallocated log too (node/engine/ldb_log.h)
            touch "$NEM_DIR/chaos-fsync-$n"
            prlimit --pid "$pid" --fsize=1:unlimited
            ;;
        ok)
            prlimit --pid "$pid" --fsize=unlimited:unlimited 2>/dev/null || true
            rm -f "$NEM_DIR/chaos-fsync-$n"
            nem_kill "$n" && nem_start "$n"
            ;;
        *) echo "nemesis: nem_fsync NODE fail|ok" >&2; return 2 ;;
    esac
}

nem_heal_all() {
    local n rc=0
    nem_heal || rc=1
    for n in $(nem_nodes); do
        if [ -f "$NEM_DIR/pids/$n.pid" ]; then kill -CONT "$(nem_pid "$n")" 2>/dev/null || true; fi
        if mountpoint -q "$(nem_data "$n")"; then nem_disk "$n" free || rc=1; fi
        if [ -f "$NEM_DIR/chaos-clock-$n" ] || [ -f "$NEM_DIR/chaos-fsync-$n" ]; then
            nem_kill "$n" || rc=1
            rm -f "$NEM_DIR/chaos-clock-$n" "$NEM_DIR/chaos-fsync-$n"
        fi
    done
    nem_lc up >/dev/null || rc=1      # every stopped node started (and waited for)
    return "$rc"
}

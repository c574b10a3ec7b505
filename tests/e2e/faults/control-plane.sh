#!/usr/bin/env bash
#! Fault injection on the throwaway control plane of tests/e2e/cluster.sh (the fault
#! scenarios of tests/tests/e2e_faults.rs call it): kill etcd or kube-apiserver with SIGKILL,
#! start it again with its own command line (appending to its log), and compact etcd's
#! history so that watches resuming from an older resourceVersion get `410 Gone`.
#! Usage: control-plane.sh CLUSTER_DIR kill etcd|apiserver
#!        control-plane.sh CLUSTER_DIR start etcd|apiserver   (returns once it serves)
#!        control-plane.sh CLUSTER_DIR compact                 (prints the revision)
set -euo pipefail
dir=${1:?CLUSTER_DIR}
action=${2:?action}
name=${3:-}

case "$action" in
  kill)
    pid=$(cat "$dir/$name.pid")
    kill -9 "$pid"
    for _ in $(seq 200); do
      kill -0 "$pid" 2>/dev/null || exit 0
      sleep 0.05
    done
    echo "$name ($pid) is still alive after SIGKILL" >&2
    exit 1
    ;;
  start)
    cmd=$(cat "$dir/$name.cmd")
    setsid bash -c "exec $cmd" >>"$dir/$name.log" 2>&1 </dev/null &
    echo $! >"$dir/$name.pid"
    case "$name" in
      etcd) probe=(curl -sf "$(cat "$dir/etcd.url")/health") ;;
      apiserver) probe=(curl -skf "$(cat "$dir/apiserver.url")/readyz") ;;
      *) echo "unknown process $name" >&2; exit 2 ;;
    esac
    for _ in $(seq 600); do
      "${probe[@]}" >/dev/null 2>&1 && exit 0
      kill -0 "$(cat "$dir/$name.pid")" 2>/dev/null || { echo "$name exited; see $dir/$name.log" >&2; exit 1; }
      sleep 0.1
    done
    echo "$name did not serve within 60 s; see $dir/$name.log" >&2
    exit 1
    ;;
  compact)
    url=$(cat "$dir/etcd.url")
    rev=$(curl -sf -X POST "$url/v3/kv/range" -d '{"key":"AA=="}' |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["header"]["revision"])')
    curl -sf -X POST "$url/v3/kv/compaction" -d "{\"revision\": \"$rev\", \"physical\": true}" >/dev/null
    echo "$rev"
    ;;
  *)
    echo "usage: $0 CLUSTER_DIR kill|start etcd|apiserver | compact" >&2
    exit 2
    ;;
esac

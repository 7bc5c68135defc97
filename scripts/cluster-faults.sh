#!/usr/bin/env bash
# A long run of random faults under load (docs/cluster.md, "Tests"): the cluster test
# `network::random_faults_under_load_lose_nothing_and_leave_the_copies_identical` with FAULTS
# faults instead of CI's 6 — nodes killed, cut off (from etcd, the other nodes, or both),
# slowed to 1 Mbit/s, etcd members killed, partitions handed over to a copy — each node, etcd
# member and the clients in network namespaces of their own. It prints each fault, the operations checked, and fails if the
# history is not linearizable or a copy differs from its owner's.
#
# Needs root, `ip` and `nft` (.ci/netns), and etcd (SHARDLITE_TEST_ETCD, else `etcd` on PATH).
#   FAULTS=100 (default)  SEED=<number> draws the same faults again (printed at the start)
#   KINDS=kill,cut,slow,etcd,handover (default) the kinds drawn from: KINDS=kill is 100 node kills
set -euo pipefail
cd "$(dirname "$0")/.."
export SHARDLITE_TEST_FAULTS="${FAULTS:-100}" SHARDLITE_TEST_NETNS=1
[ -n "${SEED:-}" ] && export SHARDLITE_TEST_FAULT_SEED="$SEED"
[ -n "${KINDS:-}" ] && export SHARDLITE_TEST_FAULT_KINDS="$KINDS"
cargo test -p shardlite --test cluster --locked -- \
  network::random_faults_under_load_lose_nothing_and_leave_the_copies_identical --exact --nocapture

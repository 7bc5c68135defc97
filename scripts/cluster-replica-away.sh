#!/usr/bin/env bash
# A replica kept away while many writes land (docs/cluster.md, "Tests"): the cluster test
# `replicas::a_replica_killed_while_writes_land_is_brought_up_to_date_when_it_returns` with
# WRITES writes instead of CI's 600. Three nodes (3 copies, acks 2); n3 is killed, WRITES writes
# land through n1 and n2 (8 writers), n3 is started again; the test prints how long the writes
# took and how long n3 took to hold every write, then fails unless n3's copies of n1's and n2's
# partitions hold their owners' records, ids and counters and pass `check`.
#
# Needs etcd (SHARDLITE_TEST_ETCD, else `etcd` on PATH).
#   WRITES=100000 (default)
set -euo pipefail
cd "$(dirname "$0")/.."
export SHARDLITE_TEST_AWAY_WRITES="${WRITES:-100000}"
cargo test -p shardlite --test cluster --locked -- \
  replicas::a_replica_killed_while_writes_land_is_brought_up_to_date_when_it_returns --exact --nocapture

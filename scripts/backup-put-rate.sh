#!/bin/bash
# Durable PUT rate alone and while `shardlite backup --url` runs back to back (docs/benchmarks.md,
# "Backup and restore"): two rounds of scripts/put-rate-under.sh (wrk -t2 -c64 -d10s, new keys, 32-byte
# values, against `serve --synchronous full` on $SRC; with each, the commit log's mean flush time,
# the server's CPU and the load average). RATE="--max-rate 100" paces the backups. Needs wrk, bc,
# a release build, $SRC:
#   shardlite load --data /tmp/bk-src --records 20000000 --partitions 16
# usage: SRC=/tmp/bk-src [RATE="--max-rate 100"] [BIN=...] scripts/backup-put-rate.sh   (writes and removes /tmp/bk-live)
B=${BIN:-target/release/shardlite}; P=${PORT:-18931}
BACKUP="$B backup --url http://127.0.0.1:$P --to /tmp/bk-live $RATE; rm -rf /tmp/bk-live"
BIN=$B PORT=$P exec "$(dirname "$0")/put-rate-under.sh" "round 1, backups" "$BACKUP" "round 2, backups" "$BACKUP"

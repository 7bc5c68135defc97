#!/usr/bin/env bash
# What a move costs (docs/cluster.md, "Moving a partition: measured"): one etcd member, node
# `src` owning the one partition of the cluster (RECORDS DB-A records loaded into it), a spare
# node `dst`; a load client PUTs new keys through `src` on CONNS connections, one request at a
# time each, while `shardlite cluster move 0 dst --json` runs; then it prints the move's summary
# (records, bytes, rounds of changes, seconds, the server's write pause, the stale copy
# dropped), the data directories' sizes after it, and the client's view: PUTs acknowledged,
# refused, and the longest a single PUT took (the pause as a client sees it).
#
# usage: scripts/cluster-move-measure.sh    env: RECORDS (1000000), CONNS (4), BIN, ETCD
# Needs: etcd (Debian's etcd-server), curl, python3, a build of shardlite (BIN, release).
# Only 127.0.0.1; every process stops with the script, and its files go with it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../target/release/shardlite}
etcd=${ETCD:-etcd}
records=${RECORDS:-1000000} conns=${CONNS:-4}
# shellcheck source=cluster-etcd.sh
source "$here/cluster-etcd.sh"
src=$(port) dst=$(port)
"$bin" load --data "$dir/src" --records "$records" --partitions 1 --json >/dev/null
du -sh "$dir/src"
"$bin" cluster init --etcd "$endpoint" --partitions 1 --nodes "src=http://127.0.0.1:$src" \
  --spare-nodes "dst=http://127.0.0.1:$dst" >/dev/null
for node in src dst; do
  serve_node "$node" "${!node}"
done

# The load client: CONNS threads, each PUTting new keys through `src` until told
# to stop; each notes its acknowledged PUTs, refusals and the longest single PUT.
python3 - "http://127.0.0.1:$src" "$conns" "$dir/stop" >"$dir/load.txt" <<'PY' &
import http.client, os, sys, threading, time, urllib.parse
url, conns, stop = urllib.parse.urlparse(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
results = []
def run(t):
    c = http.client.HTTPConnection(url.hostname, url.port)
    ok = bad = 0; longest = (0.0, 0.0); n = t
    while not os.path.exists(stop):
        key = ("%032d" % n).encode().hex(); n += conns
        start = time.monotonic()
        c.request("PUT", "/kv/" + key, body=b"v" * 32)
        r = c.getresponse(); r.read()
        longest = max(longest, (time.monotonic() - start, time.time()))
        if r.status in (200, 201): ok += 1
        else: bad += 1
    results.append((ok, bad, longest))
threads = [threading.Thread(target=run, args=(t,)) for t in range(conns)]
for t in threads: t.start()
for t in threads: t.join()
took, at = max(r[2] for r in results)
print("client: %d PUTs acknowledged, %d refused, longest PUT %.1f ms (answered at %.3f)" %
      (sum(r[0] for r in results), sum(r[1] for r in results), took * 1e3, at))
PY
load=$!
sleep 2
asked=$(date +%s.%N)
"$bin" cluster move 0 dst --etcd "$endpoint" --json
echo "move asked at $asked, answered at $(date +%s.%N)"
sleep 2
touch "$dir/stop"
wait "$load"
du -sh "$dir/src" "$dir/dst"
cat "$dir/load.txt"

#!/usr/bin/env bash
# What a failover takes (docs/cluster.md, "Failover: measured"): one etcd member, nodes n1, n2,
# n3 owning PARTITIONS partitions between them, each with `--auto-failover --lease-ttl TTL`,
# each replicating to its own Litestream replica directory. RECORDS records are written through
# the nodes (batches of 500), then a writer PUTs new keys through n1 and n2 on CONNS
# connections, one request at a time each, noting every acknowledged PUT; after 2 s, `kill -9`
# of n3 and its Litestream. The script watches etcd and the nodes every 20 ms and prints:
#   detection  kill -> n3's lease gone in etcd (at most TTL)
#   failover   lease gone -> map version 2 (a survivor claims the failover, each survivor
#              restores its share from n3's replica and takes it in, one etcd transaction)
#   serving    kill -> a GET of a key in every partition n3 owned answers 200 again
# then every acknowledged PUT is read back: acknowledged, lost (all of them n3's, written in
# the replication lag before the kill), and how long before the kill the oldest lost one was
# acknowledged.
#
# usage: scripts/cluster-failover-measure.sh   env: RECORDS (30000), PARTITIONS (6), TTL (5),
#        CONNS (4), BIN, ETCD, LITESTREAM
# Needs: etcd (Debian's etcd-server), Litestream (.ci/litestream), curl, python3, a build of
# shardlite (BIN, release). Only 127.0.0.1; every process stops with the script, and its files
# go with it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../target/release/shardlite}
etcd=${ETCD:-etcd}
litestream=${LITESTREAM:-litestream}
records=${RECORDS:-30000} partitions=${PARTITIONS:-6} ttl=${TTL:-5} conns=${CONNS:-4}
# shellcheck source=cluster-etcd.sh
source "$here/cluster-etcd.sh"
n1=$(port) n2=$(port) n3=$(port)
"$bin" cluster init --etcd "$endpoint" --partitions "$partitions" \
  --nodes "n1=http://127.0.0.1:$n1,n2=http://127.0.0.1:$n2,n3=http://127.0.0.1:$n3" >/dev/null
declare -A node_pid replicator_pid
for node in n1 n2 n3; do
  RUST_LOG=warn,shardlite::cluster::auto_failover=info serve_node "$node" "${!node}" --lease-ttl "$ttl" \
    --auto-failover --litestream --litestream-replica "$dir/replica-$node" --litestream-bin "$litestream"
  node_pid[$node]=${pids[-1]}
  "$bin" litestream-config --data "$dir/$node" --replica "$dir/replica-$node" --out "$dir/$node.yml"
  "$litestream" replicate -config "$dir/$node.yml" >"$dir/$node.litestream.log" 2>&1 &
  replicator_pid[$node]=$!
  pids+=($!)
done

python3 - "$endpoint" "$n1" "$n2" "$n3" "$records" "$conns" "${node_pid[n3]}" "${replicator_pid[n3]}" <<'PY'
import base64, http.client, json, os, signal, sys, threading, time
endpoint, ports, records, conns = sys.argv[1], sys.argv[2:5], int(sys.argv[5]), int(sys.argv[6])
victim, victim_litestream = int(sys.argv[7]), int(sys.argv[8])
nodes = dict(zip(["n1", "n2", "n3"], ports))

def call(port, method, path, body=None):
    c = http.client.HTTPConnection("127.0.0.1", int(port), timeout=10)
    c.request(method, path, body=body)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data

def cluster():
    return json.loads(call(nodes["n1"], "GET", "/cluster")[1])

# The records, in batches of 500 through the nodes in turn.
for start in range(0, records, 500):
    ops = [{"op": "put", "key": ("rec-%d" % i).encode().hex(), "value": ("v%d" % i).encode().hex()}
           for i in range(start, min(start + 500, records))]
    port = ports[(start // 500) % 3]
    status, _ = call(port, "POST", "/batch", json.dumps({"ops": ops}))
    assert status == 200, status
victim_partitions = [p for p, owner in enumerate(cluster()["owners"]) if owner == "n3"]
print("%d records written; n3 owns partitions %s" % (records, victim_partitions))

# The writer: new keys through n1 and n2, each acknowledged PUT noted with its time.
acked, stop = [], threading.Event()
def write(t):
    port = nodes["n1" if t % 2 == 0 else "n2"]
    c = http.client.HTTPConnection("127.0.0.1", int(port), timeout=30)
    n = t
    while not stop.is_set():
        key = ("w-%d" % n).encode().hex(); n += conns
        try:
            c.request("PUT", "/kv/" + key, body=b"x" * 32)
            r = c.getresponse(); r.read()
        except OSError:
            c = http.client.HTTPConnection("127.0.0.1", int(port), timeout=30)
            continue
        if r.status in (200, 201):
            acked.append((key, time.monotonic()))
writers = [threading.Thread(target=write, args=(t,)) for t in range(conns)]
for w in writers: w.start()
time.sleep(2)

# A key of each of n3's partitions, to see them served again.
probes = {}
for p in victim_partitions:
    status, body = call(nodes["n3"], "GET", "/keys?partition=%d&limit=1" % p)
    probes[p] = json.loads(body)["keys"][0]["key"]

def alive_n3():
    key = base64.b64encode(b"/shardlite/alive/n3").decode()
    c = http.client.HTTPConnection(endpoint.split("//")[1].split(":")[0], int(endpoint.rsplit(":", 1)[1]), timeout=5)
    c.request("POST", "/v3/kv/range", body=json.dumps({"key": key}))
    answer = json.loads(c.getresponse().read())
    return int(answer.get("count", 0)) > 0

killed = time.monotonic()
os.kill(victim, signal.SIGKILL)
os.kill(victim_litestream, signal.SIGKILL)
detected = flipped = served = None
while served is None or flipped is None:
    now = time.monotonic()
    if detected is None and not alive_n3():
        detected = now
    if flipped is None and cluster()["version"] >= 2:
        flipped = now
    if served is None and all(call(nodes["n1"], "GET", "/kv/" + k)[0] == 200 for k in probes.values()):
        served = now
    assert now - killed < 300, "not failed over within 300 s"
    time.sleep(0.02)
stop.set()
for w in writers: w.join()
lost = [(k, at) for k, at in acked if call(nodes["n1"], "GET", "/kv/" + k)[0] != 200]
print("detection %.2f s (lease gone in etcd), failover %.2f s (lease gone -> map version 2), "
      "serving again %.2f s after the kill" % (detected - killed, flipped - detected, served - killed))
print("writes: %d acknowledged, %d lost%s" % (len(acked), len(lost),
      "" if not lost else "; the oldest lost one acknowledged %.3f s before the kill" % (killed - min(at for _, at in lost))))
PY
# The survivor that ran the failover: each partition's restore (`litestream restore`) and the whole.
grep -h 'taken over\|failed over' "$dir"/n1.log "$dir"/n2.log | sed 's/^[^ ]* *[A-Z]* [a-z_:]*: //' || true

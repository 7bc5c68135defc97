#!/usr/bin/env bash
# Owner kills with replicas (docs/cluster.md, "Failover with replicas: measured"): KILLS times, a
# fresh cluster of 3 nodes on loopback (its own etcd prefix and data directories) with
# `--copies 3 --acks 2`, PARTITIONS partitions, every node with `--auto-failover --lease-ttl
# TTL`. CONNS writers, one request at a time each, through n1 and n2: each its own keys, new
# ones and updates of its earlier ones in turn, noting every acknowledged PUT (value and tag)
# and every PUT answered otherwise since (it may or may not have happened). After a random
# 1-3 s, `kill -9` of n3; once a GET of a key in every partition n3 owned answers again, the
# writers stop and every key is read through n1: its value must be the last acknowledged one,
# with that write's tag, or one written since without an answer. Printed per kill: detection
# (kill -> lease gone in etcd), failover (-> map version 2), serving (kill -> the map changed and
# a GET of each of 200 keys answers through n1), writes acknowledged, lost; and the totals.
#
# usage: scripts/cluster-replicas-failover.sh   env: KILLS (10), PARTITIONS (16), TTL (2),
#   CONNS (8), BIN, ETCD
# Needs: etcd (Debian's etcd-server), curl, python3, a release build of shardlite (BIN). Only
# 127.0.0.1; every process stops with the script, and its files go with it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../target/release/shardlite}
etcd=${ETCD:-etcd}
kills=${KILLS:-10} partitions=${PARTITIONS:-16} ttl=${TTL:-2} conns=${CONNS:-8}
# shellcheck source=cluster-etcd.sh
source "$here/cluster-etcd.sh"
totals=$dir/totals
: >"$totals"
for kill in $(seq "$kills"); do
  n1=$(port) n2=$(port) n3=$(port)
  "$bin" cluster init --etcd "$endpoint" --etcd-prefix "/k$kill/" --partitions "$partitions" --copies 3 --acks 2 \
    --nodes "n1=http://127.0.0.1:$n1,n2=http://127.0.0.1:$n2,n3=http://127.0.0.1:$n3" >/dev/null
  declare -A node_pid=()
  for node in n1 n2 n3; do
    RUST_LOG=warn "$bin" serve --data "$dir/k$kill-$node" --listen "127.0.0.1:${!node}" --cluster --etcd "$endpoint" \
      --etcd-prefix "/k$kill/" --node-id "$node" --lease-ttl "$ttl" --auto-failover >"$dir/k$kill-$node.log" 2>&1 &
    pids+=($!)
    node_pid[$node]=$!
    disown $!
  done
  for node in n1 n2 n3; do
    for _ in $(seq 300); do curl -sf "http://127.0.0.1:${!node}/readyz" >/dev/null && break; sleep 0.1; done
  done
  python3 - "$endpoint" "/k$kill/" "$n1" "$n2" "$n3" "$conns" "${node_pid[n3]}" "$kill" "$totals" <<'PY'
import base64, http.client, json, os, random, signal, sys, threading, time
endpoint, prefix, ports, conns = sys.argv[1], sys.argv[2], sys.argv[3:6], int(sys.argv[6])
victim, kill, totals = int(sys.argv[7]), int(sys.argv[8]), sys.argv[9]
nodes = dict(zip(["n1", "n2", "n3"], ports))

def call(port, method, path, body=None):
    c = http.client.HTTPConnection("127.0.0.1", int(port), timeout=10)
    c.request(method, path, body=body)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data, r.getheader("etag")

def cluster():
    return json.loads(call(nodes["n1"], "GET", "/cluster")[1])

def alive_n3():
    key = base64.b64encode((prefix + "alive/n3").encode()).decode()
    host, port = endpoint.split("//")[1].rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=5)
    c.request("POST", "/v3/kv/range", body=json.dumps({"key": key}))
    return int(json.loads(c.getresponse().read()).get("count", 0)) > 0

# Each writer: its own keys, (last acknowledged (value, tag), values written since unanswered).
state, stop, acks = {}, threading.Event(), [0] * conns
def write(t):
    port = nodes["n1" if t % 2 == 0 else "n2"]
    c = http.client.HTTPConnection("127.0.0.1", int(port), timeout=30)
    n = 0
    while not stop.is_set():
        key = "w%d-%d" % (t, n % 200 if n >= 200 and n % 2 else n)
        value = "%s-%d" % (key, n)
        n += 1
        acked, since = state.setdefault(key, (None, []))
        since.append(value)
        try:
            c.request("PUT", "/kv/" + key.encode().hex(), body=value.encode())
            r = c.getresponse(); r.read()
        except OSError:
            c = http.client.HTTPConnection("127.0.0.1", int(port), timeout=30)
            continue
        if r.status in (200, 201):
            state[key] = ((value, r.getheader("etag")), [])
            acks[t] += 1
writers = [threading.Thread(target=write, args=(t,)) for t in range(conns)]
for w in writers: w.start()
time.sleep(1 + 2 * random.random())
killed = time.monotonic()
os.kill(victim, signal.SIGKILL)
detected = flipped = served = None
while flipped is None or served is None:
    now = time.monotonic()
    if detected is None and not alive_n3():
        detected = now
    if flipped is None and cluster()["version"] >= 2:
        flipped = now
    if flipped is not None and served is None:
        keys = [k for k in list(state)[:200]]
        if all(call(nodes["n1"], "GET", "/kv/" + k.encode().hex())[0] in (200, 404) for k in keys):
            served = now
    assert now - killed < 120, "not failed over within 120 s"
    time.sleep(0.02)
stop.set()
for w in writers: w.join()
lost = []
for key, (last, since) in state.items():
    status, body, tag = call(nodes["n1"], "GET", "/kv/" + key.encode().hex())
    value = body.decode() if status == 200 else None
    if last and value == last[0]:
        if tag != last[1]:
            lost.append((key, "tag %s, acknowledged %s" % (tag, last[1])))
    elif value not in since and (last or value is not None):
        lost.append((key, "read %r, acknowledged %r" % (value, last and last[0])))
print("kill %d: detection %.2f s, failover %.2f s, serving %.2f s after the kill; %d writes acknowledged "
      "(%d keys), %d lost%s"
      % (kill, detected - killed, flipped - detected, served - killed, sum(acks), len(state), len(lost),
         "" if not lost else ": " + "; ".join("%s %s" % l for l in lost[:3])))
open(totals, "a").write("%d %d %d\n" % (sum(acks), len(lost), 1))
PY
  for node in n1 n2 n3; do kill "${node_pid[$node]}" 2>/dev/null || true; done
  for _ in $(seq 100); do kill -0 "${node_pid[n1]}" "${node_pid[n2]}" 2>/dev/null || break; sleep 0.1; done
  rm -rf "$dir/k$kill-"*
done
awk '{acked += $1; lost += $2; kills += $3} END {printf "%d owner kills, %d writes acknowledged, %d lost\n", kills, acked, lost}' "$totals"

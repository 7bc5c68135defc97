# Sourced by the cluster measurement scripts (with `etcd` set): a temporary directory `dir`,
# removed at exit with every process in `pids` killed; `port` (a free loopback port); and one
# etcd member serving at `endpoint`.
dir=$(mktemp -d /tmp/shardlite-cluster.XXXXXX)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"' EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
client=$(port) peer=$(port)
endpoint=http://127.0.0.1:$client
"$etcd" --data-dir "$dir/etcd" --listen-client-urls "$endpoint" --advertise-client-urls "$endpoint" \
  --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
  --initial-cluster "default=http://127.0.0.1:$peer" --log-level warn >"$dir/etcd.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do curl -sf "$endpoint/health" >/dev/null && break; sleep 0.1; done

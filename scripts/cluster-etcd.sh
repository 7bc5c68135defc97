# Sourced by the cluster measurement scripts (with `etcd` and `bin` set): a temporary directory
# `dir`, removed at exit with every process in `pids` killed; `port` (a free loopback port); one
# etcd member serving at `endpoint`; and `serve_node NODE PORT [serve flags...]`, which starts
# node NODE of the map on $dir/NODE and waits until it is ready; `owner_and_proxy` (with `records`
# and `parts` set): the forwarding measurements' two nodes, `owner` owning all the partitions with
# that many DB-A records loaded and a spare `proxy` owning none, both started (their ports in
# `owner` and `proxy`, their processes in `owner_pid` and `proxy_pid`).
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
serve_node() {
  local node=$1 at=$2
  shift 2
  RUST_LOG=${RUST_LOG:-warn} "$bin" serve --data "$dir/$node" --listen "127.0.0.1:$at" --cluster --etcd "$endpoint" \
    --node-id "$node" "$@" >"$dir/$node.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 600); do curl -sf "http://127.0.0.1:$at/readyz" >/dev/null && break; sleep 0.1; done
}
owner_and_proxy() {
  owner=$(port) proxy=$(port)
  "$bin" load --data "$dir/owner" --records "$records" --partitions "$parts" --json >/dev/null
  "$bin" cluster init --etcd "$endpoint" --partitions "$parts" --nodes "owner=http://127.0.0.1:$owner" \
    --spare-nodes "proxy=http://127.0.0.1:$proxy" >/dev/null
  serve_node owner "$owner"
  owner_pid=${pids[-1]}
  serve_node proxy "$proxy"
  proxy_pid=${pids[-1]}
}

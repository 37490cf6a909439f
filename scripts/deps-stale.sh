#!/usr/bin/env bash
# Exits 0 when the installed dependencies are missing or older than what the repo asks for: package-lock.json, or
# a file under patches/ (applied to node_modules by patch-package on `npm ci`), newer than the last install, or
# native modules built for another Node ABI than the `node` on PATH (better-sqlite3 is compiled per ABI).
# The install records its Node in node_modules/.keyflow-node (package.json's postinstall: "<version> <ABI>"); a
# node_modules without it was installed before this check existed, so it counts as stale too.
# Used by scripts/start.sh and scripts/test-all.sh (after scripts/node-runtime.sh) to decide whether to run `npm ci`.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
installed=node_modules/.package-lock.json
[[ ! -f $installed || package-lock.json -nt $installed ]] && exit 0
[[ -n "$(find patches -type f -newer "$installed" 2>/dev/null)" ]] && exit 0
stamp=node_modules/.keyflow-node
[[ ! -f $stamp ]] && exit 0
read -r _ installed_abi <"$stamp"
if [[ $installed_abi != "$(node -p 'process.versions.modules')" ]]; then
  echo "deps-stale: node_modules was installed with Node $(cat "$stamp") (version, ABI), this is $(node --version)" >&2
  exit 0
fi
# A binary swapped for another line and not swapped back (scripts/unit-oldest-node.sh killed) does not load here.
node -e 'new (require("better-sqlite3"))(":memory:").close()' 2>/dev/null || exit 0
exit 1

#!/usr/bin/env bash
# Exits 0 when the installed dependencies are missing or older than what the repo asks for: package-lock.json, or
# a file under patches/ (applied to node_modules by patch-package on `npm ci`), newer than the last install.
# Used by scripts/start.sh and scripts/test-all.sh to decide whether to run `npm ci`.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
installed=node_modules/.package-lock.json
[[ ! -f $installed || package-lock.json -nt $installed ]] && exit 0
[[ -n "$(find patches -type f -newer "$installed" 2>/dev/null)" ]] && exit 0
exit 1

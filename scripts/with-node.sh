#!/usr/bin/env bash
# Runs a command on the Node line the project's scripts run on (scripts/node-runtime.sh): `scripts/with-node.sh node
# -r @swc-node/register x.ts`. The package.json scripts that run project code go through it, so they run on that line
# also when npm itself was started by another Node (e.g. a machine's Node 20).
set -euo pipefail
# shellcheck source=scripts/node-runtime.sh
source "$(dirname "${BASH_SOURCE[0]}")/node-runtime.sh"
exec "$@"

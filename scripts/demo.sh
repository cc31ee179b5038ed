#!/usr/bin/env bash
# The gateway on its embedded default, with demo backends: builds hopgate
# (installing protoc first when it is missing: the etcd client's build
# script needs it) and runs `hopgate demo`. Arguments go to `hopgate demo`
# (`--drive`: tell the story, count, exit).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh --build
exec cargo run --release --locked -p hopgate -- demo "$@"

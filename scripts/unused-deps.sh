#!/usr/bin/env bash
# Fails when a crate declares a dependency its code never names.
#
# For every crate under crates/, each entry of [dependencies] must be named
# (as `crate_name`, dashes turned into underscores) somewhere in src/ or
# benches/, and each [dev-dependencies] entry in src/, tests/ or benches/.
# A textual check, like cargo-machete's, and as quick: no build needed.
set -euo pipefail
cd "$(dirname "$0")/.."

section() { # file section -> dependency names
  awk -v want="[$2]" '
    /^\[/ { on = ($0 == want); next }
    on && /^[A-Za-z0-9_-]+[ .]/ { sub(/[ .=].*/, ""); print }
  ' "$1"
}

bad=0
for manifest in crates/*/Cargo.toml; do
  dir=$(dirname "$manifest")
  for kind in dependencies dev-dependencies; do
    where=("$dir/src")
    [ -d "$dir/benches" ] && where+=("$dir/benches")
    if [ "$kind" = dev-dependencies ] && [ -d "$dir/tests" ]; then where+=("$dir/tests"); fi
    for dep in $(section "$manifest" "$kind"); do
      name=${dep//-/_}
      if ! grep -rqw -- "$name" "${where[@]}"; then
        echo "unused: $manifest [$kind] $dep"
        bad=1
      fi
    done
  done
done
if [ "$bad" -ne 0 ]; then
  echo "remove the dependencies above (or use them)"
  exit 1
fi
echo "unused-deps: none"

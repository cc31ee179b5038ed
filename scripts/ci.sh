#!/usr/bin/env bash
# The whole test suite, as CI runs it: formatting, lints, every test
# (unit, integration with real processes on loopback), every example config
# through `hopgate validate`, short smokes of the benchmarks and the
# profile-guided build's training mix.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s ==\n' "$*"; }

step "dependencies"
bash scripts/deps.sh

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "a gateway without the demo/test backend (--no-default-features)"
cargo clippy --locked -p hopgate --no-default-features -- -D warnings

step "no unused dependencies"
bash scripts/unused-deps.sh

step "no import cycles between modules"
python3 scripts/module-cycles.py

step "cargo test"
cargo test --workspace --locked

step "hopgate validate examples/*"
for f in examples/*.yaml; do
  cargo run --quiet --locked -p hopgate -- validate "$f"
done

step "Kubernetes manifests (schemas, config, probes and grace periods)"
python3 scripts/check-kubernetes.py --self-test
python3 scripts/check-kubernetes.py --hopgate target/debug/hopgate

step "fuzz targets (15 s each)"
bash scripts/fuzz.sh 15

step "criterion benches (smoke: each bench once, test profile)"
cargo test --locked -p hopgate-core --benches >/dev/null
echo "benches ran"

step "load benchmark (smoke)"
# The `quick` profile: the smoke checks that the benchmark runs; the
# release profile's whole-program pass would add ~3.5 minutes.
cargo build --profile quick --locked -p hopgate
HOPGATE_BIN="$PWD/target/quick/hopgate" \
  bash bench/run.sh --quick --strict --no-build --only direct,floor,floor-hdr,nginx,haproxy,hopgate

step "instructions per request within budget (callgrind, ~15 s)"
# The quick build just made: bench/callgrind.sh's count against
# bench/callgrind-budget.txt (+3 %); how to update it: bench/callgrind-check.sh.
bash bench/callgrind-check.sh target/quick/hopgate

step "the profile-guided build's training mix (through the quick build)"
# The two release builds of scripts/build-pgo.sh stay out of CI (~12
# minutes); the training mix it feeds them runs here, every answer checked.
bash scripts/build-pgo.sh --train-with target/quick/hopgate

step "all green"

#!/usr/bin/env bash
# bench/callgrind-check.sh [--update] [BIN]: CI's check that the request
# path has not grown. Counts the instructions per proxied request with
# bench/callgrind.sh (one worker thread, two nginx origins, wrk -t1 -c4,
# 2 s of warm-up, 6 s counted; the recipe of docs/BENCHMARKS.md) on BIN
# (default target/quick/hopgate, the `--profile quick` build), and fails
# when they exceed the budget of bench/callgrind-budget.txt: its
# `instructions` figure plus `tolerance_percent` of it.
#
# Instruction counts do not depend on the machine's speed or load the way
# times do, but they move a little with how many requests each turn of the
# event loop serves (wrk's four connections arrive together or not): 3
# runs on a busy 2-core machine spread by < 1 % (docs/BENCHMARKS.md), so
# the tolerance is 3 %.
#
# Updating the budget (a change that makes each request dearer on
# purpose, or one that makes it cheaper and should be kept so):
#   cargo build --profile quick --locked -p hopgate
#   bash bench/callgrind-check.sh --update
# writes the measured figure into bench/callgrind-budget.txt (the
# tolerance stays); commit it with the change and say why in its message.
# CG_BUDGET_FILE names another budget file.
set -euo pipefail
cd "$(dirname "$0")/.."
UPDATE=0
if [[ ${1:-} == --update ]]; then UPDATE=1; shift; fi
BIN=${1:-target/quick/hopgate}
BUDGET=${CG_BUDGET_FILE:-bench/callgrind-budget.txt}
# The least requests a run must count for its figure to mean something.
MIN_REQUESTS=2000

value() { awk -v k="$1" '$1 == k { print $2; exit }' "$BUDGET"; }
FIGURE=$(value instructions)
TOL=$(value tolerance_percent)
if [[ -z $FIGURE || -z $TOL ]]; then
  echo "callgrind-check: $BUDGET needs the lines 'instructions N' and 'tolerance_percent P'" >&2
  exit 2
fi
for tool in valgrind callgrind_control nginx wrk; do
  command -v "$tool" >/dev/null || { echo "callgrind-check: $tool is missing (bash scripts/deps.sh)" >&2; exit 2; }
done
[[ -x $BIN ]] || { echo "callgrind-check: no binary at $BIN (cargo build --profile quick -p hopgate)" >&2; exit 2; }

# Measured from a copy: a build running meanwhile cannot swap the binary
# under valgrind.
WORK=$(mktemp -d "${TMPDIR:-/tmp}/hopgate-cg-check.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cp "$BIN" "$WORK/hopgate"
OUT=$(bash bench/callgrind.sh "$WORK/hopgate" ci-check 2>&1) || true
echo "$OUT" | grep -v '^sending command' || true
LINE=$(echo "$OUT" | grep -m1 'per_request=' || true)
PER=$(sed -nE 's/.* per_request=([0-9]+).*/\1/p' <<<"$LINE")
REQS=$(sed -nE 's/.* requests=([0-9]+) .*/\1/p' <<<"$LINE")
if [[ -z $PER || -z $REQS ]]; then
  echo "callgrind-check: no figure from bench/callgrind.sh (see its output above)" >&2
  exit 1
fi
if echo "$OUT" | grep -qE 'Non-2xx|Socket errors'; then
  echo "callgrind-check: the proxied requests failed (wrk saw errors): the figure means nothing" >&2
  exit 1
fi
if ((REQS < MIN_REQUESTS)); then
  echo "callgrind-check: only $REQS requests counted (at least $MIN_REQUESTS): too few to judge" >&2
  exit 1
fi
LIMIT=$(( FIGURE + FIGURE * TOL / 100 ))
if ((UPDATE)); then
  sed -i -E "s/^instructions [0-9]+/instructions $PER/" "$BUDGET"
  echo "callgrind-check: budget updated: $FIGURE -> $PER instructions per request ($BUDGET)"
  exit 0
fi
DELTA=$(python3 -c "print(f'{($PER - $FIGURE) / $FIGURE * 100:+.1f}')")
if ((PER > LIMIT)); then
  echo "callgrind-check: FAIL: $PER instructions per request, over the budget of $LIMIT ($FIGURE + $TOL %; $DELTA %)." >&2
  echo "  Find where they went: per function, callgrind_annotate --inclusive=no of this run's cg.out against one of the budget's commit (docs/BENCHMARKS.md)." >&2
  echo "  A cost taken on purpose: bash bench/callgrind-check.sh --update, and say why in the commit." >&2
  exit 1
fi
echo "callgrind-check: ok: $PER instructions per request ($REQS requests), budget $LIMIT ($FIGURE + $TOL %; $DELTA %)"

# bench/lib/quiet.sh — sourced by the load benchmarks (run.sh, https.sh):
# how busy the whole machine is, and a wait for it to be quiet.
# Needs `log` and WAIT_QUIET (seconds, 0 = do not wait); QUIET_PCT is the
# busy share under which the machine counts as quiet (default 15).
QUIET_PCT="${QUIET_PCT:-15}"

sys_ticks() {                # "busy total" ticks of the whole machine (/proc/stat)
  local _c u n sy id io irq sirq st _rest
  read -r _c u n sy id io irq sirq st _rest </proc/stat
  echo "$((u + n + sy + irq + sirq + st)) $((u + n + sy + id + io + irq + sirq + st))"
}

wait_quiet() {               # wait up to WAIT_QUIET s for machine busy% < QUIET_PCT
  [[ $WAIT_QUIET -gt 0 ]] || return 0
  local start=$SECONDS a b busy=100
  while ((SECONDS - start < WAIT_QUIET)); do
    read -r -a a <<<"$(sys_ticks)"; sleep 1; read -r -a b <<<"$(sys_ticks)"
    busy=$(( (b[0] - a[0]) * 100 / (b[1] - a[1] > 0 ? b[1] - a[1] : 1) ))
    ((busy < QUIET_PCT)) && break
  done
  if ((busy < QUIET_PCT)); then
    ((SECONDS - start > 1)) && log "machine quiet (${busy}% busy) after $((SECONDS - start)) s"
  else
    log "machine still ${busy}% busy after ${WAIT_QUIET} s; measuring anyway"
  fi
  return 0
}

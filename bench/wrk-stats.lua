-- wrk script for the load matrix: no per-response hook (keeps wrk fast);
-- done() prints one machine-readable line that bench/report.py parses.
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "BENCH requests=%d duration_us=%d bytes=%d p50_us=%.0f p90_us=%.0f p99_us=%.0f " ..
    "err_connect=%d err_read=%d err_write=%d err_status=%d err_timeout=%d non200=-1\n",
    summary.requests, summary.duration, summary.bytes,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    e.connect, e.read, e.write, e.status, e.timeout))
end

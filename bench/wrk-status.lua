-- wrk script for the rolling-restart scenario: counts every response whose
-- status is not 200 (per thread, summed in done()), besides wrk's own socket
-- error counters (connect/read/write/timeout) and non-2xx/3xx count.
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  non200 = 0
end

function response(status, headers, body)
  if status ~= 200 then
    non200 = non200 + 1
  end
end

function done(summary, latency, requests)
  local n = 0
  for _, t in ipairs(threads) do
    n = n + (t:get("non200") or 0)
  end
  local e = summary.errors
  io.write(string.format(
    "BENCH requests=%d duration_us=%d bytes=%d p50_us=%.0f p90_us=%.0f p99_us=%.0f " ..
    "err_connect=%d err_read=%d err_write=%d err_status=%d err_timeout=%d non200=%d\n",
    summary.requests, summary.duration, summary.bytes,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    e.connect, e.read, e.write, e.status, e.timeout, n))
end

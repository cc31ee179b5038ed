-- wrk script for bench/sessions.sh: every request carries a known session.
--
-- Usage: wrk ... -s bench/wrk-sessions.lua URL -- TOKENS_FILE
-- TOKENS_FILE holds one Hop-Session token per line, each already bound on
-- the gateway under test. The requests are formatted once in init() and
-- sent round-robin, so wrk does no per-request work beyond picking one (no
-- response() hook). done() prints the same BENCH line as wrk-stats.lua.
local reqs = {}
local i = 0

function init(args)
  local path = args[1]
  if not path then
    error("usage: wrk ... -s wrk-sessions.lua URL -- TOKENS_FILE")
  end
  for tok in io.lines(path) do
    if #tok > 0 then
      reqs[#reqs + 1] = wrk.format("GET", wrk.path, { ["Hop-Session"] = tok })
    end
  end
  if #reqs == 0 then
    error("no tokens in " .. path)
  end
end

function request()
  i = i % #reqs + 1
  return reqs[i]
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "BENCH requests=%d duration_us=%d bytes=%d p50_us=%.0f p90_us=%.0f p99_us=%.0f " ..
    "err_connect=%d err_read=%d err_write=%d err_status=%d err_timeout=%d\n",
    summary.requests, summary.duration, summary.bytes,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    e.connect, e.read, e.write, e.status, e.timeout))
end

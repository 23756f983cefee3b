-- bench/edge/mixed.lua: the edge bench's mixed row. Every tenth request of a connection is a miss
-- (a URL never asked before: /miss/<run>-<thread>-<n>, which the origin answers after 1 ms), the
-- others are hits of /small; wrk keeps the connections alive. The argument after -- names the
-- run, so no round or cache meets another's miss URLs.
local threads = 0

function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end

local run = "run"
local every = 10
local n = 0

function init(args)
  run = args[1] or run
  every = tonumber(args[2] or "10")
end

function request()
  n = n + 1
  if n % every == 0 then
    return wrk.format(nil, "/miss/" .. run .. "-" .. tid .. "-" .. n)
  end
  return wrk.format(nil, "/small")
end

-- The bytes read and answers counted, for bench/lib.sh's check_wrk_body (every answer of this row
-- is a 480-byte object: the hits' /small and the origin's misses alike).
function done(summary, latency, requests)
  io.write(string.format("wrk-bytes %d %d\n", summary.bytes, summary.requests))
end

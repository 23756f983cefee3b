-- bench/wrk-bytes.lua: prints, when wrk is done, the bytes it read and the answers it counted
-- ("wrk-bytes BYTES REQUESTS"), for bench/lib.sh's check_wrk_body. It defines no request() or
-- response(), so wrk sends its one static request and parses nothing more than without a script.
function done(summary, latency, requests)
  io.write(string.format("wrk-bytes %d %d\n", summary.bytes, summary.requests))
end

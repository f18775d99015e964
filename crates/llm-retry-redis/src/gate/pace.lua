-- One send's turn under a key's pace, shared by every replica: a GCRA whose
-- slots are handed out in arrival order, on the server's clock. The same
-- arithmetic as the replica's own pace (pace.rs), which the tests check.
--
-- KEYS[1]  the key's theoretical arrival time, in µs
-- ARGV     interval µs, burst, now in µs (tests only; empty: TIME), and
--          the longest wait the send can afford in µs (empty: any)
-- Returns  the wait before the send's slot in µs, the slot taken; or, when
--          that wait is longer than the send can afford, -1 - the wait, and
--          nothing taken
local now
if ARGV[3] ~= nil and ARGV[3] ~= '' then
  now = tonumber(ARGV[3])
else
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000000 + tonumber(time[2])
end
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]))
-- A full bucket of `burst` sends may go at once; the rest follow a pace apart.
local slot = now
if tat then
  slot = math.max(now, tat + interval - burst * interval)
end
if ARGV[4] ~= nil and ARGV[4] ~= '' and slot - now > tonumber(ARGV[4]) then
  return -1 - (slot - now)
end
local start = slot
if tat and tat > slot then start = tat end
local next_tat = start + interval
-- Gone once the bucket is full again: nothing grows without bound.
local ttl_ms = math.floor((next_tat - now) / 1000) + 1
redis.call('SET', KEYS[1], string.format('%d', next_tat), 'PX', ttl_ms)
return slot - now

-- A send about to go asks the fleet how long it waits, in one atomic step on
-- the server's clock: until the end of a hold a replica set on its key (one
-- the send honours), and, where the key has a pace, for its turn in it from
-- then: a GCRA whose slots are handed out in arrival order, with the same
-- arithmetic as the replica's own pace (pace.rs), which the tests check.
--
-- KEYS[1]  the key's theoretical arrival time, in µs
-- KEYS[2]  the holds' hash: field <key fingerprint> = "<until ms>"
-- ARGV     the key's fingerprint; interval µs (empty: no pace); burst; now
--          in µs (tests only; empty: TIME); the longest wait the send can
--          afford in µs (empty: any); the longest hold it honours in µs
--          (empty: any)
-- Returns  {wait µs, hold µs}: the wait before the send goes, its turn
--          taken, or -1 - that wait when it is longer than the send can
--          afford, none taken; and what was left of the hold that kept it
--          (0: none)
local now
if ARGV[4] ~= '' then
  now = tonumber(ARGV[4])
else
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000000 + tonumber(time[2])
end

local floor, held = now, 0
local until_ms = tonumber(redis.call('HGET', KEYS[2], ARGV[1]))
if until_ms then
  local left = until_ms * 1000 - now
  if left > 0 and (ARGV[6] == '' or left <= tonumber(ARGV[6])) then
    floor, held = until_ms * 1000, left
  end
end

local paced = ARGV[2] ~= ''
local interval, tat
local slot = floor
if paced then
  interval = tonumber(ARGV[2])
  tat = tonumber(redis.call('GET', KEYS[1]))
  -- A full bucket of `burst` sends may go at once; the rest follow a pace
  -- apart.
  if tat then
    slot = math.max(floor, tat + interval - tonumber(ARGV[3]) * interval)
  end
end
if ARGV[5] ~= '' and slot - now > tonumber(ARGV[5]) then
  return {-1 - (slot - now), held}
end
if paced then
  local start = slot
  if tat and tat > slot then start = tat end
  local next_tat = start + interval
  -- Gone once the bucket is full again: nothing grows without bound.
  local ttl_ms = math.floor((next_tat - now) / 1000) + 1
  redis.call('SET', KEYS[1], string.format('%d', next_tat), 'PX', ttl_ms)
end
return {slot - now, held}

-- A send about to go asks the fleet how long it waits, in one atomic step on
-- the server's clock: until the end of a hold a replica set on its key (one
-- the send honours), and then for its turns in the key's paces, where it has
-- them (its requests', its tokens'): each a GCRA whose slots are handed out
-- in arrival order, with the same arithmetic as the replica's own paces
-- (pace.rs), which the tests check. A send goes at
-- max(hold's end, max(tat, now) + increment - tolerance) over its paces
-- (a send that costs more than the tolerance waits for what it lacks, the
-- same whether its key's tat is past or gone), and moves each tat to
-- max(tat, slot) + increment.
--
-- KEYS[1]  the key's request pace: its theoretical arrival time, in µs
-- KEYS[2]  the holds' hash: field <key fingerprint> = "<until ms>"
-- KEYS[3]  the key's token pace: its theoretical arrival time, in µs
-- ARGV     the key's fingerprint; the request pace's increment and
--          tolerance in µs (empty: no pace); now in µs (tests only; empty:
--          TIME); the longest wait the send can afford in µs (empty: any);
--          the longest hold it honours in µs (empty: any); the token pace's
--          increment and tolerance in µs (empty: no pace)
-- Returns  {wait µs, hold µs}: the wait before the send goes, its turns
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

local slot, held = now, 0
local until_ms = tonumber(redis.call('HGET', KEYS[2], ARGV[1]))
if until_ms then
  local left = until_ms * 1000 - now
  if left > 0 and (ARGV[6] == '' or left <= tonumber(ARGV[6])) then
    slot, held = until_ms * 1000, left
  end
end

-- The paces the send takes a turn in: {key, increment, tolerance, tat}.
local paces = {}
for _, pace in ipairs({{KEYS[1], ARGV[2], ARGV[3]}, {KEYS[3], ARGV[7], ARGV[8]}}) do
  if pace[2] ~= nil and pace[2] ~= '' then
    local increment, tolerance = tonumber(pace[2]), tonumber(pace[3])
    local tat = tonumber(redis.call('GET', pace[1]))
    local base = now
    if tat and tat > now then base = tat end
    slot = math.max(slot, base + increment - tolerance)
    table.insert(paces, {pace[1], increment, tat})
  end
end
if ARGV[5] ~= '' and slot - now > tonumber(ARGV[5]) then
  return {-1 - (slot - now), held}
end
for _, pace in ipairs(paces) do
  local start = slot
  if pace[3] and pace[3] > slot then start = pace[3] end
  local next_tat = start + pace[2]
  -- Gone once the bucket is full again: nothing grows without bound.
  local ttl_ms = math.floor((next_tat - now) / 1000) + 1
  redis.call('SET', pace[1], string.format('%d', next_tat), 'PX', ttl_ms)
end
return {slot - now, held}

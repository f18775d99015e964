-- One replica's report to a shared retry budget, and its new reservation,
-- in one atomic step on the server's clock.
--
-- KEYS[1]  the budget's hash: fields d:<slot> and w:<slot> count first
--          attempts and retries per slot; r:<replica> = "<held>:<expiry ms>"
--          is what a replica holds in reserve.
-- ARGV     slot_us, ratio_ppm, floor_ppm, replica, deposited, used, held,
--          want, reservation_ms, ttl_ms
-- Returns  {deposited, withdrawn, granted, reserved by the others}
local key = KEYS[1]
local slot_us = tonumber(ARGV[1])
local ratio_ppm = tonumber(ARGV[2])
local floor_ppm = tonumber(ARGV[3])
local me = 'r:' .. ARGV[4]
local deposited_now = tonumber(ARGV[5])
local used = tonumber(ARGV[6])
local held = tonumber(ARGV[7])
local want = tonumber(ARGV[8])

local time = redis.call('TIME')
-- About 1.8e15 microseconds: exact in a Lua number (below 2^53).
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
local now_ms = math.floor(now_us / 1000)
local head = math.floor(now_us / slot_us)
-- Ten slots make the window, as in the local ring.
local oldest = head - 9

local deposited, withdrawn, reserved = 0, 0, 0
local fields = redis.call('HGETALL', key)
for i = 1, #fields, 2 do
  local field, value = fields[i], fields[i + 1]
  local kind = string.sub(field, 1, 2)
  if kind == 'r:' then
    if field ~= me then
      local n, expiry = string.match(value, '^(%d+):(%d+)$')
      if n and tonumber(expiry) > now_ms then
        reserved = reserved + tonumber(n)
      else
        redis.call('HDEL', key, field)
      end
    end
  else
    local slot = tonumber(string.sub(field, 3))
    if slot == nil or slot < oldest then
      redis.call('HDEL', key, field)
    elseif kind == 'd:' then
      deposited = deposited + tonumber(value)
    elseif kind == 'w:' then
      withdrawn = withdrawn + tonumber(value)
    end
  end
end

if deposited_now > 0 then
  redis.call('HINCRBY', key, 'd:' .. head, deposited_now)
  deposited = deposited + deposited_now
end
if used > 0 then
  redis.call('HINCRBY', key, 'w:' .. head, used)
  withdrawn = withdrawn + used
end

-- The rule of the local budget: whole retries of ratio x deposits + floor.
local allowance = math.floor((ratio_ppm * deposited + floor_ppm) / 1000000)
local room = allowance - withdrawn - reserved - held
local granted = math.max(0, math.min(want - held, room))
if held + granted > 0 then
  local expiry = now_ms + tonumber(ARGV[9])
  redis.call('HSET', key, me, string.format('%d:%d', held + granted, expiry))
else
  redis.call('HDEL', key, me)
end
redis.call('PEXPIRE', key, tonumber(ARGV[10]))
return {deposited, withdrawn, granted, reserved}

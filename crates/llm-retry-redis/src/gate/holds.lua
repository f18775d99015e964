-- One replica's new holds on provider keys, and every live hold back, in
-- one atomic step on the server's clock.
--
-- KEYS[1]  the holds' hash: field <key fingerprint> = "<until ms>"
-- ARGV     n, then n pairs: field, remaining ms
-- Returns  every live hold: field, remaining ms, ...
-- Publishes on <KEYS[1]>:news when a hold was set or moved later.
local key = KEYS[1]
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

local n = tonumber(ARGV[1])
local news = false
for i = 0, n - 1 do
  local field = ARGV[2 + 2 * i]
  local until_ms = now + tonumber(ARGV[3 + 2 * i])
  local current = tonumber(redis.call('HGET', key, field))
  -- The later end wins, as on each replica.
  if not current or until_ms > current then
    redis.call('HSET', key, field, until_ms)
    news = true
  end
end
-- Wakes the other replicas' syncs: they read the hold now, not at their
-- next interval.
if news then
  redis.call('PUBLISH', key .. ':news', 1)
end

local live, longest = {}, 0
local fields = redis.call('HGETALL', key)
for i = 1, #fields, 2 do
  local until_ms = tonumber(fields[i + 1])
  if until_ms == nil or until_ms <= now then
    redis.call('HDEL', key, fields[i])
  else
    local remaining = until_ms - now
    table.insert(live, fields[i])
    table.insert(live, remaining)
    if remaining > longest then longest = remaining end
  end
end
-- The key lives as long as its longest hold (gone with its last field).
if longest > 0 then
  redis.call('PEXPIRE', key, longest)
end
return live

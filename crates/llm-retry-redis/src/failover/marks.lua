-- One replica's new marks on failover targets, and every live mark back,
-- in one atomic step on the server's clock.
--
-- KEYS[1]  the failover's hash: field <kind>:<target> = "<until ms>:<rate limited 0|1>"
-- ARGV     n, then n triples: field, remaining ms, rate limited (0|1)
-- Returns  every live mark: field, remaining ms, rate limited, ...
local key = KEYS[1]
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

local n = tonumber(ARGV[1])
for i = 0, n - 1 do
  local field = ARGV[2 + 3 * i]
  local until_ms = now + tonumber(ARGV[3 + 3 * i])
  local current = redis.call('HGET', key, field)
  local current_until = current and tonumber(string.match(current, '^(%d+):'))
  -- The later end wins, as on each replica.
  if not current_until or until_ms > current_until then
    redis.call('HSET', key, field, string.format('%d:%s', until_ms, ARGV[4 + 3 * i]))
  end
end

local live, longest = {}, 0
local fields = redis.call('HGETALL', key)
for i = 1, #fields, 2 do
  local until_ms, limited = string.match(fields[i + 1], '^(%d+):([01])$')
  until_ms = tonumber(until_ms)
  if until_ms == nil or until_ms <= now then
    redis.call('HDEL', key, fields[i])
  else
    local remaining = until_ms - now
    table.insert(live, fields[i])
    table.insert(live, remaining)
    table.insert(live, tonumber(limited))
    if remaining > longest then longest = remaining end
  end
end
-- The key lives as long as its longest mark (gone with its last field).
if longest > 0 then
  redis.call('PEXPIRE', key, longest)
end
return live

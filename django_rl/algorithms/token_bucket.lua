-- Token bucket: a hash {u = units, t = time in ms}; tokens refill continuously
-- up to capacity. The field names are one letter because a small hash (a
-- listpack) stores them in every key: it keeps a bucket at 120 bytes.
--
-- KEYS[1]  the bucket
-- ARGV[1]  capacity in tokens
-- ARGV[2]  refill: tokens added per period
-- ARGV[3]  period in ms
-- ARGV[4]  cost of this hit in tokens (1 <= cost <= capacity, checked by the caller)
-- ARGV[5]  '1' to take the tokens, '0' to only look (peek: writes nothing)
-- ARGV[6]  the time in ms (CLOCK "app": the app server's), or '' to read the
--          server's TIME
--
-- Returns {allowed (1/0), units left, retry_after_ms, reset_after_ms}.
--
-- Tokens are kept in "units" of 1/period of a token, so a refill of
-- (elapsed ms * refill) units is exact integer arithmetic: no float rounding
-- can turn 1 token into 0.9999 and deny a hit that should pass. All values
-- stay below 2^53, where Lua's doubles are exact (checked by the caller).
--
-- Read-refill-take-write must be one step, or two requests both take the last
-- token; a script runs alone on the server. Time comes from the server (TIME),
-- or with CLOCK "app" from the caller: a caller whose clock is behind the
-- last writer's sees no time elapsed (below), never tokens taken back.

local key = KEYS[1]
local capacity = tonumber(ARGV[1])
local refill = tonumber(ARGV[2])
local period = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
local commit = ARGV[5] == '1'

local function int(x) return string.format('%d', x) end

-- ceil(a / b) for integers, exact even where a / b rounds.
local function ceil_div(a, b)
  if a <= 0 then return 0 end
  local q = math.floor(a / b)
  if q * b < a then q = q + 1 end
  return q
end

local now = tonumber(ARGV[6])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local full = capacity * period
local need = cost * period

local units = full
local state = redis.call('HMGET', key, 'u', 't')
if state[1] then
  units = tonumber(state[1])
  local elapsed = now - tonumber(state[2])
  -- A server clock that stepped back (a failover to a host behind) must not
  -- take tokens away: elapsed time is never negative.
  if elapsed > 0 then
    units = math.min(full, units + elapsed * refill)
  end
end

local allowed = units >= need
local retry = 0
if allowed then
  if commit then units = units - need end
else
  retry = ceil_div(need - units, refill)
end
local reset = ceil_div(full - units, refill)

if commit then
  if reset == 0 then
    -- A full bucket is the same as no bucket.
    redis.call('DEL', key)
  else
    -- Written on denied hits too: the state is unchanged in meaning, and the
    -- TTL (the time until the bucket is full again, after which the key holds
    -- nothing a missing key does not) is healed if it was removed.
    redis.call('HSET', key, 'u', int(units), 't', int(now))
    redis.call('PEXPIRE', key, int(reset))
  end
end

return {allowed and 1 or 0, units, retry, reset}

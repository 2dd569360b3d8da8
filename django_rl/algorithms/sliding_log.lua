-- Sliding log: one ZSET member per allowed unit of cost, scored by its time.
--
-- KEYS[1]  the log (ZSET: score = time in ms, member = a small integer)
-- ARGV[1]  window in ms
-- ARGV[2]  limit: units allowed per window
-- ARGV[3]  cost of this hit (1 <= cost <= limit, checked by the caller)
-- ARGV[4]  '1' to count the hit, '0' to only look (peek: writes nothing)
--
-- Returns {allowed (1/0), used units after this call, retry_after_ms, reset_after_ms}.
--
-- Check-then-add must be one step: two requests that both read "4 of 5" from
-- the client side would both add. A script runs alone on the server, so no
-- other command can come between the count and the ZADD. Time comes from the
-- server (TIME), so app servers with skewed clocks share one timeline.

local key = KEYS[1]
local window = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local commit = ARGV[4] == '1'

-- Numbers go to redis.call as strings formatted here: Lua's default format
-- (%.14g) would round large integers.
local function int(x) return string.format('%d', x) end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- An entry with score s is in the window while now < s + window.
local horizon = now - window

local used
if commit then
  redis.call('ZREMRANGEBYSCORE', key, '-inf', int(horizon))
  used = redis.call('ZCARD', key)
else
  used = redis.call('ZCOUNT', key, '(' .. int(horizon), '+inf')
end

-- The newest entry: when the log will be empty, and where member numbers go on.
local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')

local allowed = used + cost <= limit
local retry = 0
local reset = 0
if used > 0 then
  reset = tonumber(newest[2]) - horizon
end
if allowed then
  if commit then
    -- Members only need to be unique among live entries, so they are small
    -- integers (listpack stores them in 2-3 bytes), numbered on from the
    -- newest one. All have the same number of digits, so entries that share
    -- a millisecond sort in the order they were added and the newest is
    -- found again next time; a number still taken after a wrap-around moves
    -- on to the next free one.
    local low = 1000
    while low * 9 < limit * 4 do low = low * 10 end
    local high = low * 10 - 1
    local member = low
    if newest[1] then member = tonumber(newest[1]) + 1 end
    for _ = 1, cost do
      if member > high then member = low end
      while redis.call('ZADD', key, 'NX', int(now), int(member)) == 0 do
        member = member + 1
        if member > high then member = low end
      end
      member = member + 1
    end
    used = used + cost
    reset = window
  end
else
  -- The hit fits once the (used + cost - limit) oldest live entries have left.
  local oldest = redis.call('ZRANGEBYSCORE', key, '(' .. int(horizon), '+inf',
    'WITHSCORES', 'LIMIT', int(used + cost - limit - 1), 1)
  retry = tonumber(oldest[2]) - horizon
end

if commit and used > 0 then
  -- Every counting call (denied ones too) sets the TTL to when the newest
  -- entry leaves: the key never outlives its content, and a key whose TTL
  -- was removed is healed by its next hit.
  redis.call('PEXPIRE', key, int(reset))
end

return {allowed and 1 or 0, used, retry, reset}

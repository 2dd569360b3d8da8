-- Calendar quota: one counter per identity and period (a day, week, month
-- or year in the policy's time zone). Lua in Redis knows no time zones, so
-- the caller works out the periods (quota.py) and hands the script the
-- candidates around its estimate of `now`; the script picks the one that
-- holds `now` (the server's TIME, or the app's time with CLOCK "app").
--
-- keys     the counters of the candidate periods, in order: <key>:<start s>
-- args[1]  limit
-- args[2]  grace: ms the counter outlives its period
-- then per candidate: its start and end in ms (end = the next one's start)
--
-- Returns {allowed (1/0, or -1: no candidate holds `now`), remaining,
-- retry_after_ms, reset_after_ms, the count, now, the period's start,
-- its end}. A denied hit counts nowhere (the look comes before the count).

local function quota(keys, now, cost, commit, args)
  local limit = tonumber(args[1])
  local key, start, stop
  for i = 1, #keys do
    local s, e = tonumber(args[2 * i + 1]), tonumber(args[2 * i + 2])
    if s <= now and now < e then key, start, stop = keys[i], s, e end
  end
  if not key then return {-1, 0, 0, 0, 0, now, 0, 0} end
  local reset = stop - now
  local count = tonumber(redis.call('GET', key) or '0')
  local allowed = count + cost <= limit
  if allowed and commit then
    count = redis.call('INCRBY', key, cost)
    -- The counter dies `grace` after its period ends. Relative to now, which
    -- holds for both clocks: with the server's, it is the end on the
    -- server's clock; with CLOCK "app" it is the time left on the app's
    -- clock, counted from when the server runs this (never less, whatever
    -- the skew), and the grace covers a hit that read the time just before
    -- the end and reaches the server after it, and app servers whose clocks
    -- are behind this one's. Set only when missing: writers never shorten it.
    if redis.call('PTTL', key) < 0 then redis.call('PEXPIRE', key, int(reset + tonumber(args[2]))) end
  end
  -- reset_after: until the counter is gone, when it holds anything (an
  -- unused period is already full: 0, as a look at a missing key says).
  local full = 0
  if count > 0 then full = reset end
  if allowed then
    return {1, limit - count, 0, full, count, now, start, stop}
  end
  return {0, math.max(limit - count, 0), reset, full, count, now, start, stop}
end

-- Takes back a counted hit (`done`: its reply) from its period's counter,
-- if that still exists (DECRBY keeps its TTL).
local function quota_refund(keys, now, cost, args, done, done_now)
  local start = tonumber(done[7])
  for i = 1, #keys do
    if tonumber(args[2 * i + 1]) == start then
      if redis.call('EXISTS', keys[i]) == 1 then redis.call('DECRBY', keys[i], int(cost)) end
    end
  end
end

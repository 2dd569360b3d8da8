-- Fixed window, as one algorithm of a script (together.lua). Alone, a fixed
-- window decides with a MULTI/EXEC instead (fixed_window.py); this counts in
-- the same keys, so both see one state.
--
-- keys     the counters of the windows the caller's estimate of the clock
--          allows, oldest first (one, or two at an edge): <key>:<window>
-- args[1]  period in ms
-- args[2]  limit
-- args[3]  the window of keys[1]
--
-- Returns {allowed (1/0, or -1: the window of `now` is not among keys),
-- remaining, retry_after_ms, reset_after_ms, the count, now}.
--
-- Unlike the MULTI, a denied hit counts nowhere here (a count that passes
-- the limit is taken back in the same script): all of a request's
-- policies count it or none does.

local function fixed_window(keys, now, cost, commit, args)
  local period = tonumber(args[1])
  local limit = tonumber(args[2])
  local window = math.floor(now / period)
  local key = keys[window - tonumber(args[3]) + 1]
  if not key then return {-1, 0, 0, 0, 0, now} end
  local reset = (window + 1) * period - now
  local count, allowed
  if commit then
    -- Counted, then taken back if that passed the limit: the same state as
    -- a look then a count, in one command fewer for an allowed hit (the
    -- usual one). Atomic: nothing runs between the two inside a script.
    count = redis.call('INCRBY', key, cost)
    allowed = count <= limit
    if not allowed then
      count = redis.call('DECRBY', key, cost)  -- a denied hit counts nowhere
    elseif count == cost and redis.call('PTTL', key) < 0 then
      -- The counter dies when its window ends: with the server's clock that
      -- is PEXPIREAT of the end; with CLOCK "app", a TTL relative to now
      -- holds whatever the skew to the server (see fixed_window.py). Set
      -- only when missing, as PEXPIREAT ... NX does, so writers never
      -- shorten it; looked for only when this hit made the count (the key
      -- new, or back at 0 after give-backs): every writer of these keys
      -- sets the TTL in the same atomic step that creates them (this
      -- script, the MULTI/EXEC), so an older key already has one.
      redis.call('PEXPIRE', key, int(reset))
    end
  else
    count = tonumber(redis.call('GET', key) or '0')
    allowed = count + cost <= limit
  end
  if allowed then
    return {1, limit - count, 0, reset, count, now}
  end
  return {0, math.max(limit - count, 0), reset, reset, count, now}
end

-- Takes back a counted hit (`done_now`: its time) from its window's
-- counter, if that still exists (DECRBY keeps its TTL).
local function fixed_window_refund(keys, now, cost, args, done, done_now)
  local window = math.floor(done_now / tonumber(args[1]))
  local key = keys[window - tonumber(args[3]) + 1]
  if key and redis.call('EXISTS', key) == 1 then redis.call('DECRBY', key, int(cost)) end
end

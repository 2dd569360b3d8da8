-- Token bucket: a hash {u = units, t = time in ms}; tokens refill continuously
-- up to capacity. The field names are one letter because a small hash (a
-- listpack) stores them in every key: it keeps a bucket at 120 bytes.
--
-- keys[1]  the bucket
-- args[1]  capacity in tokens
-- args[2]  refill: tokens added per period
-- args[3]  period in ms
--
-- (With cost, commit and now: see algorithms/prelude.lua.)
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

local function token_bucket(keys, now, cost, commit, args)
  local key = keys[1]
  local capacity = tonumber(args[1])
  local refill = tonumber(args[2])
  local period = tonumber(args[3])
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
end

-- Gives back the tokens a counted hit took (`done`: its reply), as if it
-- had never taken them: the bucket refilled to now, plus the hit's tokens,
-- at most full. Exact: taking then giving back c tokens with a refill cut
-- at `full` in between leaves what not taking would.
local function token_bucket_refund(keys, now, cost, args, done, done_now)
  local key = keys[1]
  local capacity = tonumber(args[1])
  local refill = tonumber(args[2])
  local period = tonumber(args[3])
  local full = capacity * period
  local state = redis.call('HMGET', key, 'u', 't')
  if not state[1] then return end  -- full again: nothing to give back
  local units = tonumber(state[1])
  local elapsed = now - tonumber(state[2])
  if elapsed > 0 then units = math.min(full, units + elapsed * refill) end
  units = math.min(full, units + cost * period)
  local reset = ceil_div(full - units, refill)
  if reset == 0 then
    redis.call('DEL', key)
  else
    redis.call('HSET', key, 'u', int(units), 't', int(now))
    redis.call('PEXPIRE', key, int(reset))
  end
end

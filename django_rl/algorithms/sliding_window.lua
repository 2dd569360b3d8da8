-- Sliding window counter: this window's count and the previous window's,
-- the previous one weighted by how much of it the sliding window still
-- covers. Windows are aligned on the clock (ms since 1970 / period).
--
-- keys[1]  a hash {w = index of the window of c, c = its count, p = the
--          count of the window before it}; one-letter fields keep the hash
--          a small listpack (about 100 bytes with its key)
-- args[1]  period in ms
-- args[2]  limit
--
-- (With cost, commit and now: see algorithms/prelude.lua.)
--
-- Returns {allowed (1/0), remaining hits of cost 1, retry_after_ms,
-- reset_after_ms, this window's count, the previous window's count, ms
-- into this window}.
--
-- The estimate is prev * (period - elapsed) / period + curr. It is compared
-- multiplied through by period, so every number is a whole one and exact:
-- limit * period stays below 2^52 (checked by the caller). A hit is allowed
-- when the estimate with it is at most the limit; denied hits count nowhere.
-- Read-decide-write is one step (a script runs alone on the server).

local function sliding_window(keys, now, cost, commit, args)
  local key = keys[1]
  local period = tonumber(args[1])
  local limit = tonumber(args[2])
  local window = math.floor(now / period)
  local elapsed = now - window * period

  local curr, prev = 0, 0
  local state = redis.call('HMGET', key, 'w', 'c', 'p')
  if state[1] then
    local w = tonumber(state[1])
    if w == window then
      curr, prev = tonumber(state[2]), tonumber(state[3])
    elseif w == window - 1 then
      prev = tonumber(state[2])
    end
    -- A window after this one (another writer's clock ahead, with CLOCK
    -- "app", or the server's stepped back) is read as this one: counts are
    -- never forgotten because a clock is behind.
    if w > window then
      curr, prev = tonumber(state[2]), tonumber(state[3])
    end
  end

  -- used: the estimate times period.
  local full = limit * period
  local used = prev * (period - elapsed) + curr * period
  local allowed = used + cost * period <= full
  local retry = 0
  if allowed then
    if commit then
      curr = curr + cost
      used = used + cost * period
    end
  elseif curr + cost <= limit then
    -- It fits once enough of the previous window has slid out:
    -- prev * (period - e) <= (limit - curr - cost) * period.
    retry = period - floor_div((limit - curr - cost) * period, prev) - elapsed
  else
    -- Not in this window: in the next, this window's count slides out.
    retry = period - elapsed + period - floor_div((limit - cost) * period, curr)
  end
  local remaining = floor_div(full - used, period)
  -- Empty (an estimate of 0) once this window's hits have slid out: the end
  -- of the next window; with none here, the end of this one.
  local reset = 0
  if curr > 0 then
    reset = 2 * period - elapsed
  elseif prev > 0 then
    reset = period - elapsed
  end

  if commit then
    if allowed then
      redis.call('HSET', key, 'w', int(window), 'c', int(curr), 'p', int(prev))
      -- The counts matter until the next window ends; with CLOCK "app" a TTL
      -- relative to now holds whatever the skew to the server's clock.
      redis.call('PEXPIRE', key, int(2 * period - elapsed))
    elseif state[1] then
      -- A denied hit changes nothing, but heals a TTL that was removed.
      redis.call('PEXPIRE', key, int(math.max(reset, 1)))
    end
  end

  return {allowed and 1 or 0, remaining, retry, reset, curr, prev, elapsed}
end

-- Takes back a counted hit (`done`: its reply, `done_now`: its time) from
-- the count of its window: this window's, or the previous one's once the
-- hash has moved on. Older: it counts nowhere now.
local function sliding_window_refund(keys, now, cost, args, done, done_now)
  local key = keys[1]
  local window = math.floor(done_now / tonumber(args[1]))
  local state = redis.call('HMGET', key, 'w', 'c', 'p')
  if not state[1] then return end
  local w = tonumber(state[1])
  -- HSET keeps the key's TTL.
  if w == window then
    redis.call('HSET', key, 'c', int(math.max(tonumber(state[2]) - cost, 0)))
  elseif w == window + 1 then
    redis.call('HSET', key, 'p', int(math.max(tonumber(state[3]) - cost, 0)))
  end
end

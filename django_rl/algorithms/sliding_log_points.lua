-- What the DRF drop-in writes to a sliding log besides its decisions
-- (contrib/drf.py): DRF's throttle_success when a subclass decided by itself,
-- and DRF's cache.set. Runs after prelude.lua and sliding_log.lua.
--
-- keys[1]  the log (as sliding_log.lua keeps it)
-- args[1]  window in ms
-- args[2]  limit (it sets the places' modulus; nothing here refuses)
-- args[3]  what to do:
--            'add'   count one hit of cost 1 at now, whatever the limit (the
--                    units may pass it: later hits wait until they leave)
--            'take'  take back the newest hit (counted by a decision that no
--                    throttle_success claimed), as if it had never been
--            'set'   make the log hold one hit at each time of args[4..n-1]
--                    (ms, oldest first), DRF's cache.set of a history
-- args[n]  the time (prelude.lua's clock)
--
-- Returns what a look answers afterwards (sliding_log.lua's reply).

-- Adds a hit of cost 1 at `now` (never before the newest one, as a counted
-- hit); returns its score. Entries that left the window go first, at most
-- as many as a counting hit removes.
local function sliding_log_add(key, now, window, M)
  local horizon = now - window
  local gone = redis.call('ZCOUNT', key, '-inf', int(horizon))
  if gone > 0 then
    redis.call('ZREMRANGEBYRANK', key, 0, int(math.min(gone, 1000) - 1))
  end
  local newest = sliding_log_entry(redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES'), M)
  local start, score = 0, now
  if newest and newest[1] > horizon then
    start = (newest[2] + newest[3]) % M
    if newest[1] > score then score = newest[1] end
    if start < newest[2] and score == newest[1] then score = score + 1 end
  end
  redis.call('ZADD', key, score, sliding_log_member(M, start, 1))
  return score
end

local function sliding_log_points(keys, now, args)
  local key = keys[1]
  local window = tonumber(args[1])
  local M = sliding_log_modulus(tonumber(args[2]))
  local what = args[3]
  if what == 'add' then
    local score = sliding_log_add(key, now, window, M)
    redis.call('PEXPIRE', key, int(score + window - now))
  elseif what == 'take' then
    local newest = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
    if newest[2] and tonumber(newest[2]) > now - window then
      sliding_log_refund(keys, now, 1, args, {0, 0, 0, 0, 0, newest[2]})
    end
  elseif what == 'set' then
    redis.call('DEL', key)
    local score
    for i = 4, #args - 1 do score = sliding_log_add(key, tonumber(args[i]), window, M) end
    if score and score + window > now then
      redis.call('PEXPIRE', key, int(score + window - now))
    else
      redis.call('DEL', key)
    end
  end
  return sliding_log(keys, now, 1, false, args)
end

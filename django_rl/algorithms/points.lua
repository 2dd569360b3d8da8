-- penalize, reward, block and unblock (policies/points.py): one script, one
-- round trip, after prelude.lua, the algorithms' files and blocks.lua.
--
-- KEYS     the algorithm's keys (its script_entry), then the block's hash
--          (<key>:b) when the policy has block_for or escalate
-- ARGV[1]  the time (prelude.lua's clock)
-- ARGV[2]  what to do: 'p' penalize, 'r' reward, 'b' block, 'u' unblock
-- ARGV[3]  points (p, r) or the block's ms (b)
-- ARGV[4]  the algorithm's name
-- ARGV[5]  the number of the algorithm's keys
-- ARGV[6]  '1' when the policy has a block hash (then ARGV[7..10] are
--          blocks.lua's bargs), 'm' as '1' and a block also marks the policy
--          (block_mark.lua: KEYS' last is the mark, ARGV[11] the policy's
--          name, ARGV[12] the mark's slack in ms), else '0'
-- then the algorithm's parameters (its script_entry)
--
-- Returns {the change's answer (unblock: 1 if a block ended, block: its ms,
-- else 0), then what a look answers afterwards: blocks.lua's reply with a
-- block hash, else the algorithm's}. The change's answer is -1 when the
-- algorithm cannot change its state with these keys (fixed_window: the
-- server's window is not among them): ask again.
--
-- Points per algorithm (docs/algorithms.md): the current window's counter
-- (fixed_window, sliding_window); units of the log (sliding_log: a penalty
-- is one entry of `points` units at now, a reward takes units off the newest
-- entries, splitting one); tokens (token_bucket: a penalty may take it below
-- zero); the TAT (gcra: max(TAT, now) + points * T; a reward moves it back,
-- never before now). A reward never leaves a state emptier than a fresh one.

local function fixed_window_points(keys, now, points, args)
  local period = tonumber(args[1])
  local window = math.floor(now / period)
  local key = keys[window - tonumber(args[3]) + 1]
  if not key then return false end
  if points > 0 then
    redis.call('INCRBY', key, int(points))
    if redis.call('PTTL', key) < 0 then
      redis.call('PEXPIRE', key, int((window + 1) * period - now))
    end
  else
    local count = tonumber(redis.call('GET', key) or '0')
    if count + points <= 0 then
      redis.call('DEL', key)
    else
      redis.call('DECRBY', key, int(-points))
    end
  end
  return true
end

local function sliding_window_points(keys, now, points, args)
  local key = keys[1]
  local period = tonumber(args[1])
  local window = math.floor(now / period)
  local elapsed = now - window * period
  local curr, prev = 0, 0
  local state = redis.call('HMGET', key, 'w', 'c', 'p')
  if state[1] then
    local w = tonumber(state[1])
    if w >= window then
      window, curr, prev = w, tonumber(state[2]), tonumber(state[3])
    elseif w == window - 1 then
      prev = tonumber(state[2])
    end
  end
  curr = math.max(curr + points, 0)
  if curr == 0 and prev == 0 then
    redis.call('DEL', key)
  else
    redis.call('HSET', key, 'w', int(window), 'c', int(curr), 'p', int(prev))
    redis.call('PEXPIRE', key, int(math.max(2 * period - elapsed, 1)))
  end
  return true
end

local function sliding_log_points(keys, now, points, args)
  local key = keys[1]
  local window = tonumber(args[1])
  local M = sliding_log_modulus(tonumber(args[2]))
  local horizon = now - window
  redis.call('ZREMRANGEBYSCORE', key, '-inf', int(horizon))
  local newest = sliding_log_entry(redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES'), M)
  if points > 0 then
    local start, score = 0, now
    if newest then
      start = (newest[2] + newest[3]) % M
      if newest[1] > score then score = newest[1] end
      if start < newest[2] and score == newest[1] then score = score + 1 end
    end
    redis.call('ZADD', key, score, sliding_log_member(M, start, points))
    redis.call('PEXPIRE', key, int(score - horizon))
    return true
  end
  local left = -points
  while newest and left > 0 do
    redis.call('ZREM', key, newest[4])
    if newest[3] > left then
      -- Split: the entry keeps its start and score, `left` fewer units.
      redis.call('ZADD', key, newest[1], sliding_log_member(M, newest[2], newest[3] - left))
      left = 0
    else
      left = left - newest[3]
      newest = sliding_log_entry(redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES'), M)
    end
  end
  return true
end

local function token_bucket_points(keys, now, points, args)
  local key = keys[1]
  local capacity, refill, period = tonumber(args[1]), tonumber(args[2]), tonumber(args[3])
  local full = capacity * period
  local units = full
  local state = redis.call('HMGET', key, 'u', 't')
  if state[1] then
    units = tonumber(state[1])
    local elapsed = now - tonumber(state[2])
    if elapsed > 0 then units = math.min(full, units + elapsed * refill) end
  end
  units = math.min(full, units - points * period)
  local reset = ceil_div(full - units, refill)
  if reset == 0 then
    redis.call('DEL', key)
  else
    redis.call('HSET', key, 'u', int(units), 't', int(now))
    redis.call('PEXPIRE', key, int(reset))
  end
  return true
end

local function gcra_points(keys, now, points, args)
  local key = keys[1]
  local T, S, W = tonumber(args[1]), tonumber(args[3]), tonumber(args[4])
  local M = W * S
  local now_units = (now % W) * S
  local lead = 0
  local stored = redis.call('GET', key)
  if stored then
    lead = (tonumber(stored) - now_units) % M
    if lead > M / 2 then lead = lead - M end
    if lead < 0 then lead = 0 end
  end
  -- The stored TAT is read modulo M: a lead is kept below M / 4.
  lead = math.min(math.max(lead + points * T, 0), math.floor(M / 4))
  if lead <= 0 then
    redis.call('DEL', key)
  else
    redis.call('SET', key, int((now_units + lead) % M), 'PX', int(ceil_div(lead, S)))
  end
  return true
end

local changes = {
  fixed_window = fixed_window_points, sliding_window = sliding_window_points,
  sliding_log = sliding_log_points, token_bucket = token_bucket_points, gcra = gcra_points,
}

local now = clock(ARGV[1])
local op, amount, name = ARGV[2], tonumber(ARGV[3]), ARGV[4]
local nkeys, with_blocks = tonumber(ARGV[5]), ARGV[6] ~= '0'
local keys = {unpack(KEYS, 1, nkeys)}
local bkey, bargs, first = nil, nil, 7
if with_blocks then
  bkey, bargs, first = KEYS[nkeys + 1], {ARGV[7], ARGV[8], ARGV[9], ARGV[10]}, 11
end
local mark, marked, slack = nil, nil, 0
if ARGV[6] == 'm' then
  mark, marked, slack, first = KEYS[nkeys + 2], ARGV[11], tonumber(ARGV[12]), 13
end
local args = {unpack(ARGV, first, #ARGV)}
local looks = {
  fixed_window = fixed_window, sliding_log = sliding_log, token_bucket = token_bucket,
  gcra = gcra, sliding_window = sliding_window,
}
local decide = looks[name]

local answer = 0
if op == 'p' or op == 'r' then
  if op == 'r' then amount = -amount end
  if not changes[name](keys, now, amount, args) then answer = -1 end
elseif op == 'b' then
  local ends = now + amount
  local was = tonumber(redis.call('HGET', bkey, 'b') or '0')
  if was < ends then
    redis.call('HSET', bkey, 'b', int(ends), 'o', int(ends))
    local ttl = redis.call('PTTL', bkey)
    if ttl < amount then redis.call('PEXPIRE', bkey, int(amount)) end
    answer = amount
    if mark then mark_block(mark, marked, now, amount, slack) end
  end
elseif op == 'u' then
  if blocks_left(bkey, now) > 0 then
    redis.call('HDEL', bkey, 'b', 'o')
    answer = 1
  end
end
if with_blocks then
  return {answer, unpack(blocks_decide(decide, keys, bkey, now, 1, false, args, bargs))}
end
return {answer, unpack(decide(keys, now, 1, false, args))}

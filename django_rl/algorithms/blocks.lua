-- Blocks and escalation (policy keys block_for, escalate): a hash beside the
-- algorithm's state, in the identity's hash slot, <key>:b, with a TTL:
--   b  the block's end (ms, the decision's clock); blocked while now < b
--   o  the end of an operator's block (block()): enforced in every mode
--   n  denials counted for escalate, since s
--   s  when the first of them was counted (the `within` window starts there)
--
-- bargs[at]      block_for in ms (0: none)
-- bargs[at + 1]  escalate's `after` (0: no escalate)
-- bargs[at + 2]  escalate's `within` in ms
-- bargs[at + 3]  escalate's `block_for` in ms
-- (`at` is 1 where not given: bargs a table of its own)
--
-- Runs after prelude.lua and the algorithms' files.

-- Ms left in the block of `bkey` at `now` (0: not blocked), and whether an
-- operator's block (block()) is in force.
local function blocks_left(bkey, now)
  -- (Most identities have no hash: EXISTS answers them without HMGET's reply table.)
  if redis.call('EXISTS', bkey) == 0 then return 0, false end
  local state = redis.call('HMGET', bkey, 'b', 'o')
  local ends = tonumber(state[1] or '0')
  if ends > now then return ends - now, tonumber(state[2] or '0') > now end
  return 0, false
end

-- Makes `bkey` live until `keep` (ms on the decision's clock), or deletes it.
local function blocks_keep(bkey, now, keep)
  if keep > now then
    redis.call('PEXPIRE', bkey, int(keep - now))
  else
    redis.call('DEL', bkey)
  end
end

-- A denial was counted at `now`: start a block (block_for) and count it for
-- escalate (which blocks once `after` denials fall within `within` of the
-- first counted). Returns the block's length in ms (0: none started); when
-- both start, the later end wins.
local function blocks_denied(bkey, now, bargs, at)
  at = at or 1
  local block_ms, after = tonumber(bargs[at]), tonumber(bargs[at + 1])
  local ends = 0
  if block_ms > 0 then ends = now + block_ms end
  local keep = ends
  if after > 0 then
    local within, escalated = tonumber(bargs[at + 2]), tonumber(bargs[at + 3])
    local state = redis.call('HMGET', bkey, 'n', 's')
    local n, since = tonumber(state[1] or '0'), tonumber(state[2] or '0')
    if not state[2] or now - since >= within then n, since = 0, now end
    n = n + 1
    if n >= after then
      -- Escalated: the count starts again with the next denial after the block.
      if now + escalated > ends then ends = now + escalated end
      redis.call('HDEL', bkey, 'n', 's')
      keep = ends
    else
      redis.call('HSET', bkey, 'n', int(n), 's', int(since))
      if since + within > keep then keep = since + within end
    end
  end
  if ends > now then redis.call('HSET', bkey, 'b', int(ends)) end
  -- Never shortened: a block or a count already kept longer stays so.
  local ttl = redis.call('PTTL', bkey)
  if ttl > 0 and now + ttl > keep then keep = now + ttl end
  blocks_keep(bkey, now, keep)
  if ends > now then return ends - now end
  return 0
end

-- One algorithm's decision with the block in front of it. Returns
-- {1 if blocked before this hit (2: by an operator's block, which a shadow
-- policy enforces too), ms of a block this hit started, ms left in
-- the block, then the algorithm's reply}. A blocked hit is not counted (the
-- algorithm only looks, for its own wait); a denial that is counted
-- (`commit`) may start a block.
local function blocks_decide(decide, keys, bkey, now, cost, commit, args, bargs, at)
  local left, operator = blocks_left(bkey, now)
  if left > 0 then
    return {operator and 2 or 1, 0, left, unpack(decide(keys, now, cost, false, args))}
  end
  local reply = decide(keys, now, cost, commit, args)
  local started = 0
  if commit and reply[1] == 0 then started = blocks_denied(bkey, now, bargs, at) end
  return {0, started, started, unpack(reply)}
end

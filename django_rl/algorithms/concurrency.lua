-- Concurrency: at most `limit` hits of one identity in flight at once. A hit
-- that is allowed takes `cost` slots, each a lease that its holder gives back
-- when the request is done (django_rl/leases.py: ZREM of its members) and
-- that ends by itself `timeout` ms after it was taken, so the slots of a
-- process that died holding them come back.
--
-- keys[1]  the leases (ZSET: member = one slot of a hit, score = when its
--          lease ends, in ms); the key lives until the latest lease ends
-- args[1]  limit: slots in flight at once
-- args[2]  timeout in ms: how long a lease lasts unless given back
-- args[3]  the hit's token (random, made by the caller): the members of a
--          hit of cost c are the token alone (c = 1) or token:1 .. token:c
-- args[4]  the longest Retry-After told, in ms
--
-- (With cost, commit and now: see algorithms/prelude.lua.)
--
-- Returns {allowed (1/0), remaining slots, retry_after_ms, reset_after_ms,
--          slots in use, the token when the hit took slots, else ''}.
--
-- A lease is live while its end is after now. Counting is ZCOUNT of the live
-- ones (O(log N)); a counting call first removes the ended ones. Check and
-- add are one step: a script runs alone on the server, so two requests
-- cannot both take the last slot.

local function concurrency_members(token, cost)
  if cost == 1 then return {token} end
  local members = {}
  for i = 1, cost do members[i] = token .. ':' .. i end
  return members
end

-- Runs `command` on key with the words of `items` (after `prefix`, a table),
-- 1,000 at a time: Lua's unpack has a limit on its results.
local function concurrency_batches(command, key, items, width)
  local batch = {}
  for i = 1, #items do
    batch[#batch + 1] = items[i]
    if #batch >= 1000 * width or i == #items then
      redis.call(command, key, unpack(batch))
      batch = {}
    end
  end
end

local function concurrency(keys, now, cost, commit, args)
  local key = keys[1]
  local limit = tonumber(args[1])
  local timeout = tonumber(args[2])
  local token = args[3]
  local longest = tonumber(args[4])
  local after_now = '(' .. int(now)

  if commit then redis.call('ZREMRANGEBYSCORE', key, '-inf', int(now)) end
  local used = redis.call('ZCOUNT', key, after_now, '+inf')
  local allowed = used + cost <= limit
  local retry = 0
  local taken = ''
  if allowed then
    if commit then
      local expiry = int(now + timeout)
      local pairs_ = {}
      for _, member in ipairs(concurrency_members(token, cost)) do
        pairs_[#pairs_ + 1] = expiry
        pairs_[#pairs_ + 1] = member
      end
      concurrency_batches('ZADD', key, pairs_, 2)
      used = used + cost
      taken = token
    end
  else
    -- The hit fits once the (used + cost - limit) leases that end first
    -- have ended, or sooner if their holders give them back: told at most
    -- `longest`.
    local need = used + cost - limit
    local nth = redis.call('ZRANGEBYSCORE', key, after_now, '+inf', 'WITHSCORES',
      'LIMIT', int(need - 1), 1)
    retry = longest
    if nth[2] then retry = math.max(1, math.min(longest, tonumber(nth[2]) - now)) end
  end

  -- Back to full when the latest lease ends (the key's TTL).
  local reset = 0
  if used > 0 then
    local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    if last[2] then reset = math.max(0, tonumber(last[2]) - now) end
  end
  if commit then
    -- Every counting call, a denied one too, sets the TTL to the latest
    -- lease's end: the key never outlives its leases, and one whose TTL
    -- was removed is healed by its next hit.
    if reset > 0 then
      redis.call('PEXPIRE', key, int(reset))
    elseif used == 0 then
      redis.call('DEL', key)
    end
  end

  return {allowed and 1 or 0, limit - used, retry, reset, used, taken}
end

-- Gives back the slots of a hit that was counted (`done`: the reply of the
-- counting call, at `done_now`): for hits that another node's policies
-- refused after this one was counted (several cluster slots). Removing the
-- members changes no TTL: the key still ends with its latest lease.
local function concurrency_refund(keys, now, cost, args, done, done_now)
  local token = done[6]
  if tonumber(done[1]) ~= 1 or token == nil or token == '' then return 0 end
  local members = concurrency_members(token, cost)
  local removed = 0
  local batch = {}
  for i = 1, #members do
    batch[#batch + 1] = members[i]
    if #batch >= 1000 or i == #members then
      removed = removed + redis.call('ZREM', keys[1], unpack(batch))
      batch = {}
    end
  end
  return removed
end

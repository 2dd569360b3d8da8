-- Sliding log: one ZSET entry per allowed hit, whatever its cost, scored by
-- its time. A decision costs a few O(log N) reads and one write, never a pass
-- over the log, so a hit of cost 1,000,000 is as cheap as a hit of cost 1.
--
-- keys[1]  the log (ZSET: score = time in ms, member = the hit's place, below)
-- args[1]  window in ms
-- args[2]  limit: units of cost allowed per window
--
-- (With cost, commit and now: see algorithms/prelude.lua.)
--
-- Returns {allowed (1/0), units used after this call, retry_after_ms,
--          reset_after_ms, entries in the log (a look; -1 when counting
--          did not need them), the score of the hit counted (-1: none)}.
--
-- The hits are laid end to end on a line of units: a hit of cost c that is
-- allowed when the newest live hit ends at s takes [s, s + c). Its member is
-- s (as M + s mod M, so every member has the same number of digits) followed
-- by ":c" when c > 1. Entries leave only from the old end of the log, so the
-- live ones always cover one unbroken stretch of the line, and the units in
-- the window are the newest entry's end less the oldest's start: two reads,
-- whatever the number of entries or their costs. (A running total in a
-- second key would do the same but has to read every expiring entry to
-- subtract its weight; here expiring is one ZREMRANGEBYSCORE.)
--
-- Order: Redis sorts members by score, then bytewise. Scores never go down
-- (a new entry is scored at least as late as the newest one, even if the
-- server's clock steps back), and members of one score sort by their place
-- because all have the same width. So rank order is the order of the hits.
--
-- Check-then-add must be one step: two requests that both read "4 of 5" from
-- the client side would both add. A script runs alone on the server, so no
-- other command can come between the reads and the ZADD. Time comes from the
-- server (TIME), so app servers with skewed clocks share one timeline; with
-- CLOCK "app" it comes from the caller (servers that refuse TIME in scripts).
-- Either way scores never go down (below), so a caller whose clock is behind
-- another's adds entries at the newest score, never before it.



-- Places are kept modulo M. The units in the window (at most the limit) are
-- far below M, so differences taken modulo M are exact; M stays below 2^52
-- (limit <= 10^9), where Lua's doubles hold integers exactly. The place goes
-- back to 0 whenever no entry is in the window, so it wraps only after a
-- million windows of use without a pause.

-- Places are kept modulo this (above).
local function sliding_log_modulus(limit)
  local M = 1000000
  while M < limit * 1000000 do M = M * 10 end
  return M
end

-- An entry from a ZRANGE ... WITHSCORES reply (its member and score at
-- `at`, `at + 1`): {score, start, cost, member}, or nil.
local function sliding_log_entry(reply, M, at)
  at = at or 1
  local member = reply[at]
  if not member then return nil end
  local sep = string.find(member, ':', 1, true)
  if sep then
    return {tonumber(reply[at + 1]), tonumber(string.sub(member, 1, sep - 1)) - M,
      tonumber(string.sub(member, sep + 1)), member}
  end
  return {tonumber(reply[at + 1]), tonumber(member) - M, 1, member}
end

-- The member of a hit that starts at `start` and weighs `cost`.
local function sliding_log_member(M, start, cost)
  local member = int(M + start % M)
  if cost > 1 then member = member .. ':' .. int(cost) end
  return member
end

local function sliding_log(keys, now, cost, commit, args)
  local key = keys[1]
  local window = tonumber(args[1])
  local limit = tonumber(args[2])
  local M = sliding_log_modulus(limit)

  -- The most entries that left the window one counting call deletes.
  local CLEANUP = 1000

  local function entry(reply) return sliding_log_entry(reply, M) end

  local function at(rank)
    return entry(redis.call('ZRANGE', key, int(rank), int(rank), 'WITHSCORES'))
  end
  -- The entry at a rank given as text: the log's two ends, '0' and '-1',
  -- read on every hit (formatting a number costs about 0.5 us in Redis's Lua).
  local function at_text(rank)
    return entry(redis.call('ZRANGE', key, rank, rank, 'WITHSCORES'))
  end

  -- Units from `from` (a place) to the end of entry e.
  local function span(from, e)
    return (e[2] + e[3] - from) % M
  end

  -- An entry with score s is in the window while now < s + window.
  local horizon = now - window

  -- first: the rank of the oldest live entry (the entries before it have left
  -- the window). Usually none has left: the oldest entry tells, in the read
  -- that finds where the log starts anyway. Counting them is for when some
  -- have (after a pause, then at most once per expiring entry).
  local first = 0
  local oldest = at_text('0')
  if oldest and oldest[1] <= horizon then
    first = redis.call('ZCOUNT', key, '-inf', int(horizon))
    if commit then
      -- Freeing an entry takes about 1 us, so a hit removes at most CLEANUP
      -- of those that left (the oldest ones); any others go with the next
      -- hits. That bounds a hit's time even after a long pause in a big log.
      -- It leaves memory bounded too: a hit adds at most one entry and
      -- removes at least one while any are left over, so the log never holds
      -- more than `limit` entries.
      local removed = math.min(first, CLEANUP)
      redis.call('ZREMRANGEBYRANK', key, 0, int(removed - 1))
      first = first - removed
    end
    oldest = at(first)  -- nil when every entry has left
  end

  -- entries: how many are live, counted only where an answer needs it (a
  -- look, a denial's search); -1 in a count's reply.
  local entries = -1
  local function live()
    if entries < 0 then entries = redis.call('ZCARD', key) - first end
    return entries
  end

  local used = 0
  local newest
  if oldest then
    newest = at_text('-1')
    used = span(oldest[2], newest)
  end

  local allowed = used + cost <= limit
  local retry = 0
  local reset = 0
  if newest then reset = newest[1] - horizon end
  local placed = -1  -- the score of the hit counted: its refund finds it so

  if allowed then
    if commit then
      local start = 0
      local score = now
      if newest then
        start = (newest[2] + newest[3]) % M
        if newest[1] > score then score = newest[1] end
        -- After a wrap the new member sorts before the newest one: give it a
        -- later score (1 ms later, once per M units) to keep the rank order.
        if start < newest[2] and score == newest[1] then score = score + 1 end
      end
      local member = sliding_log_member(M, start, cost)
      placed = score
      -- No live entry has this member (live places differ: they span fewer
      -- than M units). An entry left over from before the window may: ZADD
      -- then moves it here, which is the same as deleting it and adding this.
      -- The score as a number: Redis turns it into text exactly (a whole
      -- number of ms, far below 2^53, in any format ZADD reads as a float),
      -- and a formatted one costs about 0.5 us.
      redis.call('ZADD', key, score, member)
      used = used + cost
      reset = score - horizon
    end
  else
    -- The hit fits once the oldest entries up to the first one whose end is
    -- (used + cost - limit) units past the log's start have left the window.
    -- Ends grow with rank: binary search, O(log^2 N) whatever the costs.
    -- The newest entry always qualifies (its end is `used` past the start);
    -- `found` is always the entry at `high`.
    local need = used + cost - limit
    local low, high = first, first + live() - 1
    local found = newest
    if not found then
      -- An empty log, and a hit heavier than the limit (uses of one policy
      -- merged by together.py): it never fits; its wait is a window.
      found = {now}
      low = high
    end
    while low < high do
      local middle = math.floor((low + high) / 2)
      local e = at(middle)
      if span(oldest[2], e) >= need then
        high = middle
        found = e
      else
        low = middle + 1
      end
    end
    retry = found[1] - horizon
  end

  if commit and newest or placed >= 0 then
    -- Every counting call (denied ones too) sets the TTL to when the newest
    -- entry leaves: the key never outlives its content, and a key whose TTL
    -- was removed is healed by its next hit.
    redis.call('PEXPIRE', key, int(reset))
  end

  if not commit then live() end
  return {allowed and 1 or 0, used, retry, reset, entries, placed}
end

-- Takes back a hit counted by `done` (its reply) as if it had never been:
-- an entry of its score and cost leaves the line of units, and each later
-- entry (hits counted since, while the refund was pending) moves down by
-- its cost, keeping its score. The units in the window are then what they
-- would be without it. The entry is found by score and cost, not by place:
-- refunds of earlier entries move places; entries of one score and cost
-- are alike, so taking back any of them leaves the same log.
local function sliding_log_refund(keys, now, cost, args, done, done_now)
  local key = keys[1]
  local M = sliding_log_modulus(tonumber(args[2]))
  local score = tonumber(done[6])
  if not score or score < 0 then return end
  local alike = redis.call('ZRANGEBYSCORE', key, int(score), int(score), 'WITHSCORES')
  local found
  for i = 1, #alike, 2 do
    local e = sliding_log_entry(alike, M, i)
    if e[3] == cost then found = e end
  end
  if not found then return end  -- it left the window already
  local rank = redis.call('ZRANK', key, found[4])
  local later = redis.call('ZRANGE', key, int(rank + 1), '-1', 'WITHSCORES')
  redis.call('ZREM', key, found[4])
  for i = 1, #later, 2 do
    local e = sliding_log_entry(later, M, i)
    redis.call('ZREM', key, e[4])
    redis.call('ZADD', key, int(e[1]), sliding_log_member(M, (e[2] - cost) % M, e[3]))
  end
end

-- The mark of blocks set by code (block()) on policies without block_for or
-- escalate (policies/block_reading.py): a hash, policy name -> the end of
-- its latest such block (ms, the decision's clock), with a TTL past the
-- latest end. Processes read it to start reading blocks for those policies.
-- Runs after prelude.lua.

-- A block of `policy` for `ms` starts at `now`: the mark keeps the later end.
local function mark_block(mark, policy, now, ms, slack)
  local ends = now + ms
  if tonumber(redis.call('HGET', mark, policy) or '0') < ends then
    redis.call('HSET', mark, policy, int(ends))
  end
  if redis.call('PTTL', mark) < ms + slack then
    redis.call('PEXPIRE', mark, int(ms + slack))
  end
end

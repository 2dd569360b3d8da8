-- All of a request's policies decided together, all or nothing: when every
-- one allows, every one counts the hit; when any denies, none counts it. One
-- script so that no other command runs between the looks and the counts:
-- two requests that both looked at "4 of 5" cannot both count.
--
-- KEYS     every policy's keys, in order
-- ARGV[1]  the time in ms (CLOCK "app"), or '' to read the server's TIME
-- ARGV[2]  '1' to count the hit when all allow, '0' to only look
-- then per policy: its algorithm's name, the number of its keys, of its
-- parameters, the cost, '1' if its denial denies the request ('0': a
-- policy in shadow mode, which never denies), then the parameters. A name
-- '+<algorithm>' is a policy with blocks (blocks.lua): its last key is the
-- block's hash, its first four parameters blocks.lua's, and its reply
-- blocks.lua's; a blocked policy denies, and one whose own denial is
-- counted (a counting call) may start a block, whether or not it counted.
--
-- Returns {1 if the hit was counted, else 0; the time; then each policy's
-- reply}. It
-- is counted when ARGV[2] is '1' and no policy whose denial denies the
-- request denies it; then each policy counts it as it would alone (a shadow
-- policy that denies counts nothing). Every reply is its algorithm's answer
-- (see prelude.lua): of counting when counted, else of a look (the state
-- without this hit). A policy that answers -1 (fixed_window: the clock's
-- estimate missed) makes the whole call count nothing.

local algorithms = {
  fixed_window = fixed_window, sliding_log = sliding_log, token_bucket = token_bucket,
  gcra = gcra, sliding_window = sliding_window, concurrency = concurrency, quota = quota,
}

local now = clock(ARGV[1])
local policies = {}
local at, first_key = 3, 1
while at <= #ARGV do
  local nkeys, nargs = tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2])
  local p = {
    decide = algorithms[ARGV[at]], cost = tonumber(ARGV[at + 3]), veto = ARGV[at + 4] == '1',
    keys = {unpack(KEYS, first_key, first_key + nkeys - 1)},
    args = {unpack(ARGV, at + 5, at + 4 + nargs)},
  }
  if string.byte(ARGV[at]) == 43 then  -- '+': with blocks
    p.decide = algorithms[string.sub(ARGV[at], 2)]
    p.bkey = table.remove(p.keys)
    p.bargs = {p.args[1], p.args[2], p.args[3], p.args[4]}
    p.args = {unpack(p.args, 5)}
  end
  policies[#policies + 1] = p
  first_key = first_key + nkeys
  at = at + 5 + nargs
end

local function decide(p, commit)
  if p.bkey then
    return blocks_decide(p.decide, p.keys, p.bkey, now, p.cost, commit, p.args, p.bargs)
  end
  return p.decide(p.keys, now, p.cost, commit, p.args)
end

local replies = {}
local all, missed = 1, false
for i, p in ipairs(policies) do
  replies[i] = decide(p, false)
  local allowed = replies[i][1]
  local veto = p.veto
  if p.bkey then
    allowed = replies[i][4]
    if replies[i][1] ~= 0 and allowed ~= -1 then allowed = 0 end
    -- An operator's block is enforced in every mode, shadow included.
    if replies[i][1] == 2 then veto = true end
  end
  if allowed == -1 then missed = true end
  if allowed == -1 or (allowed == 0 and veto) then all = 0 end
end
if ARGV[2] ~= '1' then all = 0 end
if all == 1 then
  -- No policy that can deny the request denied it in its look. Counting
  -- changes each policy's own keys only (the caller merges uses of one key
  -- into one policy), so each count decides as its look did.
  for i, p in ipairs(policies) do
    replies[i] = decide(p, true)
  end
elseif ARGV[2] == '1' and not missed then
  -- Counted nowhere; a policy's own denial (not a blocked hit) still counts
  -- for its blocks.
  for i, p in ipairs(policies) do
    local r = replies[i]
    if p.bkey and r[1] == 0 and r[4] == 0 then
      local started = blocks_denied(p.bkey, now, p.bargs)
      r[2], r[3] = started, started
    end
  end
end
return {all, now, unpack(replies)}

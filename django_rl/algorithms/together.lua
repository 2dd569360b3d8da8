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
-- policy in shadow mode, which never denies), then the parameters
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
  policies[#policies + 1] = p
  first_key = first_key + nkeys
  at = at + 5 + nargs
end

local replies = {}
local all = 1
for i, p in ipairs(policies) do
  replies[i] = p.decide(p.keys, now, p.cost, false, p.args)
  local allowed = replies[i][1]
  if allowed == -1 or (allowed == 0 and p.veto) then all = 0 end
end
if ARGV[2] ~= '1' then all = 0 end
if all == 1 then
  -- No policy that can deny the request denied it in its look. Counting
  -- changes each policy's own keys only (the caller merges uses of one key
  -- into one policy), so each count decides as its look did.
  for i, p in ipairs(policies) do
    replies[i] = p.decide(p.keys, now, p.cost, true, p.args)
  end
end
return {all, now, unpack(replies)}

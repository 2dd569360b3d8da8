-- Takes back hits that together.lua counted, then looks: for hits on several
-- cluster slots, reserved on some slots while another slot denied (see
-- together.py). Each algorithm's <name>_refund undoes its count as if the
-- hit had never been counted, whatever was counted since.
--
-- KEYS     every policy's keys, as the counting call had them
-- ARGV[1]  the time in ms (CLOCK "app"), or '' to read the server's TIME
-- ARGV[2]  the counting call's time in ms
-- then per policy: its algorithm's name, the number of its keys, of its
-- parameters, of the values of its reply to the counting call, the cost,
-- then the parameters, then that reply
--
-- Returns each policy's reply to a look after the refund (prelude.lua).

local refunds = {
  fixed_window = fixed_window_refund, sliding_log = sliding_log_refund,
  token_bucket = token_bucket_refund, gcra = gcra_refund,
  sliding_window = sliding_window_refund, concurrency = concurrency_refund,
  quota = quota_refund,
}
local looks = {
  fixed_window = fixed_window, sliding_log = sliding_log, token_bucket = token_bucket,
  gcra = gcra, sliding_window = sliding_window, concurrency = concurrency, quota = quota,
}

local now = clock(ARGV[1])
local done_now = tonumber(ARGV[2])
local replies = {}
local at, first_key = 3, 1
while at <= #ARGV do
  local name = ARGV[at]
  local nkeys, nargs, ndone = tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3])
  local cost = tonumber(ARGV[at + 4])
  local keys = {unpack(KEYS, first_key, first_key + nkeys - 1)}
  local args = {unpack(ARGV, at + 5, at + 4 + nargs)}
  local done = {unpack(ARGV, at + 5 + nargs, at + 4 + nargs + ndone)}
  if string.byte(name) == 43 then  -- '+': with blocks (together.lua)
    name = string.sub(name, 2)
    local bkey, bargs = table.remove(keys), {args[1], args[2], args[3], args[4]}
    args = {unpack(args, 5)}
    refunds[name](keys, now, cost, args, {unpack(done, 4)}, done_now)
    replies[#replies + 1] = blocks_decide(looks[name], keys, bkey, now, cost, false, args, bargs)
  else
    refunds[name](keys, now, cost, args, done, done_now)
    replies[#replies + 1] = looks[name](keys, now, cost, false, args)
  end
  first_key = first_key + nkeys
  at = at + 5 + nargs + ndone
end
return replies

-- GCRA (generic cell rate algorithm): token-bucket behaviour in one integer,
-- the theoretical arrival time (TAT) of the next hit.
--
-- keys[1]  the identity's key: a string holding the TAT
-- args[1]  T: the emission interval (period / rate), in units (below)
-- args[2]  tau: burst * T, how far ahead of now the TAT may run
-- args[3]  S: units per millisecond
-- args[4]  W: the wrap of the stored value, in ms (a power of two)
--
-- (With cost, commit and now: see algorithms/prelude.lua.)
--
-- Returns {allowed (1/0), remaining hits of cost 1, retry_after_ms,
-- reset_after_ms, units of the TAT ahead of now}.
--
-- Exact integer arithmetic. A unit is 1/S ms, with S = rate / gcd(rate,
-- period in ms), so T = period / gcd is a whole number of units whatever
-- the rate (3/s: S = 3, T = 1000: a third of a ms is one unit). Lua numbers
-- are doubles, exact below 2^53; the TAT in units since 1970 would not be
-- (ms since 1970 are 2^41, times S up to 2^30), so the key stores it modulo
-- M = W * S <= 2^52, and now is taken modulo M the same way
-- ((now mod W) * S, exact). The TAT is never more than tau ahead of now
-- (the caller keeps tau <= M / 4) and the key dies when the TAT is reached,
-- so the difference of the two, folded into (-M/2, M/2], is the TAT's lead
-- on now, exactly.
--
-- Read-decide-write is one step, or two requests both take the last slot: a
-- script runs alone on the server.

local function gcra(keys, now, cost, commit, args)
  local key = keys[1]
  local T = tonumber(args[1])
  local tau = tonumber(args[2])
  local S = tonumber(args[3])
  local W = tonumber(args[4])
  local M = W * S
  local now_units = (now % W) * S

  -- lead: how far the TAT is ahead of now, in units (0: no hit is pending).
  local lead = 0
  local stored = redis.call('GET', key)
  if stored then
    lead = (tonumber(stored) - now_units) % M
    if lead > M / 2 then lead = lead - M end
    -- A TAT already passed (the key outlived it by under a ms, or the caller's
    -- clock is ahead) is the same as none: a hit never earns credit for idle
    -- time beyond the burst.
    if lead < 0 then lead = 0 end
  end

  local wanted = lead + cost * T
  local allowed = wanted <= tau
  local after = lead
  local retry = 0
  if allowed then
    if commit then after = wanted end
  else
    retry = ceil_div(wanted - tau, S)
  end
  local remaining = floor_div(tau - after, T)
  local reset = ceil_div(after, S)

  if commit then
    if allowed then
      -- The key lives until its TAT: after that it holds nothing a missing key
      -- does not, and its TTL is what makes the stored value unambiguous.
      redis.call('SET', key, int((now_units + after) % M), 'PX', int(reset))
    elseif stored then
      -- A denied hit changes nothing, but heals a TTL that was removed.
      if reset > 0 then
        redis.call('PEXPIRE', key, int(reset))
      else
        redis.call('DEL', key)
      end
    end
  end

  return {allowed and 1 or 0, remaining, retry, reset, lead}
end

-- Takes back a counted hit (`done`: its reply): the TAT moves back by its
-- cost * T, never behind now. Exact: a TAT that passed now meanwhile would
-- have passed it without the hit too.
local function gcra_refund(keys, now, cost, args, done, done_now)
  local key = keys[1]
  local T = tonumber(args[1])
  local S = tonumber(args[3])
  local W = tonumber(args[4])
  local M = W * S
  local now_units = (now % W) * S
  local stored = redis.call('GET', key)
  if not stored then return end
  local lead = (tonumber(stored) - now_units) % M
  if lead > M / 2 then lead = lead - M end
  lead = lead - cost * T
  if lead <= 0 then
    redis.call('DEL', key)
  else
    redis.call('SET', key, int((now_units + lead) % M), 'PX', int(ceil_div(lead, S)))
  end
end

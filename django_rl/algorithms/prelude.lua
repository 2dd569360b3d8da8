-- What every algorithm's script shares. Each algorithm is one function in a
-- file of its own (sliding_log.lua, ...), of the form
--
--   local function <name>(keys, now, cost, commit, args)
--
-- keys    its Redis keys (a Lua table; a Redis Cluster routes by them and
--         ACL rules check them, so they are always passed as KEYS)
-- now     the time in ms: the server's TIME, or with CLOCK "app" the app
--         server's time, passed by the caller
-- cost    the weight of this hit (1 <= cost <= limit, checked by the caller)
-- commit  true to count the hit, false to only look (writes nothing)
-- args    its parameters, as strings (a Lua table)
--
-- and returns a table of integers, {allowed (1/0), ...}; allowed is -1 when
-- the hit cannot be decided with these keys (fixed_window: the server's
-- window is not among them) and the caller must ask again.
--
-- A script is this prelude, one or more algorithms, and a main part: one
-- algorithm alone (algorithms/base.py, ScriptAlgorithm) or all of a
-- request's policies together (together.lua).

-- Numbers go to redis.call as strings formatted here: Lua's default format
-- (%.14g) would round large integers.
local function int(x) return string.format('%d', x) end

-- ceil(a / b) and floor(a / b) for whole numbers (0 for a below 0), exact
-- even where a / b rounds.
local function ceil_div(a, b)
  if a <= 0 then return 0 end
  local q = math.floor(a / b)
  if q * b < a then q = q + 1 end
  if (q - 1) * b >= a then q = q - 1 end
  return q
end
local function floor_div(a, b)
  if a < 0 then return 0 end
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 end
  if (q + 1) * b <= a then q = q + 1 end
  return q
end

-- The time in ms: `given` (CLOCK "app"), or '' to read the server's TIME.
local function clock(given)
  local now = tonumber(given)
  if now then return now end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

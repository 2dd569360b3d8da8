-- The reset token: read it, writing a fresh one if there is none.
--
-- KEYS[1]  the token key ({KEY_PREFIX}:~epoch)
-- ARGV[1]  a fresh random token
-- ARGV[2]  its TTL in ms
--
-- Returns the token now in force. A missing token (never written, expired,
-- or removed by a FLUSHDB) is written here, in the same step as the read,
-- so every process that read the one before sees a change, and the next
-- flush removes a token that someone has read: it is seen too.
local token = redis.call('GET', KEYS[1])
if token then return token end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return ARGV[1]

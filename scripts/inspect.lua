-- admitd inspect: one (scope, key)'s state as the acquire script sees it.
-- Read-only: what time has made irrelevant is skipped, not deleted.
--
-- KEYS as acquire.lua: state hash, quota zset, leases zset, one hash per rule,
-- then the hash that holds the penalty when it is not the state hash
-- ARGV[1] quota_window_ms  ARGV[2] nrules
-- Returns {now_ms, next_at, penalty_until, leases in flight, quota instants
-- in the window, the oldest of them (0: none), then per rule a, b, t,
-- then the key's adaptive hash: amt, td, tc, tl (all 0: never learned)}.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[1])
local nrules = tonumber(ARGV[2]) or (#KEYS - 3)
local st = redis.call('HMGET', KEYS[1], 'next_at', 'penalty_until')
if KEYS[4 + nrules] then st[2] = redis.call('HGET', KEYS[4 + nrules], 'penalty_until') end
local out = { now, tonumber(st[1]) or 0, tonumber(st[2]) or 0,
	      redis.call('ZCOUNT', KEYS[3], '(' .. now, '+inf') }
if window > 0 then
	local from = '(' .. (now - window)
	out[5] = redis.call('ZCOUNT', KEYS[2], from, '+inf')
	local first = redis.call('ZRANGEBYSCORE', KEYS[2], from, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
	out[6] = tonumber(first[2]) or 0
else
	out[5], out[6] = 0, 0
end
for i = 4, 3 + nrules do
	local h = redis.call('HMGET', KEYS[i], 'a', 'b', 't')
	out[#out + 1] = tonumber(h[1]) or 0
	out[#out + 1] = tonumber(h[2]) or 0
	out[#out + 1] = tonumber(h[3]) or 0
end
local ad = adapt_read(adapt_key(KEYS[1]))
out[#out + 1] = ad.amt
out[#out + 1] = ad.td
out[#out + 1] = ad.tc
out[#out + 1] = ad.tl
return out

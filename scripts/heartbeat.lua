-- admitd heartbeat: this pod is alive; how many are?
--
-- Each admitd registers itself every second in one sorted set scored by the
-- Redis time it last beat; members older than the liveness window are
-- dropped. fallback_divisor = auto divides by the count this returns.
--
-- KEYS[1] pods zset   ARGV[1] pod id   ARGV[2] liveness window ms
-- KEYS[2] (optional) this pod's list of leases it issued that another
-- daemon settled while live (settled.lua): up to ARGV[3] of them are taken
-- Returns {pods alive (including this one), Redis time in ms, 1 when this
-- pod was still registered (0: first beat, or Redis lost its data: restarted
-- empty, flushed, or failed over to a replica that never saw it), this pod's
-- rank among the ids alive in byte order (0-based)}: every pod computes the
-- same ranks, so the fallback can give each limit's remainder to the first
-- pods by rank and the shares add up to the limit exactly. With KEYS[2], a
-- fifth element: the lease ids taken from that list (the oldest first).

if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[2])

local known = redis.call('ZSCORE', KEYS[1], ARGV[1]) and 1 or 0
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
redis.call('PEXPIRE', KEYS[1], window)
local rank = 0
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
	if id < ARGV[1] then rank = rank + 1 end
end
local out = { redis.call('ZCARD', KEYS[1]), now, known, rank }
if KEYS[2] then
	local take = tonumber(ARGV[3]) or 0
	out[5] = redis.call('LRANGE', KEYS[2], 0, take - 1)
	if #out[5] > 0 then redis.call('LTRIM', KEYS[2], #out[5], -1) end
end
return out

-- admitd release: one call per release (or rollback) of a lease on one (scope, key).
--
-- Mirrors daemon/limiter.c lim_release: the lease leaves the in-flight set;
-- when it was still in flight and the scope is serialized, next_at moves to
-- completion + min_delay (an expired lease pushes nothing); token meters are
-- charged post hoc. With mode "rollback" (an acquire of several targets where
-- another target refused) the admission is undone instead: the lease and its
-- quota instants go, request meters are refunded, pacing is left alone.
--
-- KEYS[1] state hash  KEYS[2] quota zset  KEYS[3] leases zset  KEYS[4..] rule hashes
-- (the same KEYS as acquire.lua)
-- ARGV: lease_id mode(release|rollback) serialized min_delay_ms nrules
--       then per rule: kind amount window_ms burst charge
-- Returns 1 when the lease was still in flight, else 0.

if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local lease_id = ARGV[1]
local rollback = ARGV[2] == 'rollback'
local serialized = ARGV[3] == '1'
local min_delay = tonumber(ARGV[4])
local nrules = tonumber(ARGV[5])
local sk, qk, lk = KEYS[1], KEYS[2], KEYS[3]

redis.call('ZREMRANGEBYSCORE', lk, '-inf', now)
local held = redis.call('ZREM', lk, lease_id)

if rollback then
	redis.call('ZREM', qk, lease_id .. ':1')
elseif held == 1 and serialized and min_delay > 0 then
	local next_at = tonumber(redis.call('HGET', sk, 'next_at')) or 0
	if now + min_delay > next_at then
		redis.call('HSET', sk, 'next_at', now + min_delay)
		local ttl = redis.call('PTTL', sk)
		if ttl < min_delay then redis.call('PEXPIRE', sk, min_delay) end
	end
end

for i = 1, nrules do
	local b = 5 + (i - 1) * 5
	local p = { kind = ARGV[b + 1], amount = tonumber(ARGV[b + 2]),
		    window_ms = tonumber(ARGV[b + 3]), burst = tonumber(ARGV[b + 4]) }
	local charge = tonumber(ARGV[b + 5])
	if charge ~= 0 then
		local key = KEYS[3 + i]
		local h = redis.call('HMGET', key, 'a', 'b', 't')
		local st = { a = tonumber(h[1]) or 0, b = tonumber(h[2]) or 0, t = tonumber(h[3]) or 0 }
		strat_book(st, p, now, charge)
		redis.call('HSET', key, 'a', st.a, 'b', st.b, 't', st.t)
		redis.call('PEXPIRE', key, strat_ttl_ms(p))
	end
end
return held

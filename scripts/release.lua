-- admitd release: one call per release (or rollback, reconcile, rebook) of a
-- lease on one (scope, key).
--
-- Mirrors daemon/limiter.c lim_release. Modes:
--   release    the lease leaves the in-flight set; when it was still in
--              flight and the scope is serialized, next_at moves to
--              completion + min_delay (an expired lease pushes nothing);
--              token meters are charged post hoc, whether or not the lease
--              was still in flight (an LLM call may outlive lease_ttl).
--   rollback   an acquire of several targets where another target refused:
--              the admission is undone: the lease and its quota instant go,
--              request meters are refunded, and next_at goes back to what it
--              was unless another admission has moved it since.
--   reconcile  an acquire whose outcome the daemon never learned (its
--              connection died or its timer fired): whatever it booked under
--              this lease id leaves the in-flight set. Idempotent; refunds
--              nothing (the request may have gone out through the fallback).
--   rebook     a lease this daemon holds is put back in the in-flight set
--              (Redis came back empty, or the lease was granted in fallback),
--              for the time it has left, unless Redis already has it.
--
-- KEYS[1] state hash  KEYS[2] quota zset  KEYS[3] leases zset  KEYS[4..] rule hashes
-- (the same KEYS as acquire.lua), then the released-leases zset
-- KEYS[4 + nrules] for scopes that keep a lease set
-- ARGV: lease_id mode serialized min_delay_ms nrules
--       then per rule: kind amount window_ms burst charge
--       then x1 x2: rollback: the next_at the admission booked and the one it
--       replaced; rebook: the ms the lease has left and not_after (a Redis
--       time after which the caller has given up on this call; 0: none);
--       release: lease_ttl, how long the release is remembered
--       then pen: i when rule i's hash holds the key's penalty (acquire.lua),
--       whose TTL a charge here must not cut below the penalty's end; else 0
-- Returns 1 when the lease was (release, rollback, reconcile) or now is
-- (rebook) in flight, else 0; -1 for a rebook of a lease released since.

if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local lease_id = ARGV[1]
local mode = ARGV[2]
local serialized = ARGV[3] == '1'
local min_delay = tonumber(ARGV[4])
local nrules = tonumber(ARGV[5])
local x1 = tonumber(ARGV[6 + nrules * 5]) or 0
local x2 = tonumber(ARGV[7 + nrules * 5]) or 0
local pen = tonumber(ARGV[8 + nrules * 5]) or 0
local sk, qk, lk = KEYS[1], KEYS[2], KEYS[3]
local xk = KEYS[4 + nrules] -- released leases (lease id -> until when it matters)

redis.call('ZREMRANGEBYSCORE', lk, '-inf', now)
if xk then redis.call('ZREMRANGEBYSCORE', xk, '-inf', now) end

if mode == 'rebook' then
	if x1 <= 0 or (x2 > 0 and now > x2) then return 0 end
	-- Released meanwhile (through another daemon): never put back.
	if xk and redis.call('ZSCORE', xk, lease_id) then return -1 end
	redis.call('ZADD', lk, 'NX', now + x1, lease_id)
	if redis.call('PTTL', lk) < x1 then redis.call('PEXPIRE', lk, x1) end
	return 1
end

local held = redis.call('ZREM', lk, lease_id)
if mode == 'reconcile' then return held end
-- A release is remembered for lease_ttl (x1), so that the daemon that
-- issued the lease, not knowing, cannot book it again after an outage.
if mode == 'release' and xk and x1 > 0 then
	redis.call('ZADD', xk, now + x1, lease_id)
	if redis.call('PTTL', xk) < x1 then redis.call('PEXPIRE', xk, x1) end
end

if mode == 'rollback' then
	redis.call('ZREM', qk, lease_id .. ':1')
	if x1 > 0 and tonumber(redis.call('HGET', sk, 'next_at')) == x1 then
		if x2 > now then
			redis.call('HSET', sk, 'next_at', x2)
		else
			redis.call('HDEL', sk, 'next_at')
		end
	end
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
		local h = redis.call('HMGET', key, 'a', 'b', 't', 'penalty_until')
		local st = { a = tonumber(h[1]) or 0, b = tonumber(h[2]) or 0, t = tonumber(h[3]) or 0 }
		strat_book(st, p, now, charge)
		redis.call('HSET', key, 'a', st.a, 'b', st.b, 't', st.t)
		local ttl = strat_ttl_ms(p)
		if pen == i and (tonumber(h[4]) or 0) - now > ttl then ttl = tonumber(h[4]) - now end
		redis.call('PEXPIRE', key, ttl)
	end
end
return held

-- admitd acquire: one call per acquire attempt for one (scope, key).
--
-- Checks every limit of the scope that applies to the request and books all
-- of them, or nothing (mirrors daemon/limiter.c lim_check + lim_book, in the
-- same order, with the same tie rule: the longest wait names the refusal).
-- The clock is Redis TIME, read once.
--
-- KEYS[1] state hash (next_at, penalty_until)   KEYS[2] quota zset (admission instants)
-- KEYS[3] leases zset (lease id -> deadline)     KEYS[4..] one hash per rule in ARGV
-- ARGV: lease_id count cost floor min_delay_ms serialized cluster_concurrency
--       quota quota_window_ms lease_ttl_ms concurrency_retry_ms track_leases nrules
--       then per rule: meter(r|t|c) kind amount window_ms burst code reserve
--       (reserve: token units this admission books up front on a t rule)
--       then not_after: a Redis time (ms) after which the caller has given up on
--       this call (it timed out and decided otherwise): book nothing then; 0: none
-- Returns {admitted 1|0, retry_after_ms, code, now_ms, next_at_booked,
-- next_at_before}; code names the deciding limit: -1 none, -2 penalty,
-- -3 min_delay, -4 cluster_concurrency, -5 quota, >= 0 the rule's index in
-- the scope, -6 stale (ran after not_after), -7 min_delay while a lease of
-- a serialized scope is held (a wait for a slot). next_at_booked is the next_at
-- this admission set (0: it set none) and next_at_before what it replaced,
-- so that a rollback can put the pacing back exactly.

if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local lease_id = ARGV[1]
local count = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local floor_units = tonumber(ARGV[4])
local min_delay = tonumber(ARGV[5])
local serialized = ARGV[6] == '1'
local cluster = tonumber(ARGV[7])
local quota = tonumber(ARGV[8])
local quota_window = tonumber(ARGV[9])
local lease_ttl = tonumber(ARGV[10])
local conc_retry = tonumber(ARGV[11])
local track = ARGV[12] == '1'
local nrules = tonumber(ARGV[13])
local not_after = tonumber(ARGV[14 + nrules * 7]) or 0

-- A call that Redis runs late (it was frozen, or the reply could not make the
-- caller's timeout) must not book a lease nobody will release.
if not_after > 0 and now > not_after then
	return { 0, 0, -6, now }
end

local sk, qk, lk = KEYS[1], KEYS[2], KEYS[3]

-- Drop expired leases and quota instants out of the window (lim_purge).
redis.call('ZREMRANGEBYSCORE', lk, '-inf', now)
if quota > 0 then
	redis.call('ZREMRANGEBYSCORE', qk, '-inf', now - quota_window)
end

local admitted, wait, code = true, 0, -1
local function refuse(w, c)
	if admitted or (wait ~= -1 and (w == -1 or w > wait)) then
		admitted, wait, code = false, w, c
	end
end

local function lease_wait(n)
	local w = conc_retry
	if n > 0 then
		local first = redis.call('ZRANGE', lk, 0, 0, 'WITHSCORES')
		local d = tonumber(first[2]) - now
		if d < w then w = d end
	end
	if w < 1 then w = 1 end
	return w
end

local st = redis.call('HMGET', sk, 'next_at', 'penalty_until')
local next_at = tonumber(st[1]) or 0
local penalty_until = tonumber(st[2]) or 0
local nleases = redis.call('ZCARD', lk)

if now < penalty_until then refuse(penalty_until - now, -2) end
if serialized and nleases > 0 then refuse(lease_wait(nleases), -7) end
if now < next_at then refuse(next_at - now, -3) end
if cluster > 0 and nleases + count > cluster then
	if count > cluster then refuse(-1, -4) else refuse(lease_wait(nleases), -4) end
end
local nquota = 0
if quota > 0 then
	nquota = redis.call('ZCARD', qk)
	if count > quota then
		refuse(-1, -5)
	elseif nquota + count > quota then
		local k = nquota + count - quota - 1
		local at = redis.call('ZRANGE', qk, k, k, 'WITHSCORES')
		refuse(tonumber(at[2]) + quota_window - now, -5)
	end
end

local rules = {}
for i = 1, nrules do
	local b = 13 + (i - 1) * 7
	local r = {
		meter = ARGV[b + 1],
		p = { kind = ARGV[b + 2], amount = tonumber(ARGV[b + 3]),
		      window_ms = tonumber(ARGV[b + 4]), burst = tonumber(ARGV[b + 5]) },
		code = tonumber(ARGV[b + 6]),
		reserve = tonumber(ARGV[b + 7]) or 0,
		key = KEYS[3 + i],
	}
	rules[i] = r
	if r.meter == 'c' then
		if nleases + count > r.p.amount then
			if count > r.p.amount then refuse(-1, r.code) else refuse(lease_wait(nleases), r.code) end
		end
	else
		local h = redis.call('HMGET', r.key, 'a', 'b', 't')
		r.st = { a = tonumber(h[1]) or 0, b = tonumber(h[2]) or 0, t = tonumber(h[3]) or 0 }
		local c = r.reserve * count
		if r.meter == 'r' then c = cost * count end
		local ok, w = strat_check(r.st, r.p, now, c, floor_units)
		if not ok then refuse(w, r.code) end
	end
end

if not admitted then
	return { 0, wait, code, now }
end

-- Book everything (lim_book). Every key gets a TTL bounded by what it holds.
if quota > 0 then
	for k = 1, count do
		redis.call('ZADD', qk, now, lease_id .. ':' .. k)
	end
	redis.call('PEXPIRE', qk, quota_window)
end
if track then
	for k = 1, count do
		local id = lease_id
		if count > 1 then id = lease_id .. ':' .. k end
		redis.call('ZADD', lk, now + lease_ttl, id)
	end
	redis.call('PEXPIRE', lk, lease_ttl)
end
local next_before, next_booked = next_at, 0
if cluster > 0 and min_delay > 0 and now + min_delay > next_at then
	next_at = now + min_delay
	next_booked = next_at
	redis.call('HSET', sk, 'next_at', next_at)
	local ttl = next_at - now
	if penalty_until - now > ttl then ttl = penalty_until - now end
	redis.call('PEXPIRE', sk, ttl)
end
for i = 1, nrules do
	local r = rules[i]
	local n = r.reserve * count
	if r.meter == 'r' then n = cost * count end
	if r.meter == 'r' or (r.meter == 't' and n ~= 0) then
		strat_book(r.st, r.p, now, n)
		redis.call('HSET', r.key, 'a', r.st.a, 'b', r.st.b, 't', r.st.t)
		redis.call('PEXPIRE', r.key, strat_ttl_ms(r.p))
	end
end
return { 1, 0, -1, now, next_booked, next_before }

-- admitd release: one call per release (or rollback, reconcile, rebook) of a
-- lease on one (scope, key).
--
-- Mirrors daemon/limiter/limiter.c lim_release. Modes:
--   release    the lease leaves the in-flight set; when it was still in
--              flight and the scope paces from completion (serialized, or
--              cluster_concurrency 1), next_at moves to completion +
--              min_delay (an expired lease pushes nothing);
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
--   outcome    a release with nothing to settle here but the upstream's
--              outcome, for an adaptive scope: only that is applied.
--
-- Settlement records. An admission whose release settles something (a
-- lease set, completion-anchored pacing, token meters) left the record
-- KEYS[4 + nrules] (acquire.lua): 'L' .. deadline .. '|' .. POD '|' BODY '|'
-- CHARGES, where deadline is the Redis time its lease_ttl ends, POD the pod
-- that issued it, BODY its handle's body (every target's scope, class and
-- key, and the reservation) and CHARGES the tokens the reservation charged
-- each rule of this target. A release settles only through it, once: it
-- turns the record into the tombstone 'D' (kept for the record's TTL), so a
-- repeat finds 'D' and changes nothing, and a handle that was never issued
-- finds no record and changes nothing either. `own` says the daemon that
-- issued the lease sends it (it knows what it booked): a missing record
-- (Redis lost its data) is then settled anyway; from any other daemon the
-- record must be there and bind exactly the BODY and CHARGES that daemon
-- made of the handle (claim), else nothing changes: an edited class,
-- scope, key or reservation refunds no rule the lease did not charge.
-- A lease another daemon settles before its deadline was live: it is
-- `held` (as its issuer would say), and the reply names the issuer, which
-- is told (settled.lua) so that it stops counting the lease.
--
-- KEYS[1] state hash  KEYS[2] quota zset  KEYS[3] leases zset  KEYS[4..] rule strings
-- (the same KEYS as acquire.lua), then the lease's settlement record
-- KEYS[4 + nrules]
-- ARGV: lease_id mode paced min_delay_ms nrules (paced: 1 when min_delay
--       counts from completion)
--       then per rule: kind amount window_ms burst charge
--       then x1 x2: rollback: the next_at the admission booked and the one it
--       replaced; rebook: the ms the lease has left and not_after (a Redis
--       time after which the caller has given up on this call; 0: none)
--       then pen: i when rule i's string holds the key's penalty (acquire.lua),
--       whose TTL a charge here must not cut below the penalty's end; else 0
--       then own (1: from the issuing daemon), claim ("POD|BODY|CHARGES":
--       this daemon, the handle's body and the charges this daemon's conf
--       makes of its reservation), grace (how long a record outlives the
--       lease: rebook makes one that lives x1 + grace)
--       then, in an adaptive scope (release and outcome modes), the outcome
--       ('ok', 'limited' or '': none) and ceil floor factor step interval_ms:
--       the outcome moves the key's learned amount (adaptive.lua), once per
--       settlement (a repeat, or a handle with no record, moves nothing)
--       then, in a scope that takes overrides (outcome '' and five zeros
--       when it is not adaptive), ovr: override_max times 1000; a paced
--       release then paces by the key's override in force (override.lua)
-- Returns, release: 1 when the lease was in flight (or, with no lease set,
-- its record's deadline had not passed), 0 when it was settled but no
-- longer in flight, -2 when it was settled before (a repeat), -3 when there
-- is no record of it (never issued, or long gone), -4 when its record binds
-- another handle or other charges (edited): -2, -3 and -4 changed nothing.
-- From another daemon, a lease in flight answers {1, POD} instead: POD
-- issued it. Rollback, reconcile: 1 when it was in flight, else 0.
-- Rebook: 1 when it now is in flight, 0 when too late, -1 when it was
-- released meanwhile.

if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local lease_id = ARGV[1]
local mode = ARGV[2]
local paced = ARGV[3] == '1'
local min_delay = tonumber(ARGV[4])
local nrules = tonumber(ARGV[5])
local x1 = tonumber(ARGV[6 + nrules * 5]) or 0
local x2 = tonumber(ARGV[7 + nrules * 5]) or 0
local pen = tonumber(ARGV[8 + nrules * 5]) or 0
local own = ARGV[9 + nrules * 5] == '1'
local claim = ARGV[10 + nrules * 5] or ''
local grace = tonumber(ARGV[11 + nrules * 5]) or 0
local sk, qk, lk, rk = KEYS[1], KEYS[2], KEYS[3], KEYS[4 + nrules]
local outcome = ARGV[12 + nrules * 5] or ''
local ad = adapt_arg(ARGV, 12 + nrules * 5)
local ovr = tonumber(ARGV[18 + nrules * 5]) or 0

if mode == 'outcome' then
	adapt_outcome_key(sk, ad, now, outcome)
	return 0
end

redis.call('ZREMRANGEBYSCORE', lk, '-inf', now)

if mode == 'rebook' then
	if x1 <= 0 or (x2 > 0 and now > x2) then return 0 end
	local rec = redis.call('GET', rk)
	-- Released meanwhile (through another daemon): never put back.
	if rec == 'D' then return -1 end
	if not rec then redis.call('SET', rk, 'L' .. (now + x1) .. '|' .. claim, 'PX', x1 + grace) end
	redis.call('ZADD', lk, 'NX', now + x1, lease_id)
	if redis.call('PTTL', lk) < x1 then redis.call('PEXPIRE', lk, x1) end
	return 1
end

local live, issuer = false, nil
if mode == 'release' then
	local rec = redis.call('GET', rk)
	if rec == 'D' then return -2 end
	if not rec then
		if not own then return -3 end
		redis.call('SET', rk, 'D', 'PX', grace > 0 and grace or 1000)
	else
		local deadline, pod, bind = string.match(rec, '^L(%d+)|([^|]*)|(.*)$')
		if not own and (not deadline or bind ~= string.match(claim, '^[^|]*|(.*)$')) then
			return -4
		end
		live, issuer = deadline and now < tonumber(deadline), pod
		redis.call('SET', rk, 'D', 'KEEPTTL')
	end
	adapt_outcome_key(sk, ad, now, outcome)
else
	redis.call('DEL', rk)
end

local held = redis.call('ZREM', lk, lease_id)
if live and not own then held = 1 end
if mode == 'reconcile' then return held end

if mode == 'rollback' then
	redis.call('ZREM', qk, lease_id .. ':1')
	if x1 > 0 and tonumber(redis.call('HGET', sk, 'next_at')) == x1 then
		if x2 > now then
			redis.call('HSET', sk, 'next_at', x2)
		else
			redis.call('HDEL', sk, 'next_at')
		end
	end
elseif held == 1 and paced and min_delay > 0 then
	if ovr > 0 then min_delay = ovr_delay_key(sk, min_delay, ovr, now) end
	local next_at = tonumber(redis.call('HGET', sk, 'next_at')) or 0
	if now + min_delay > next_at then
		redis.call('HSET', sk, 'next_at', now + min_delay)
		local ttl = redis.call('PTTL', sk)
		if ttl < min_delay then redis.call('PEXPIRE', sk, min_delay) end
	end
end

for i = 1, nrules do
	local p, charge = strat_rule_arg(ARGV, 5 + (i - 1) * 5)
	if charge ~= 0 then strat_book_key(KEYS[3 + i], p, now, charge, pen == i) end
end
if held == 1 and not own and issuer and issuer ~= '' then return { held, issuer } end
return held

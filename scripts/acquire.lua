-- admitd acquire: one call per acquire attempt for one (scope, key).
--
-- Checks every limit of the scope that applies to the request and books all
-- of them, or nothing (mirrors daemon/limiter/limiter.c lim_check + lim_book, in the
-- same order, with the same tie rule: the longest wait names the refusal).
-- The clock is Redis TIME, read once.
--
-- KEYS[1] state hash (next_at, penalty_until)   KEYS[2] quota zset (admission instants)
-- KEYS[3] leases zset (lease id -> deadline)     KEYS[4..] one string per rule in
-- ARGV (lib/state.lua: its counters, and its penalty when it holds it)
-- then, when pen is nrules + 1, the key of the scope's rule that holds the
-- key's penalty (a rule this class does not apply)
-- ARGV: lease_ids count cost floor min_delay_ms serialized cluster_concurrency
--       quota quota_window_ms lease_ttl_ms concurrency_retry_ms track_leases nrules
--       (floor: the units of each rule the class may not take, or, when
--       negative, -floor millionths of each rule's own capacity as this call
--       applies it, rounded down: strat_floor_units)
--       then per rule: meter(r|t|c) kind amount window_ms burst code reserve
--       (reserve: token units this admission books up front on a t rule)
--       then pen: where the key's penalty_until is: 0 the state hash (read
--       with next_at), i in 1..nrules rule i's string (read with its counters),
--       nrules + 1 the extra key. Only pacing and penalties live in the state
--       hash, so a scope without min_delay whose penalty is in a rule's string
--       never reads it: a one-rule scope makes the Redis calls of a plain
--       bucket script (TIME, GET, SET with PX)
--       then not_after: a Redis time (ms) after which the caller has given up on
--       this call (it timed out and decided otherwise): book nothing then; 0: none
--       then rec_ttl rec: when rec_ttl > 0 (a release of this lease settles
--       something), each admitted lease gets its settlement record, the
--       string 'L' .. deadline .. '|' .. rec (deadline: the Redis time its
--       lease_ttl ends; rec: "POD|BODY|RULE=N,...", the pod that issued it,
--       its handle's body and the tokens its reservation charged each rule),
--       under the last KEYS entry followed by the lease id, for rec_ttl ms: a
--       release settles only a lease that has one, exactly once, and through
--       another daemon only when it names all of rec (release.lua)
--       then, in an adaptive scope (rec_ttl 0 and rec '' when there is no
--       record), ceil floor factor step interval_ms (adaptive.lua's
--       adapt_arg): the requests rules are scaled by the key's learned
--       amount, read from its adaptive hash beside KEYS[1]
--       then, in a scope that takes overrides (the adaptive params as five
--       zeros when it is not adaptive), ovr: its override_max times 1000
--       (override.lua): the key's override, read from the same hash in the
--       same call, sets min_delay and rule amounts, within what ovr allows
-- lease_ids: `count` lease ids, comma-separated, of the first `count`
-- waiters of the key (FIFO); each admitted one is booked under its own id.
-- Returns {admitted (how many of the first count: 0..count), retry_after_ms,
-- code, now_ms, next_at_booked, next_at_before}: retry_after_ms and code are
-- the refusal of the first waiter not admitted (0, -1 when all were); code
-- names the deciding limit: -1 none, -2 penalty,
-- -3 min_delay, -4 cluster_concurrency, -5 quota, >= 0 the rule's index in
-- the scope, -6 stale (ran after not_after), -7 min_delay while a lease of
-- a serialized scope is held (a wait for a slot). next_at_booked is the next_at
-- this admission set (0: it set none) and next_at_before what it replaced,
-- so that a rollback can put the pacing back exactly. A seventh number is
-- the learned amount the check used (milli-units; 0 outside adaptive scopes).
-- Then what is left after the decision: leases in the set, quota instants in
-- the window, the newest of them (0: none), and per rule its counter a, b, t.
-- Then, when ovr is given, the key's override: its end (0: none in force),
-- its min_delay (-1: none) and per rule its amount (0: none), as stored.
--
-- That is the general form, one acquire of any plan. The '=' form (at the
-- end) carries several acquires in one call, and a plain plan's acquire,
-- alone or not, in fewer arguments.

-- This call's Redis time (ms), set by the part after the
-- per-call line below. What precedes that line is defined once, where the
-- function library is loaded (gen_scripts.sh), not at every call.
local now = 0

-- tonumber of an argument that repeats from call to call (a conf's params, a
-- cost, a count). Lua's tonumber is strtod, which costs more than a bucket's
-- arithmetic; where the function library keeps this between calls, the few
-- strings a conf makes are looked up instead (a memo of at most 256, cleared
-- when full). Under EVALSHA the memo lasts one call. What changes at every
-- call (Redis's replies, not_after, TIME's microseconds) goes to tonumber.
local num_memo, num_memo_n = {}, 0
local function num(s)
	local v = num_memo[s]
	if v == nil and s ~= nil then
		v = tonumber(s)
		if v ~= nil then
			if num_memo_n >= 256 then num_memo, num_memo_n = {}, 0 end
			num_memo[s], num_memo_n = v, num_memo_n + 1
		end
	end
	return v
end

-- A TTL (an integer, ms) as an argument of a Redis call: Redis would
-- otherwise format the number as %.14g, and string.format costs more than a
-- plain bucket's arithmetic. A conf's rules make few TTLs: they are kept as
-- the memo of num above is (at most 256).
local ttl_memo, ttl_memo_n = {}, 0
local function ttl_arg(x)
	local s = ttl_memo[x]
	if s == nil then
		s = string.format('%d', x)
		if ttl_memo_n >= 256 then ttl_memo, ttl_memo_n = {}, 0 end
		ttl_memo[x], ttl_memo_n = s, ttl_memo_n + 1
	end
	return s
end

-- The plainest plan: one requests rule whose string holds the penalty, and
-- nothing else (no pacing, quota, lease set, settlement record, adaptive
-- amount or override), one admission at a time. The same decision as
-- acquire_one's general path below, which it must match, made as a plain
-- bucket script makes it: the rule's params are numbers, not a table, and a
-- bucket's arithmetic is strat_bucket_try's. Writes what the reply says of it
-- into out[o + 1 .. o + 6]: admitted (0 or 1), retry_after_ms, code (as
-- acquire_one's), then the rule's counter a, b, t after the decision.
--
-- Booking ahead (a token or leaky bucket only, extra and give not nil; the
-- 'a' group): first `give` units booked ahead before and never handed out
-- come back (the bucket's level drops by them, never below empty), whatever
-- is decided; then, once the acquire's own cost is admitted, up to `extra`
-- more units are booked for the daemon to hand out itself, as many as the
-- bucket holds above the class's floor. out[o + 7] is how many it booked.
--
-- qkey (the 'f' group): a fair key's tickets (fair_call); while any wait,
-- the acquire is refused (code -9: it takes a ticket instead) and books
-- nothing, but what it gives back still comes back.
local function acquire_plain(out, o, key, kind, amount, window_ms, burst, floor, code,
			     not_after, cost, extra, give, qkey)
	if extra then out[o + 7] = 0 end
	if not_after > 0 and now > not_after then
		out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6] = 0, 0, -6, 0, 0, 0
		return
	end
	-- state_read and state_write (lib/state.lua) written out for the
	-- common case, a string without a penalty: a call costs more here
	local v = redis.pcall('GET', key)
	local a, b, t, penalty_until
	if v and #v == 24 then
		a, b, t = struct.unpack(STATE_ABT, v)
		penalty_until = 0
	else
		a, b, t, penalty_until = state_decode(key, v)
	end
	local ok, na, nb, nt, ttl, w, ops, np, st
	local gave = give and give > 0 and a > 0
	if gave then -- units come back: the level at t drops
		a = a - give * 1000
		if a < 0 then a = 0 end
	end
	if qkey and redis.call('EXISTS', qkey) == 1 then -- a fair key's waiters go first
		if gave then state_write(key, a, b, t, penalty_until, nil) end
		out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6] = 0, 1, -9, a, b, t
		return
	end
	if kind == 'token-bucket' or kind == 'leaky-bucket' then
		ok, na, nb, nt, ttl = strat_bucket_try(a, b, t, amount, window_ms, burst, now, cost, floor)
		if ok and extra and extra > 0 and now >= penalty_until then
			local room = (burst == 0 and amount or burst) - floor -- units, as strat_bucket_try's
			local more = math.floor((room * 1000 - na) / 1000)
			if more > extra then more = extra end
			if more > 0 then na, out[o + 7] = na + more * 1000, more end
		end
	end
	if not ok then -- another kind, or a bucket's wait: the general arithmetic
		ops, np = strat_prep({ kind = kind, amount = amount, window_ms = window_ms, burst = burst })
		st = { a = a, b = b, t = t }
		ok, w = strat_check_prepared(st, ops, np, now, cost, floor)
	end
	local wait, c = 0, -1 -- the longest wait names the refusal (ties: the penalty)
	if now < penalty_until then wait, c = penalty_until - now, -2 end
	if not ok and (c == -1 or w == -1 or w > wait) then wait, c = w, code end
	if c ~= -1 then
		if gave then state_write(key, a, b, t, penalty_until, nil) end -- what came back stays
		out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6] = 0, wait, c, a, b, t
		return
	end
	if st then
		strat_book_prepared(st, ops, np, now, cost)
		na, nb, nt, ttl = st.a, st.b, st.t, strat_ttl_prepared(ops, np)
	end
	-- Booking means no penalty is in force: one that has ended is dropped.
	redis.call('SET', key, struct.pack(STATE_ABT, na, nb, nt), 'PX', ttl_arg(ttl))
	out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6] = 1, 0, -1, na, nb, nt
end

-- One acquire: KEYS and ARGV as described above, now the Redis time.
local function acquire_one(KEYS, ARGV)
	local lease_ids = ARGV[1]
	local count = tonumber(ARGV[2])
	local cost = tonumber(ARGV[3])
	local floor_units, floor_ppm = tonumber(ARGV[4]), 0
	if floor_units < 0 then floor_units, floor_ppm = 0, -floor_units end
	local min_delay = tonumber(ARGV[5])
	local serialized = ARGV[6] == '1'
	local cluster = tonumber(ARGV[7])
	local quota = tonumber(ARGV[8])
	local quota_window = tonumber(ARGV[9])
	local lease_ttl = tonumber(ARGV[10])
	local conc_retry = tonumber(ARGV[11])
	local track = ARGV[12] == '1'
	local nrules = tonumber(ARGV[13])
	local pen = tonumber(ARGV[14 + nrules * 7]) or 0
	local not_after = tonumber(ARGV[15 + nrules * 7]) or 0
	local rec_ttl = tonumber(ARGV[16 + nrules * 7]) or 0
	local rec = ARGV[17 + nrules * 7] or ''
	local ad = adapt_arg(ARGV, 17 + nrules * 7)
	local ovr = tonumber(ARGV[23 + nrules * 7]) or 0
	local ad_amt, ov_until, ov_delay, ov = 0, 0, -1, nil
	if ad or ovr > 0 then -- one read of the key's adaptive hash for both
		local f = { 'amt' }
		if ovr > 0 then
			f[2], f[3] = 'ou', 'od'
			for i = 1, nrules do f[3 + i] = ovr_field(ARGV[19 + (i - 1) * 7]) end
		end
		local h = redis.call('HMGET', adapt_key(KEYS[1]), unpack(f))
		if ad then ad_amt = adapt_amount({ amt = tonumber(h[1]) or 0 }, ad) end
		if ovr > 0 and (tonumber(h[2]) or 0) > now then
			ov_until, ov_delay, ov = tonumber(h[2]), tonumber(h[3]) or -1, {}
			for i = 1, nrules do ov[i] = tonumber(h[3 + i]) or 0 end
		end
	end

	-- A call that Redis runs late (it was frozen, or the reply could not make the
	-- caller's timeout) must not book a lease nobody will release.
	if not_after > 0 and now > not_after then
		return { 0, 0, -6, now }
	end

	local sk, qk, lk = KEYS[1], KEYS[2], KEYS[3]

	-- Drop expired leases and quota instants out of the window (lim_purge).
	-- A scope that keeps no lease set (no cluster_concurrency, concurrency
	-- rule or serialized min_delay) never has one: it costs no call.
	if track then
		redis.call('ZREMRANGEBYSCORE', lk, '-inf', now)
	end
	if quota > 0 then
		redis.call('ZREMRANGEBYSCORE', qk, '-inf', now - quota_window)
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

	local next_at, penalty_until = 0, 0
	if pen == 0 or min_delay > 0 then
		local st = redis.call('HMGET', sk, 'next_at', 'penalty_until')
		next_at = tonumber(st[1]) or 0
		if pen == 0 then penalty_until = tonumber(st[2]) or 0 end
	end
	if ov then min_delay = ovr_delay(min_delay, ov_delay, ovr) end
	if pen == nrules + 1 then penalty_until = state_pen_get(KEYS[4 + nrules]) end
	local nleases = 0
	if track then nleases = redis.call('ZCARD', lk) end
	local nquota = 0
	if quota > 0 then nquota = redis.call('ZCARD', qk) end

	local rules = {}
	for i = 1, nrules do
		local b = 13 + (i - 1) * 7
		local r = {
			meter = ARGV[b + 1],
			amount = tonumber(ARGV[b + 3]),
			code = tonumber(ARGV[b + 6]),
			reserve = tonumber(ARGV[b + 7]) or 0,
			key = KEYS[3 + i],
		}
		local burst = tonumber(ARGV[b + 5])
		if ov and ov[i] > 0 then
			local a = ovr_amount(r.amount, ov[i], ovr)
			burst = ovr_burst(burst, a, r.amount)
			r.amount = a
		end
		if r.meter ~= 'c' then
			local amount = r.amount
			if ad and r.meter == 'r' then
				amount, burst = adapt_scale(amount, ad_amt, ad.ceil), adapt_scale(burst, ad_amt, ad.ceil)
			end
			r.ops, r.np = strat_prep({ kind = ARGV[b + 2], amount = amount,
				window_ms = tonumber(ARGV[b + 4]), burst = burst })
			r.floor = strat_floor_prepared(r.np, floor_units, floor_ppm)
			local a, b, t, p = state_read(r.key)
			if pen == i then penalty_until = p end
			r.st, r.p = { a = a, b = b, t = t }, p
		end
		rules[i] = r
	end

	-- Would n admissions at once pass every limit? Returns admitted, wait, code.
	-- (refuse keeps the decision in chunk locals: no closure is made per check.)
	local c_admitted, c_wait, c_code
	local function refuse(w, c)
		if c_admitted or (c_wait ~= -1 and (w == -1 or w > c_wait)) then
			c_admitted, c_wait, c_code = false, w, c
		end
	end
	local function check(n)
		c_admitted, c_wait, c_code = true, 0, -1
		if now < penalty_until then refuse(penalty_until - now, -2) end
		if serialized and nleases > 0 then refuse(lease_wait(nleases), -7) end
		if now < next_at then refuse(next_at - now, -3) end
		if min_delay > 0 and n > 1 then refuse(min_delay, -3) end -- paced: one at a time
		if cluster > 0 and nleases + n > cluster then
			if n > cluster then refuse(-1, -4) else refuse(lease_wait(nleases), -4) end
		end
		if quota > 0 then
			if n > quota then
				refuse(-1, -5)
			elseif nquota + n > quota then
				local k = nquota + n - quota - 1
				local at = redis.call('ZRANGE', qk, k, k, 'WITHSCORES')
				refuse(tonumber(at[2]) + quota_window - now, -5)
			end
		end
		for i = 1, nrules do
			local r = rules[i]
			if r.meter == 'c' then
				if nleases + n > r.amount then
					if n > r.amount then refuse(-1, r.code) else refuse(lease_wait(nleases), r.code) end
				end
			else
				local c = r.reserve * n
				if r.meter == 'r' then c = cost * n end
				local ok, w = strat_check_prepared(r.st, r.ops, r.np, now, c, r.floor)
				if not ok then refuse(w, r.code) end
			end
		end
		return c_admitted, c_wait, c_code
	end

	-- The first `count` waiters of the key, in FIFO order: admit as many as every
	-- limit allows (more admissions never pass where fewer fail); the refusal of
	-- the next one is checked once they are booked, as if it came alone.
	local ids
	if count == 1 then
		ids = { lease_ids }
	else
		ids = {}
		for id in string.gmatch(lease_ids, '[^,]+') do ids[#ids + 1] = id end
	end
	if #ids < count then count = #ids end
	local asked = count
	local admitted, wait, code = check(count)
	if not admitted and count > 1 then
		local lo, hi = 0, count - 1
		while lo < hi do
			local mid = math.floor((lo + hi + 1) / 2)
			if check(mid) then lo = mid else hi = mid - 1 end
		end
		count = lo
		if count == 0 then admitted, wait, code = check(1) end
	elseif not admitted then
		count = 0
	end
	-- What is left after this decision, for the reply's remaining and reset_ms:
	-- the lease set's and quota's counts, the newest quota instant, then each
	-- rule's counter (a, b, t; zeros for a concurrency rule).
	local function left(out, n_admitted)
		local newest = 0
		if quota > 0 and n_admitted > 0 then
			newest = now
		elseif quota > 0 and nquota > 0 then
			newest = tonumber(redis.call('ZRANGE', qk, -1, -1, 'WITHSCORES')[2]) or 0
		end
		out[8], out[9], out[10] = nleases, nquota, newest
		local k = 11
		for i = 1, nrules do
			local st = rules[i].st
			if st then
				out[k], out[k + 1], out[k + 2] = st.a, st.b, st.t
			else
				out[k], out[k + 1], out[k + 2] = 0, 0, 0
			end
			k = k + 3
		end
		if ovr > 0 then
			out[k], out[k + 1] = ov_until, ov_delay
			for i = 1, nrules do out[k + 1 + i] = ov and ov[i] or 0 end
		end
		return out
	end

	if count == 0 then
		return left({ 0, wait, code, now, 0, 0, ad_amt }, 0)
	end

	-- Book everything (lim_book). Every key gets a TTL bounded by what it holds.
	if quota > 0 then
		for k = 1, count do
			redis.call('ZADD', qk, now, ids[k] .. ':1')
		end
		redis.call('PEXPIRE', qk, quota_window)
	end
	if track then
		for k = 1, count do
			redis.call('ZADD', lk, now + lease_ttl, ids[k])
		end
		redis.call('PEXPIRE', lk, lease_ttl)
	end
	if rec_ttl > 0 then
		local rkp = KEYS[#KEYS]
		for k = 1, count do
			redis.call('SET', rkp .. ids[k], 'L' .. (now + lease_ttl) .. '|' .. rec, 'PX', rec_ttl)
		end
	end
	-- Sends spaced by min_delay under a cap above 1; serialized and a cap of
	-- 1 pace from each release instead (release.lua).
	local next_before, next_booked = next_at, 0
	if cluster > 1 and min_delay > 0 and now + min_delay > next_at then
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
			strat_book_prepared(r.st, r.ops, r.np, now, n)
			-- Booking means no penalty is in force: this TTL cannot cut one
			-- short, and one that has ended is dropped.
			local p = r.p
			if p <= now then p = 0 end
			state_write(r.key, r.st.a, r.st.b, r.st.t, p, strat_ttl_prepared(r.ops, r.np))
		end
	end
	if track then nleases = nleases + count end
	if quota > 0 then nquota = nquota + count end
	if count < asked then
		admitted, wait, code = check(1)
		if admitted then wait, code = 0, -1 end -- cannot be: count was the most
	else
		wait, code = 0, -1
	end
	return left({ count, wait, code, now, next_booked, next_before, ad_amt }, count)
end

-- ---- One order across the fleet (a scope with fair = yes) ----
--
-- The waiters of a contended (key, class), on every pod, hold tickets in one
-- sorted set under the key's hash tag: KEYS[1] the tickets (score: the
-- ticket's start tag; member 'SEQ|POD|WID|FLOW|WEIGHT', SEQ twelve digits
-- of the class's arrival counter, so equal tags go in arrival order),
-- KEYS[2] the class's tags (v: its virtual time; seq: the counter; f:FLOW:
-- a flow's last finish tag), KEYS[3] the key's pods (pod -> the Redis time
-- its tickets lapse unless it asks again). Start-time fair queuing: a
-- ticket's start tag is max(v, its flow's last finish tag), its finish tag
-- the start plus cost * 1000 / weight; tickets go in start-tag order and v
-- moves to the tag of each ticket admitted. When the last ticket leaves,
-- the tags go (no credit is banked while idle).
--
-- Only the pod whose ticket is first takes it: a call admits the tickets at
-- the front that are this pod's and listed in the call, in order, as far as
-- the limits allow (acquire_one); a first ticket of a pod that has not
-- asked for FAIR_TTL is dropped (the pod is gone), and so is a first ticket
-- of this pod that it does not list (its waiter left).
local FAIR_SCALE = 1000

local function fair_parse(m)
	return string.match(m, '^(%d+)|([^|]*)|([^|]*)|([^|]*)|(%d+)$')
end

-- How long until the rate rules of acquire_one's call (k, a) let one more
-- acquire of its cost pass, as they stand (the wait the first ticket has
-- left; the daemon adds a unit's interval per ticket ahead). Pacing,
-- penalties and run-time amounts aside: an estimate of when to ask.
local function fair_first_wait(k, a)
	local nrules, cost = tonumber(a[13]), tonumber(a[3])
	local fu, fppm = tonumber(a[4]), 0
	if fu < 0 then fu, fppm = 0, -fu end
	local w = 0
	for i = 1, nrules do
		local b = 13 + (i - 1) * 7
		if a[b + 1] == 'r' then
			local ops, np = strat_prep({ kind = a[b + 2], amount = tonumber(a[b + 3]),
				window_ms = tonumber(a[b + 4]), burst = tonumber(a[b + 5]) })
			local sa, sb, stt = state_read(k[3 + i])
			local st = { a = sa, b = sb, t = stt }
			local ok, wi = strat_check_prepared(st, ops, np, now, cost,
							   strat_floor_prepared(np, fu, fppm))
			if not ok and wi > w then w = wi end
		end
	end
	return w
end

-- e's tenant's weight set by an override in force (see fair_call's ovr):
-- e becomes its own flow at that weight. sk: the key's state hash.
local function fair_override(e, ovr, sk)
	local v = redis.call('HGET', adapt_key(sk), 'tw:' .. e.tenant)
	local w, u = string.match(v or '', '^(%d+):(%d+)$')
	w, u = tonumber(w), tonumber(u)
	if not w or not u or u <= now or w < 1 then return end
	local cap = math.floor(ovr * e.weight / 1000)
	if cap > 1000 then cap = 1000 end
	if cap < 1 then cap = 1 end
	if w > cap then w = cap end
	e.flow, e.weight = e.tenant, w
end

-- The call: ARGV 'F' pod ttl_ms n nh ovr, then n times wid member flow
-- weight try tenant (the waiters this pod lists, in its order; member ''
-- when it holds no ticket; flow and weight the conf's: a listed tenant, or
-- '' and 1; tenant its own name), then acquire_one's ARGV for the n of them (their lease ids and
-- count n); KEYS the three above, then the tickets of the nh classes that go
-- before this one (a higher priority, held to every limit this one is:
-- while another pod's ticket waits in one, this class admits nobody; this
-- pod's own tickets there are its own order's), then acquire_one's KEYS.
-- Returns { acquire_one's reply (admitted m of the n listed; the next one's
-- wait and code; code -9 when tickets of other pods are ahead of it, and the
-- wait then the first ticket's, fair_first_wait), ahead (the
-- tickets ahead of the first listed waiter not admitted), the tickets left
-- (after a stale run: 1, unknown), the tickets it dropped (of pods gone, or
-- this pod's that it no longer lists), then per listed
-- waiter its member and start tag ('' '' when it holds none: admitted, a
-- try, or refused for good) }.
-- ovr: the scope's override_max times 1000 (0: it takes no override). A
-- tenant whose weight an override sets (field tw:TENANT of the key's
-- adaptive hash, 'W:UNTIL', UNTIL a Redis time) is tagged as its own flow
-- at that weight while it holds, within ovr times its conf weight and 1000.
local function fair_call(KEYS, ARGV)
	local fq, fs, fp = KEYS[1], KEYS[2], KEYS[3]
	local pod, ttl, n, nh = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
	local ovr = tonumber(ARGV[6]) or 0
	local L, at = {}, {}
	for i = 1, n do
		local b = 6 + (i - 1) * 6
		L[i] = { wid = ARGV[b + 1], member = ARGV[b + 2], flow = ARGV[b + 3],
			 weight = tonumber(ARGV[b + 4]), try = ARGV[b + 5] == '1',
			 tenant = ARGV[b + 6] }
		at[L[i].wid] = i
	end
	local k, a = {}, {}
	for j = 4 + nh, #KEYS do k[#k + 1] = KEYS[j] end
	for j = 7 + n * 6, #ARGV do a[#a + 1] = ARGV[j] end
	local cost = tonumber(a[3])
	local ids = {}
	for id in string.gmatch(a[1], '[^,]+') do ids[#ids + 1] = id end

	-- Reap: first tickets of pods gone, and this pod's own that it no
	-- longer lists (bounded per call; the rest at the next). Nobody
	-- waiting costs one read.
	local front = redis.call('ZRANGE', fq, 0, n + 63, 'WITHSCORES')
	local f, reaped, held = 1, 0, 0
	if #front > 0 or nh > 0 then redis.call('ZREMRANGEBYSCORE', fp, '-inf', now) end
	for h = 1, nh do -- the classes before this one: another pod's ticket waits?
		local hk = KEYS[3 + h]
		local hf = redis.call('ZRANGE', hk, 0, 63)
		for j = 1, #hf do
			local _, p = fair_parse(hf[j])
			if p == nil or redis.call('ZSCORE', fp, p) == false then
				redis.call('ZREM', hk, hf[j])
				reaped = reaped + 1
			elseif p ~= pod then
				held = held + #hf - j + 1
				break
			end
		end
	end
	while f < #front and reaped < 64 do
		local _, p, wid = fair_parse(front[f])
		local gone
		if p == pod then
			gone = at[wid] == nil
		else
			gone = p == nil or redis.call('ZSCORE', fp, p) == false
		end
		if not gone then break end
		redis.call('ZREM', fq, front[f])
		f, reaped = f + 2, reaped + 1
	end
	local contended = f < #front or held > 0

	-- Who may be admitted now: nobody waits, the listed in order; else
	-- this pod's tickets at the front, as far as they are listed in order.
	local c, mine = 0, {}
	if not contended then
		c = n
	elseif held == 0 then
		local g = f
		while g < #front and c < n do
			local _, p, wid = fair_parse(front[g])
			if p ~= pod or at[wid] ~= c + 1 then break end
			c, g = c + 1, g + 2
			mine[c] = { front[g - 2], front[g - 1] }
		end
	end
	local r, m
	if c > 0 then
		a[1], a[2] = table.concat(ids, ',', 1, c), tostring(c)
		r = acquire_one(k, a)
		m = r[1]
		if r[3] == -6 then return { r, 0, 1, reaped } end -- stale: nothing booked
		if m == c and m < n then r[2], r[3] = fair_first_wait(k, a), -9 end -- behind others
		if m == n and not contended and reaped == 0 then return { r, 0, 0, 0 } end
	else
		r, m = { 0, fair_first_wait(k, a), -9, now, 0, 0, 0 }, 0
	end

	-- The admitted leave the queue; v moves to the last one's tag.
	local v = nil
	for i = 1, m do
		if mine[i] then
			v = mine[i][2]
			redis.call('ZREM', fq, mine[i][1])
		end
	end
	-- The others that wait hold a ticket: new ones (or ones Redis lost) are
	-- tagged now, in the order listed.
	local st, out = nil, { r, 0, 0, reaped }
	local left = redis.call('ZCARD', fq)
	for i = m + 1, n do
		local e, s = L[i], false
		if e.member ~= '' then s = redis.call('ZSCORE', fq, e.member) end
		if not s and not e.try then
			if st == nil then
				local h = redis.call('HMGET', fs, 'v', 'seq')
				st = { v = tonumber(v or h[1]) or 0, seq = tonumber(h[2]) or 0 }
			end
			if ovr > 0 and e.tenant ~= '' then fair_override(e, ovr, k[1]) end
			local fl = tonumber(redis.call('HGET', fs, 'f:' .. e.flow)) or 0
			s = st.v
			if fl > s then s = fl end
			st.seq = st.seq + 1
			e.member = string.format('%012d', st.seq) .. '|' .. pod .. '|' .. e.wid .. '|' ..
				   e.flow .. '|' .. e.weight
			redis.call('ZADD', fq, s, e.member)
			redis.call('HSET', fs, 'f:' .. e.flow, s + cost * FAIR_SCALE / e.weight,
				   'seq', st.seq)
			left = left + 1
		elseif not s then
			e.member = ''
		end
		e.s = s
	end
	out[3] = left
	if left == 0 then
		redis.call('DEL', fs)
	else
		if v then redis.call('HSET', fs, 'v', v) end
		redis.call('ZADD', fp, now + ttl, pod)
		redis.call('PEXPIRE', fq, ttl * 4)
		redis.call('PEXPIRE', fs, ttl * 4)
		redis.call('PEXPIRE', fp, ttl * 4)
	end
	for i = 1, n do
		local e = L[i]
		if i <= m or not e.s then
			out[#out + 1], out[#out + 2] = '', ''
		else
			out[#out + 1], out[#out + 2] = e.member, tostring(e.s)
		end
	end
	if m < n and L[m + 1].member ~= '' then
		out[2] = held + (redis.call('ZRANK', fq, L[m + 1].member) or 0)
	elseif m < n then
		out[2] = held + left
	end
	return out
end

-- A waiter left unserved: ARGV 'FL' member cost; KEYS[1..2] as above. Its
-- ticket goes, and when it was its flow's last, the flow's charge for it.
local function fair_leave(KEYS, ARGV)
	local fq, fs, mb = KEYS[1], KEYS[2], ARGV[2]
	local s = redis.call('ZSCORE', fq, mb)
	if not s then return 0 end
	redis.call('ZREM', fq, mb)
	if redis.call('ZCARD', fq) == 0 then
		redis.call('DEL', fs)
		return 1
	end
	local _, _, _, flow, weight = fair_parse(mb)
	local fk = 'f:' .. (flow or '')
	local fl = tonumber(redis.call('HGET', fs, fk))
	local fin = tonumber(s) + tonumber(ARGV[3]) * FAIR_SCALE / (tonumber(weight) or 1)
	if fl and math.abs(fl - fin) < 1e-6 then redis.call('HSET', fs, fk, s) end
	return 1
end

-- admitd: per call
if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
now = num(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) -- the seconds repeat

-- A batch of independent acquires of different keys (one call instead of
-- n), each decided alone, as if it were its own call, at the same instant:
-- ARGV is '=', the number of groups, then the groups in order, each one of
--   'p' kind amount window_ms burst floor code not_after n cost_1 .. cost_n
--       n plain acquires (acquire_plain) of one rule's params; KEYS: their
--       n rule strings
--   'a' kind amount window_ms burst floor code not_after n, then n times
--       cost extra give: the same, each booking up to extra units ahead and
--       taking give back (acquire_plain)
--   'f' the same as 'a', for a fair key: KEYS two per acquire, its rule
--       string and its tickets (refused while tickets wait)
--   'g' nk na ARGV_1 .. ARGV_na
--       one acquire of any plan; KEYS: its nk KEYS
-- and KEYS are every group's KEYS in order. The reply is flat: the Redis
-- time (ms), then per group in order, for 'p' six numbers per acquire
-- (acquire_plain's), for 'a' seven (the seventh: the units booked ahead),
-- for 'g' acquire_one's reply (a table).
-- A lone plain acquire is this form too, with one group of one.
if ARGV[1] == 'F' then return fair_call(KEYS, ARGV) end
if ARGV[1] == 'FL' then return fair_leave(KEYS, ARGV) end
if ARGV[1] ~= '=' then return acquire_one(KEYS, ARGV) end
local ng, out, kb, ab, o = num(ARGV[2]), { now }, 0, 2, 1
for _ = 1, ng do
	local g = ARGV[ab + 1]
	if g == 'p' or g == 'a' or g == 'f' then
		local kind, amount, window_ms, burst = ARGV[ab + 2], num(ARGV[ab + 3]),
		    num(ARGV[ab + 4]), num(ARGV[ab + 5])
		local floor, code, not_after, n = num(ARGV[ab + 6]), num(ARGV[ab + 7]),
		    tonumber(ARGV[ab + 8]), num(ARGV[ab + 9])
		ab = ab + 9
		if g == 'p' then
			for i = 1, n do
				acquire_plain(out, o, KEYS[kb + i], kind, amount, window_ms, burst,
					      floor, code, not_after, num(ARGV[ab + i]))
				o = o + 6
			end
			ab = ab + n
		elseif g == 'a' then
			for i = 1, n do
				acquire_plain(out, o, KEYS[kb + i], kind, amount, window_ms, burst,
					      floor, code, not_after, num(ARGV[ab + 1]),
					      num(ARGV[ab + 2]), num(ARGV[ab + 3]))
				o, ab = o + 7, ab + 3
			end
		else
			for i = 1, n do
				acquire_plain(out, o, KEYS[kb + 2 * i - 1], kind, amount, window_ms, burst,
					      floor, code, not_after, num(ARGV[ab + 1]),
					      num(ARGV[ab + 2]), num(ARGV[ab + 3]), KEYS[kb + 2 * i])
				o, ab = o + 7, ab + 3
			end
			kb = kb + n
		end
		kb = kb + n
	else
		local nk, na = num(ARGV[ab + 2]), num(ARGV[ab + 3])
		local k, a = {}, {}
		ab = ab + 3
		for j = 1, nk do k[j] = KEYS[kb + j] end
		for j = 1, na do a[j] = ARGV[ab + j] end
		o = o + 1
		out[o] = acquire_one(k, a)
		kb, ab = kb + nk, ab + na
	end
end
return out

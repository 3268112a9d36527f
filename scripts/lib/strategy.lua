-- scripts/lib/strategy.lua - the five rate strategies as pure functions, in
-- Lua for Redis: a line-for-line mirror of daemon/strategy/*.c (same names,
-- same state layout, same results; tests/vectors/strategy/*.jsonl is the
-- contract both are tested against).
--
-- Prepended by daemon/store/gen_scripts.sh to every top-level script, and Redis
-- forbids globals in scripts, so everything here is local. The API:
--   strat_check(st, p, now, cost, floor) -> allowed (boolean), retry_after_ms
--   strat_book(st, p, now, amount)       mutates st
--   strat_ttl_ms(p)                      -> ms after which st is as good as fresh
--   strat_floor_units(p, floor, ppm)     -> the units a class's floor leaves
-- st = {a=, b=, t=} (numbers; all zero is a fresh counter); p = {kind=
-- "token-bucket"|"sliding-window"|"fixed-window"|"leaky-bucket"|
-- "session-window", amount=, window_ms=, burst=} (burst 0 = amount).
--
-- Lua 5.1 numbers are doubles: every value below stays an integer under
-- 2^53 (see strategy.h), where doubles are exact and strat_idiv equals C's
-- integer division.

local STRAT_MAX_AMOUNT = 1000000000
local STRAT_MAX_WINDOW_MS = 86400000
local STRAT_UNITS_MAX = 1099511627776 -- 2^40, as in strategy_impl.h
local STRAT_WAIT_MAX_MS = 1000000000000000
local STRAT_FLOOR_WHOLE = 1000000 -- a floor's part of a capacity, in millionths

-- ---- exact integer helpers (strategy.c) ----

-- C's x / y for integers 0 <= x < 2^53, y >= 1. math.floor of the double
-- quotient is exact there: a non-integer x/y is at least 1/y from the next
-- integer, and the rounding error is below x/y * 2^-53 < 1/y.
local function strat_idiv(x, y)
	return math.floor(x / y)
end

local function strat_clamp(x, lo, hi)
	if x < lo then
		return lo
	elseif x > hi then
		return hi
	end
	return x
end

local function strat_now(st, now_ms)
	if now_ms < st.t then
		return st.t
	end
	return now_ms
end

-- floor((x * y + add) / w) and the remainder, exact although x * y may pass
-- 2^53: x*y/w = qx*y + rx*qy + rx*ry/w, and rx*ry < w*w < 2^53.
local function strat_muldiv(x, y, add, w)
	local qx = strat_idiv(x, w)
	local rx = x - qx * w
	local qy = strat_idiv(y, w)
	local ry = y - qy * w
	local n = rx * ry + add
	local qn = strat_idiv(n, w)
	return qx * y + rx * qy + qn, n - qn * w
end

-- ---- the bucket both bucket kinds are (leaky_bucket.c) ----
-- a = level in milli-units, rounded up; b = drain below one milli-unit
-- already accrued, in 1/window_ms milli-units; t = last booking.

local function strat_bucket_level(st, p, now_ms)
	local rate = p.amount * 1000
	local elapsed = strat_now(st, now_ms) - st.t
	if st.a <= 0 or strat_idiv(elapsed, p.window_ms) > strat_idiv(st.a, rate) then
		return 0, 0
	end
	local drained, pending = strat_muldiv(elapsed, rate, st.b, p.window_ms)
	if drained >= st.a then
		return 0, 0
	end
	return st.a - drained, pending
end

local function strat_bucket_fits(pr, now_ms)
	local level = strat_bucket_level(pr.st, pr.p, now_ms)
	return level + pr.need <= pr.room
end

local function strat_bucket_book(st, p, now_ms, units)
	local top = (p.burst + p.amount) * 1000
	local level, pending = strat_bucket_level(st, p, now_ms)
	level = level + units
	if level <= 0 or level > top then
		level = strat_clamp(level, 0, top)
		pending = 0
	end
	st.t = strat_now(st, now_ms)
	st.a = level
	st.b = pending
end

local function strat_bucket_ttl(p)
	local windows = strat_idiv(p.burst, p.amount) + 2
	if windows > strat_idiv(STRAT_WAIT_MAX_MS, p.window_ms) then
		return STRAT_WAIT_MAX_MS
	end
	return windows * p.window_ms
end

-- ---- fixed-window (fixed_window.c): a = count in the window starting at t ----

local function fw_count(st, p, now_ms)
	local now = strat_now(st, now_ms)
	local start = strat_idiv(now, p.window_ms) * p.window_ms
	if start == st.t then
		return st.a, start
	end
	return 0, start
end

local function fw_fits(pr, now_ms)
	local count = fw_count(pr.st, pr.p, now_ms)
	return count + pr.need <= pr.room
end

local function fw_book(st, p, now_ms, units)
	local count, start = fw_count(st, p, now_ms)
	st.a = strat_clamp(count + units, 0, STRAT_UNITS_MAX)
	st.b = 0
	st.t = start
end

local function fw_ttl(p)
	return p.window_ms
end

-- ---- session-window (session_window.c): a = count, b = 1 once opened, t = opened at ----

local function sess_open(st, p, now_ms)
	return st.b ~= 0 and strat_now(st, now_ms) - st.t < p.window_ms
end

local function sess_fits(pr, now_ms)
	local count = 0
	if sess_open(pr.st, pr.p, now_ms) then
		count = pr.st.a
	end
	return count + pr.need <= pr.room
end

local function sess_book(st, p, now_ms, units)
	if not sess_open(st, p, now_ms) then
		if units <= 0 then
			st.a, st.b, st.t = 0, 0, 0
			return
		end
		st.a = 0
		st.b = 1
		st.t = strat_now(st, now_ms)
	end
	st.a = strat_clamp(st.a + units, 0, STRAT_UNITS_MAX)
end

local function sess_ttl(p)
	return p.window_ms
end

-- ---- sliding-window (sliding_window.c): a = current window from t, b = previous ----

-- returns the count (weighted part rounded up), start, cur, prev
local function slide_count(st, p, now_ms)
	local w = p.window_ms
	local now = strat_now(st, now_ms)
	local start = strat_idiv(now, w) * w
	local cur, prev = st.a, st.b
	if start ~= st.t then
		prev = 0
		if start - st.t == w then
			prev = st.a
		end
		cur = 0
	end
	local weighted, rem = strat_muldiv(prev, w - (now - start), 0, w)
	if rem > 0 then
		weighted = weighted + 1
	end
	return cur + weighted, start, cur, prev
end

local function slide_fits(pr, now_ms)
	local count = slide_count(pr.st, pr.p, now_ms)
	return count + pr.need <= pr.room
end

local function slide_book(st, p, now_ms, units)
	local _, start, cur, prev = slide_count(st, p, now_ms)
	st.a = strat_clamp(cur + units, 0, STRAT_UNITS_MAX)
	st.b = prev
	st.t = start
end

local function slide_ttl(p)
	return 2 * p.window_ms
end

-- ---- dispatch (strategy.c) ----

local strat_table = {
	["token-bucket"] = { unit = 1000, has_burst = true, fits = strat_bucket_fits,
		book = strat_bucket_book, ttl = strat_bucket_ttl },
	["sliding-window"] = { unit = 1, has_burst = false, fits = slide_fits,
		book = slide_book, ttl = slide_ttl },
	["fixed-window"] = { unit = 1, has_burst = false, fits = fw_fits,
		book = fw_book, ttl = fw_ttl },
	["leaky-bucket"] = { unit = 1000, has_burst = true, fits = strat_bucket_fits,
		book = strat_bucket_book, ttl = strat_bucket_ttl },
	["session-window"] = { unit = 1, has_burst = false, fits = sess_fits,
		book = sess_book, ttl = sess_ttl },
}

local function strat_normalise(ops, p)
	local n = { kind = p.kind }
	n.amount = strat_clamp(p.amount, 1, STRAT_MAX_AMOUNT)
	n.window_ms = strat_clamp(p.window_ms, 1, STRAT_MAX_WINDOW_MS)
	n.burst = strat_clamp(p.burst or 0, 0, STRAT_MAX_AMOUNT)
	if not ops.has_burst or n.burst == 0 then
		n.burst = n.amount
	end
	return n
end

-- the smallest wait after which pr fits, given it does not fit at now_ms
local function strat_retry(ops, pr, now_ms)
	local lo = strat_now(pr.st, now_ms)
	local hi = lo + ops.ttl(pr.p)
	if not ops.fits(pr, hi) then
		return hi - now_ms
	end
	while hi - lo > 1 do
		local mid = lo + strat_idiv(hi - lo, 2)
		if ops.fits(pr, mid) then
			hi = mid
		else
			lo = mid
		end
	end
	return hi - now_ms
end

-- strat_prep(p) -> ops, np: a rule's strategy and its normalised params,
-- worked out once per call and passed to the *_prepared functions below
-- (nil when the kind is unknown).
local function strat_prep(p)
	local ops = strat_table[p.kind]
	if ops == nil then
		return nil, nil
	end
	return ops, strat_normalise(ops, p)
end

local function strat_check_prepared(st, ops, np, now_ms, cost, floor_units)
	if ops == nil then
		return false, -1
	end
	cost = strat_clamp(cost, 0, STRAT_UNITS_MAX)
	floor_units = strat_clamp(floor_units, 0, STRAT_UNITS_MAX)
	local pr = { st = st, p = np }
	if cost == 0 then
		pr.need = 1
	else
		pr.need = cost * ops.unit
	end
	pr.room = (np.burst - floor_units) * ops.unit
	if pr.need > pr.room then
		return false, -1
	end
	if ops.fits(pr, now_ms) then
		return true, 0
	end
	return false, strat_retry(ops, pr, now_ms)
end

local function strat_book_prepared(st, ops, np, now_ms, amount)
	if ops == nil then
		return
	end
	amount = strat_clamp(amount, -STRAT_UNITS_MAX, STRAT_UNITS_MAX)
	ops.book(st, np, now_ms, amount * ops.unit)
end

local function strat_ttl_prepared(ops, np)
	if ops == nil then
		return 0
	end
	return ops.ttl(np)
end

-- The units a floor leaves of a rule whose normalised params are np: with
-- floor_ppm > 0, that many millionths of its capacity, rounded down (the
-- product is below 10^15 < 2^53: exact); else floor_units.
local function strat_floor_prepared(np, floor_units, floor_ppm)
	if floor_ppm <= 0 or np == nil then
		return floor_units
	end
	return strat_idiv(np.burst * strat_clamp(floor_ppm, 0, STRAT_FLOOR_WHOLE), STRAT_FLOOR_WHOLE)
end

local function strat_floor_units(p, floor_units, floor_ppm)
	local _, np = strat_prep(p)
	return strat_floor_prepared(np, floor_units, floor_ppm)
end

local function strat_check(st, p, now_ms, cost, floor_units)
	local ops, np = strat_prep(p)
	return strat_check_prepared(st, ops, np, now_ms, cost, floor_units)
end

local function strat_book(st, p, now_ms, amount)
	local ops, np = strat_prep(p)
	strat_book_prepared(st, ops, np, now_ms, amount)
end

local function strat_ttl_ms(p)
	local ops, np = strat_prep(p)
	return strat_ttl_prepared(ops, np)
end

-- A token or leaky bucket's check and booking of cost at now_ms, in numbers
-- and no tables: the state (a, b, t) and params as strat_check_prepared,
-- strat_book_prepared and strat_ttl_prepared take them. Returns fits, then,
-- when it fits, the state after booking (a, b, t) and the TTL. The same
-- arithmetic as theirs (and strategy/leaky_bucket.c's); a refusal's wait is
-- theirs to work out.
local function strat_bucket_try(a, b, t, amount, window_ms, burst, now_ms, cost, floor_units)
	if amount < 1 or amount > STRAT_MAX_AMOUNT or window_ms < 1 or window_ms > STRAT_MAX_WINDOW_MS or
	    burst < 0 or burst > STRAT_MAX_AMOUNT or cost < 0 or cost > STRAT_UNITS_MAX or
	    floor_units < 0 or floor_units > STRAT_UNITS_MAX then -- what strat_normalise clamps
		amount = strat_clamp(amount, 1, STRAT_MAX_AMOUNT)
		window_ms = strat_clamp(window_ms, 1, STRAT_MAX_WINDOW_MS)
		burst = strat_clamp(burst, 0, STRAT_MAX_AMOUNT)
		cost = strat_clamp(cost, 0, STRAT_UNITS_MAX)
		floor_units = strat_clamp(floor_units, 0, STRAT_UNITS_MAX)
	end
	if burst == 0 then burst = amount end
	local need = 1
	if cost ~= 0 then need = cost * 1000 end
	local room = (burst - floor_units) * 1000
	if need > room then return false end
	local rate = amount * 1000 -- strat_bucket_level
	local now = now_ms
	if now < t then now = t end
	local elapsed = now - t
	local level, pending = 0, 0
	-- strat_idiv and strat_muldiv written out, q - q % 1 for math.floor(q)
	-- (the same double: the fraction of a double is exact): a call costs
	-- more than their arithmetic, at every admission.
	if a > 0 then
		local qx, qa = elapsed / window_ms, a / rate
		qx, qa = qx - qx % 1, qa - qa % 1
		if qx <= qa then
			local rx = elapsed - qx * window_ms
			local qy = rate / window_ms
			qy = qy - qy % 1
			local n = rx * (rate - qy * window_ms) + b
			local qn = n / window_ms
			qn = qn - qn % 1
			local drained = qx * rate + rx * qy + qn
			if drained < a then level, pending = a - drained, n - qn * window_ms end
		end
	end
	if level + need > room then return false end
	local top = (burst + amount) * 1000 -- strat_bucket_book
	level = level + cost * 1000
	if level <= 0 or level > top then
		if level < 0 then level = 0 elseif level > top then level = top end
		pending = 0
	end
	local windows, most = burst / amount, STRAT_WAIT_MAX_MS / window_ms -- strat_bucket_ttl
	windows, most = windows - windows % 1 + 2, most - most % 1
	if windows <= most then return true, level, pending, now, windows * window_ms end
	return true, level, pending, now, STRAT_WAIT_MAX_MS
end

-- The rule whose four parameters (kind, amount, window_ms, burst) start at
-- argv[b + 1], and the units to book that follow them at argv[b + 5].
local function strat_rule_arg(argv, b)
	return { kind = argv[b + 1], amount = tonumber(argv[b + 2]),
		 window_ms = tonumber(argv[b + 3]), burst = tonumber(argv[b + 4]) },
		tonumber(argv[b + 5])
end

-- Books units of rule p on its state key at now (state.lua: one string,
-- read and written whole). The key lives for the rule's TTL, or until its
-- penalty ends when keep_penalty and that is later.
local function strat_book_key(key, p, now_ms, units, keep_penalty)
	local a, b, t, pen_until = state_read(key)
	local st = { a = a, b = b, t = t }
	strat_book(st, p, now_ms, units)
	local ttl = strat_ttl_ms(p)
	local pen = pen_until - now_ms
	if pen <= 0 then pen_until = 0 end -- one that has ended is dropped
	if keep_penalty and pen > ttl then ttl = pen end
	state_write(key, st.a, st.b, st.t, pen_until, ttl)
end

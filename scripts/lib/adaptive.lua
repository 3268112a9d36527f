-- scripts/lib/adaptive.lua - a key's adaptive amount (AIMD from upstream
-- outcomes), in Lua for Redis: a line-for-line mirror of
-- daemon/strategy/adaptive.c (same names, same state, same results;
-- tests/vectors/adaptive/adaptive.jsonl is the contract both are tested
-- against).
--
-- Prepended to every top-level script like strategy.lua; everything is
-- local. The API:
--   adapt_amount(st, p)            -> the effective amount (milli-units)
--   adapt_apply(st, p, now, o)     -> changed (boolean); mutates st
--   adapt_scale(v, amt, ceil)      -> a rule's amount or burst under amt
--   adapt_ttl_ms(p)                -> how long the learned amount outlives a change
-- st = {amt=, td=, tc=, tl=}; p = {ceil=, floor=, factor=, step=,
-- interval_ms=}; o = 'ok' | 'limited' | 'error' | ''.
-- Scripts keep st in a hash beside the key's other state, fields amt, td,
-- tc, tl (adapt_read, adapt_write), and take p from ARGV (adapt_arg).

local ADAPT_TTL_MIN_MS = 600000
local ADAPT_TTL_INTERVALS = 60

local function adapt_amount(st, p)
	if st.amt <= 0 or st.amt >= p.ceil then
		return p.ceil
	end
	if st.amt < p.floor then
		return p.floor
	end
	return st.amt
end

local function adapt_now(st, now)
	if st.td > now then now = st.td end
	if st.tc > now then now = st.tc end
	if st.tl > now then now = st.tl end
	return now
end

local function adapt_set(st, p, a, now)
	local old = adapt_amount(st, p)
	if a >= p.ceil then st.amt = 0 else st.amt = a end
	if a ~= old then st.tc = now end
end

local function adapt_apply(st, p, now, o)
	local a = adapt_amount(st, p)
	local n = adapt_now(st, now)
	if o == 'limited' then
		st.tl = n
		if st.td == 0 or n - st.td >= p.interval_ms then
			local d = math.floor(a * p.factor / 1000)
			if d < p.floor then d = p.floor end
			adapt_set(st, p, d, n)
			st.td = n
		end
		return true
	end
	if o ~= 'ok' or a >= p.ceil then
		return false
	end
	local since = st.tl
	if st.tc > st.tl then since = st.tc end
	if n - since < p.interval_ms then
		return false
	end
	local up = a + p.step
	if up > p.ceil then up = p.ceil end
	adapt_set(st, p, up, n)
	return true
end

local function adapt_scale(v, amt, ceil)
	if v <= 0 or amt >= ceil then
		return v
	end
	local s = math.floor(v * amt / ceil)
	if s < 1 then s = 1 end
	return s
end

local function adapt_ttl_ms(p)
	local t = p.interval_ms * ADAPT_TTL_INTERVALS
	if t > ADAPT_TTL_MIN_MS then return t end
	return ADAPT_TTL_MIN_MS
end

-- ---- the scripts' side: params from ARGV, state in a hash ----

-- The five params at argv[b + 1 .. b + 5] (ceil floor factor step
-- interval_ms), or nil when argv[b + 1] is absent or 0 (not adaptive).
local function adapt_arg(argv, b)
	local ceil = tonumber(argv[b + 1]) or 0
	if ceil <= 0 then return nil end
	return { ceil = ceil, floor = tonumber(argv[b + 2]), factor = tonumber(argv[b + 3]),
		 step = tonumber(argv[b + 4]), interval_ms = tonumber(argv[b + 5]) }
end

-- The key's adaptive hash sits beside its other keys (same hash tag, so the
-- same slot): PREFIX:{SCOPE:KEY}:a for any PREFIX:{SCOPE:KEY}:SUFFIX (the
-- state hash, a rule's hash). The suffixes hold no '}', so the last '}:' is
-- the one that ends the tag, whatever the key holds.
local function adapt_key(key)
	return string.match(key, '^(.*}:)') .. 'a'
end

local function adapt_read(key)
	local h = redis.call('HMGET', key, 'amt', 'td', 'tc', 'tl')
	return { amt = tonumber(h[1]) or 0, td = tonumber(h[2]) or 0,
		 tc = tonumber(h[3]) or 0, tl = tonumber(h[4]) or 0 }
end

local function adapt_write(key, st, p)
	local ttl = adapt_ttl_ms(p)
	redis.call('HSET', key, 'amt', st.amt, 'td', st.td, 'tc', st.tc, 'tl', st.tl)
	-- The hash may hold an override (override.lua) that outlives this.
	if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl) end
end

-- An outcome on the key whose state hash is state_key, at Redis time now.
local function adapt_outcome_key(state_key, p, now, o)
	if p == nil or (o ~= 'ok' and o ~= 'limited') then return end
	local key = adapt_key(state_key)
	local st = adapt_read(key)
	if adapt_apply(st, p, now, o) then adapt_write(key, st, p) end
end

-- scripts/lib/override.lua - a key's override (the override op), in Lua for
-- Redis: its own min_delay and rule amounts until a Redis time. A
-- line-for-line mirror of the lim_ovr_* arithmetic of daemon/limiter/limiter_share.c
-- (same names without the lim_ prefix, same results;
-- tests/vectors/override/override.jsonl is the contract both are tested
-- against).
--
-- The override lives in the key's adaptive hash (adaptive.lua's adapt_key,
-- prepended before this file), beside a learned amount, so that a scope
-- that is adaptive and takes overrides reads both in one HMGET: fields ou
-- (its end, Redis ms), od (min_delay ms; -1: the conf's) and o<i> (rule i's
-- amount, i its index in the scope; absent: the conf's). milli is the
-- scope's override_max times 1000: how far an override may loosen.

local OVR_MAX_AMOUNT = 1000000000

-- The hash field of rule i's amount (i: its index in the scope, from 0).
local function ovr_field(i)
	return 'o' .. i
end

-- The loosest amount an override may give a rule of amount v.
local function ovr_cap(v, milli)
	local c = math.floor(v * milli / 1000)
	if c > OVR_MAX_AMOUNT then return OVR_MAX_AMOUNT end
	if c < 1 then return 1 end
	return c
end

-- The amount in force: o (0: none) bounded by the cap.
local function ovr_amount(v, o, milli)
	if o <= 0 or milli <= 0 then return v end
	local cap = ovr_cap(v, milli)
	if o > cap then return cap end
	return o
end

-- The min_delay in force: o (-1: none) no shorter than d / (milli / 1000).
local function ovr_delay(d, o, milli)
	if o < 0 or d <= 0 or milli <= 0 then return d end
	local fl = math.floor(d * 1000 / milli)
	if o < fl then return fl end
	return o
end

-- A burst b of a rule of amount v, when an override makes the amount a.
local function ovr_burst(b, a, v)
	local s = math.floor(b * a / v)
	if s < 1 then return 1 end
	return s
end

-- The min_delay in force for the key whose state hash is state_key, at now.
local function ovr_delay_key(state_key, d, milli, now)
	local h = redis.call('HMGET', adapt_key(state_key), 'ou', 'od')
	if (tonumber(h[1]) or 0) <= now then return d end
	return ovr_delay(d, tonumber(h[2]) or -1, milli)
end

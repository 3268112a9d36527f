-- admitd write-back: what one pod admitted on one (scope, key) that the
-- Redis answering again may not hold, charged there once it answers, so
-- that the Redis that comes back (the same, an empty one, a new master)
-- knows what was spent, and a pod that never saw the outage is refused it.
--
-- Two parts: what the pod's fallback admitted while Redis could not be
-- asked (always booked: no Redis ever saw it), and the rest of what the
-- pod's state holds in the current windows, its admissions through Redis
-- before the outage (booked only where Redis lost them: the key's counter
-- is gone, or another pod's write-back found it gone, which the lost flag
-- says for a while).
--
-- Exactly once: the call is marked under the key's hash tag (KEYS[1], set
-- NX for marker_ttl); a call sent again after an unknown outcome, with the
-- same marker, books nothing.
--
-- KEYS[1] the marker  KEYS[2] state hash  KEYS[3] quota zset  KEYS[4] the
-- key that holds the key's penalty (the state hash or a rule's string)
-- KEYS[5] the lost flag  KEYS[6..] the rule strings below (lib/state.lua)
-- ARGV: marker_ttl quota_n quota_own quota_window_ms next_in_ms pen_in_ms
--       nrules, then per rule: kind amount window_ms burst units own
-- (next_in, pen_in: the pacing and the penalty still in force, in ms from
-- now; 0: none). Returns 1 when booked, 2 when booked and Redis had lost
-- the key, 0 when the marker was there.

if redis.replicate_commands then redis.replicate_commands() end

if not redis.call('SET', KEYS[1], '1', 'NX', 'PX', tonumber(ARGV[1])) then return 0 end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local marker_ttl = tonumber(ARGV[1])
local quota_n = tonumber(ARGV[2])
local quota_own = tonumber(ARGV[3])
local quota_window = tonumber(ARGV[4])
local next_in = tonumber(ARGV[5])
local pen_in = tonumber(ARGV[6])
local nrules = tonumber(ARGV[7])
local lost_before = redis.call('EXISTS', KEYS[5]) == 1
local lost = false

-- own units count where Redis does not hold the key (looked at before
-- anything here books it)
local function with_own(key, units, own)
	if own > 0 and (lost_before or redis.call('EXISTS', key) == 0) then
		lost = true
		return units + own
	end
	return units
end

local function extend(key, field, at)
	local cur = tonumber(redis.call('HGET', key, field)) or 0
	if at > cur then
		redis.call('HSET', key, field, at)
		if redis.call('PTTL', key) < at - now then redis.call('PEXPIRE', key, at - now) end
	end
end

quota_n = with_own(KEYS[3], quota_n, quota_own)
if quota_n > 0 then
	for i = 1, quota_n do
		redis.call('ZADD', KEYS[3], now, KEYS[1] .. ':' .. i)
	end
	if redis.call('PTTL', KEYS[3]) < quota_window then
		redis.call('PEXPIRE', KEYS[3], quota_window)
	end
end
if next_in > 0 then extend(KEYS[2], 'next_at', now + next_in) end
if pen_in > 0 then state_pen_extend(KEYS[4], now + pen_in, now) end

for i = 1, nrules do
	local b = 7 + (i - 1) * 6
	local p, units = strat_rule_arg(ARGV, b)
	units = with_own(KEYS[5 + i], units, tonumber(ARGV[b + 6]))
	if units ~= 0 then strat_book_key(KEYS[5 + i], p, now, units, true) end
end
if lost then
	redis.call('SET', KEYS[5], '1', 'PX', marker_ttl)
	return 2
end
return 1

-- A rule's state in Redis: one string per (scope, key, rule), under the
-- rule's key (PREFIX:{SCOPE:KEY}:rN), read with one GET and written with its
-- TTL in one SET. The string is the counters a, b, t (strategy.lua's
-- state), then, when the rule holds the key's penalty and one was set, its
-- penalty_until (a Redis time, ms): little-endian signed 64-bit integers
-- (struct.pack '<i8'), 24 bytes or 32. Binary, not text: no strtod per read
-- (a, b and t are integers, exact up to 2^53). The state hash PREFIX:{..}:s
-- (next_at, and penalty_until when no rule holds it) and the adaptive hash
-- stay hashes.
--
-- Upgrade: an older admitd wrote each rule as a hash (fields a, b, t,
-- penalty_until). GET of such a key is a WRONGTYPE error, which state_read
-- takes as that layout and reads the fields instead; the next write replaces
-- the hash with the string, so a key's counters and penalty carry over.

local STATE_ABT, STATE_ABTP = '<i8i8i8', '<i8i8i8i8'

-- a, b, t and penalty_until (0 when absent) from v, what redis.pcall('GET',
-- key) replied.
local function state_decode(key, v)
	if not v then return 0, 0, 0, 0 end
	local n = #v -- an error reply is a table: 0
	if n == 24 then
		local a, b, t = struct.unpack(STATE_ABT, v)
		return a, b, t, 0
	elseif n == 32 then
		local a, b, t, p = struct.unpack(STATE_ABTP, v)
		return a, b, t, p
	end
	if type(v) ~= 'table' or not v.err or not string.find(v.err, 'WRONGTYPE', 1, true) then
		return error('not a rule state: ' .. key)
	end
	local h = redis.call('HMGET', key, 'a', 'b', 't', 'penalty_until')
	return tonumber(h[1]) or 0, tonumber(h[2]) or 0, tonumber(h[3]) or 0, tonumber(h[4]) or 0
end

-- key's a, b, t and penalty_until (0 when absent).
local function state_read(key)
	return state_decode(key, redis.pcall('GET', key))
end

-- Writes key's state; it lives ttl ms (a number or its decimal string), or,
-- with ttl nil, keeps the TTL it has. p 0: no penalty.
local function state_write(key, a, b, t, p, ttl)
	local v
	if p == 0 then v = struct.pack(STATE_ABT, a, b, t) else v = struct.pack(STATE_ABTP, a, b, t, p) end
	if ttl then
		redis.call('SET', key, v, 'PX', ttl)
	else
		redis.call('SET', key, v, 'KEEPTTL')
	end
end

-- Is key the state hash (PREFIX:{SCOPE:KEY}:s), not a rule's string? The
-- key that holds a penalty is one or the other.
local function state_is_hash(key)
	return string.sub(key, -3) == '}:s'
end

-- The penalty_until key holds (the state hash's field or a rule's), 0: none.
local function state_pen_get(key)
	if state_is_hash(key) then return tonumber(redis.call('HGET', key, 'penalty_until')) or 0 end
	local _, _, _, p = state_read(key)
	return p
end

-- Extends the penalty key holds to at (a Redis time, ms), never shortening
-- one; the key then lives at least until at. Returns the penalty's end.
local function state_pen_extend(key, at, now)
	if state_is_hash(key) then
		local cur = tonumber(redis.call('HGET', key, 'penalty_until')) or 0
		if at <= cur then return cur end
		redis.call('HSET', key, 'penalty_until', at)
	else
		local a, b, t, p = state_read(key)
		if at <= p then return p end
		state_write(key, a, b, t, at, nil)
	end
	if redis.call('PTTL', key) < at - now then redis.call('PEXPIRE', key, at - now) end
	return at
end

-- Lifts the penalty key holds. Returns 1 when there was one, else 0.
local function state_pen_clear(key)
	if state_is_hash(key) then return redis.call('HDEL', key, 'penalty_until') end
	local a, b, t, p = state_read(key)
	if p == 0 then return 0 end
	state_write(key, a, b, t, 0, nil)
	return 1
end

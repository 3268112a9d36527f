-- admitd override: set one (scope, key)'s own min_delay and rule amounts for
-- a time, for every pod (the override op). It replaces whatever override the
-- key had, its tenants' weights apart; the daemon has checked the values
-- against the scope's override_max, and every acquire bounds them again
-- (override.lua).
--
-- KEYS[1] the key's adaptive hash (PREFIX:{SCOPE:KEY}:a)
-- ARGV: ttl_ms min_delay_ms (-1: the conf's) nrules, then per rule of the
-- scope, in conf order, its amount (0: the conf's)
-- Returns the override's end, in Redis TIME milliseconds.
--
-- Or one tenant's weight on the key (the override op with "tenant"), which
-- leaves the rest of the override alone: ARGV: ttl_ms 'tw' TENANT WEIGHT MAX.
-- It is field tw:TENANT, "WEIGHT:UNTIL" (UNTIL in Redis TIME ms), which the
-- fair acquire reads. The fields that ended are dropped here; past MAX
-- tenants in force on the key (TENANT itself not counted), nothing is set
-- and -1 is returned. Else the end, as above.

if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local key = KEYS[1]
local ttl = tonumber(ARGV[1])

if ARGV[2] == 'tw' then
	local field, live, ended = 'tw:' .. ARGV[3], 0, {}
	local all = redis.call('HGETALL', key)
	for i = 1, #all, 2 do
		if string.sub(all[i], 1, 3) == 'tw:' and all[i] ~= field then
			local untilms = tonumber(string.match(all[i + 1], ':(%d+)$')) or 0
			if untilms > now then live = live + 1 else ended[#ended + 1] = all[i] end
		end
	end
	if #ended > 0 then redis.call('HDEL', key, unpack(ended)) end
	if live >= tonumber(ARGV[5]) then return -1 end
	redis.call('HSET', key, field, ARGV[4] .. ':' .. (now + ttl))
	if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl) end
	return now + ttl
end

local n = tonumber(ARGV[3])

local old = {}
for i = 0, n - 1 do old[#old + 1] = ovr_field(i) end
if #old > 0 then redis.call('HDEL', key, unpack(old)) end
local set = { 'ou', now + ttl, 'od', tonumber(ARGV[2]) }
for i = 1, n do
	local a = tonumber(ARGV[3 + i]) or 0
	if a > 0 then
		set[#set + 1] = ovr_field(i - 1)
		set[#set + 1] = a
	end
end
redis.call('HSET', key, unpack(set))
-- The hash may hold a learned amount that outlives this: never shortened.
if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl) end
return now + ttl

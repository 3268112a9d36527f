-- admitd inspect: one (scope, key)'s state as the acquire script sees it.
-- Read-only: what time has made irrelevant is skipped, not deleted.
--
-- KEYS as acquire.lua: state hash, quota zset, leases zset, one string per rule
-- (lib/state.lua), then the rule's string that holds the penalty when it is
-- not the state hash nor one of those
-- ARGV[1] quota_window_ms  ARGV[2] nrules, then in a scope that takes
-- overrides ARGV[3] 1 and per rule its index in the scope
-- Returns {now_ms, next_at, penalty_until, leases in flight, quota instants
-- in the window, the oldest of them (0: none), then per rule a, b, t,
-- then the key's adaptive hash: amt, td, tc, tl (all 0: never learned),
-- then, when ARGV[3] is 1, its override: ou (0: none), od (-1: none) and
-- per rule its amount (0: none)}.
-- A fair scope's inspect ends ARGV with 'q' 2 and KEYS with the class's
-- tickets and tags (acquire.lua's fair_call): the reply then ends with the
-- tickets waiting, the class's virtual time (a string), then per tenant
-- flow with tickets its name ('' the default flow) and how many (of the
-- first 10000 tickets).

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[1])
local nq = ARGV[#ARGV - 1] == 'q' and tonumber(ARGV[#ARGV]) or 0
local nrules = tonumber(ARGV[2]) or (#KEYS - 3)
local st = redis.call('HMGET', KEYS[1], 'next_at', 'penalty_until')
if 4 + nrules <= #KEYS - nq then st[2] = state_pen_get(KEYS[4 + nrules]) end
local out = { now, tonumber(st[1]) or 0, tonumber(st[2]) or 0,
	      redis.call('ZCOUNT', KEYS[3], '(' .. now, '+inf') }
if window > 0 then
	local from = '(' .. (now - window)
	out[5] = redis.call('ZCOUNT', KEYS[2], from, '+inf')
	local first = redis.call('ZRANGEBYSCORE', KEYS[2], from, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
	out[6] = tonumber(first[2]) or 0
else
	out[5], out[6] = 0, 0
end
for i = 4, 3 + nrules do
	local a, b, rt = state_read(KEYS[i])
	out[#out + 1], out[#out + 2], out[#out + 3] = a, b, rt
end
local f = { 'amt', 'td', 'tc', 'tl' }
if ARGV[3] == '1' then
	f[5], f[6] = 'ou', 'od'
	for i = 1, nrules do f[6 + i] = ovr_field(ARGV[3 + i]) end
end
local h = redis.call('HMGET', adapt_key(KEYS[1]), unpack(f))
for i = 1, 4 do out[#out + 1] = tonumber(h[i]) or 0 end
if ARGV[3] == '1' then
	local ou = tonumber(h[5]) or 0
	if ou <= now then ou = 0 end
	out[#out + 1] = ou
	out[#out + 1] = ou > 0 and (tonumber(h[6]) or -1) or -1
	for i = 1, nrules do out[#out + 1] = ou > 0 and (tonumber(h[6 + i]) or 0) or 0 end
end
if nq == 2 then
	local fq, fs = KEYS[#KEYS - 1], KEYS[#KEYS]
	out[#out + 1] = redis.call('ZCARD', fq)
	out[#out + 1] = redis.call('HGET', fs, 'v') or '0'
	local per, order = {}, {}
	for _, m in ipairs(redis.call('ZRANGE', fq, 0, 9999)) do
		local flow = string.match(m, '^%d+|[^|]*|[^|]*|([^|]*)|')
		if flow then
			if not per[flow] then per[flow], order[#order + 1] = 0, flow end
			per[flow] = per[flow] + 1
		end
	end
	for _, flow in ipairs(order) do
		out[#out + 1] = flow
		out[#out + 1] = per[flow]
	end
end
return out

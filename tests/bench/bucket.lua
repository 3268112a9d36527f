-- bucket.lua - the plain token bucket a user would write instead of admitd:
-- the benchmark's ceiling (tests/bench/run.py runs it with redis-benchmark).
-- One hash per key, Redis TIME as the clock.
-- KEYS[1] the bucket; ARGV: rate (tokens/s), burst, cost. Returns 1 admitted, 0 refused.
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local rate, burst, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local h = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = math.min(burst, (tonumber(h[1]) or burst) + (now - (tonumber(h[2]) or now)) * rate / 1000)
local ok = 0
if tokens >= cost then tokens, ok = tokens - cost, 1 end
redis.call('HSET', KEYS[1], 'tokens', tokens, 'ts', now)
redis.call('PEXPIRE', KEYS[1], math.ceil(burst * 1000 / rate) + 1000)
return ok

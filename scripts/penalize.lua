-- admitd penalize: hold one (scope, key) back for a delay, across every pod.
-- Only ever extends the hold (never shortens one another pod made).
--
-- KEYS[1] the key that holds the key's penalty (the state hash, or the string
-- of the scope's first counting rule when it has no min_delay: see acquire.lua)
-- ARGV[1] delay_ms, then in an adaptive scope ceil floor factor step
-- interval_ms: a penalty is a limited outcome for the key's learned amount
-- Returns the penalty's end, in Redis TIME milliseconds.

if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local delay = tonumber(ARGV[1])
adapt_outcome_key(KEYS[1], adapt_arg(ARGV, 1), now, 'limited')
if delay > 0 then return state_pen_extend(KEYS[1], now + delay, now) end
return state_pen_get(KEYS[1])

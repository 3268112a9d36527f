-- admitd reset: lift one (scope, key)'s penalty and pacing, for every pod.
--
-- An operator's way out of a hold that should not be there (a far-future
-- Retry-After, a min_delay set too long). Budgets, quotas and leases in
-- flight are left alone: they count what was really sent.
--
-- It also returns an adaptive key to its ceiling: its learned amount goes.
--
-- KEYS[1] state hash, KEYS[2] (when given) the rule's string that holds the penalty
-- Returns 1 when there was a penalty or pacing to lift, else 0.

redis.call('DEL', adapt_key(KEYS[1]))

local n = redis.call('HDEL', KEYS[1], 'next_at', 'penalty_until')
if KEYS[2] then n = n + state_pen_clear(KEYS[2]) end
return n > 0 and 1 or 0

-- admitd settled: a live lease was settled through a daemon that did not
-- issue it; tell the pod that did.
--
-- The pod's list of such leases (KEYS[1], {PREFIX:pods}:s:POD, in the
-- slot of the pods zset) gets the lease id; the pod's next heartbeat takes
-- it (heartbeat.lua) and ends the lease there, so that it stops counting
-- against max_leases. The list lives as long as a pod is counted alive
-- without a beat: a pod that is gone leaves nothing behind.
--
-- KEYS[1] the issuing pod's list   ARGV[1] lease id   ARGV[2] ttl ms
-- Returns the list's length.

local n = redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
return n

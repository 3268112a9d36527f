-- tests/integ/lua_override.lua - test-only wrapper around
-- scripts/lib/override.lua (loaded after it, never embedded in the daemon:
-- it is not under scripts/).
--
-- ARGV[1] is a JSON array of cases of tests/vectors/override/override.jsonl
-- ({fn, args}); the reply is one integer per case, what fn returned.
local fns = { cap = ovr_cap, amount = ovr_amount, delay = ovr_delay, burst = ovr_burst }
local out = {}
for i, c in ipairs(cjson.decode(ARGV[1])) do
	out[i] = fns[c.fn](c.args[1], c.args[2], c.args[3])
end
return out

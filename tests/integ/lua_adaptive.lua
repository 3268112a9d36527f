-- tests/integ/lua_adaptive.lua - test-only wrapper around
-- scripts/lib/adaptive.lua (loaded after it, never embedded in the daemon:
-- it is not under scripts/).
--
-- ARGV[1] is one case of tests/vectors/adaptive/adaptive.jsonl as JSON
-- ({params, state, steps}); the steps are replayed in order and the reply is
-- a flat array of integers, per step:
--   apply:  changed (1/0), then the new state amt, td, tc, tl
--   amount: adapt_amount(st, params)
--   scale:  adapt_scale(v, amt, ceil)
--   ttl:    adapt_ttl_ms(params)
local case = cjson.decode(ARGV[1])
local p = case.params
local st = { amt = case.state.amt, td = case.state.td, tc = case.state.tc, tl = case.state.tl }
local out = {}

for _, step in ipairs(case.steps) do
	if step.op == "apply" then
		local changed = adapt_apply(st, p, step.now, step.outcome)
		out[#out + 1] = changed and 1 or 0
		out[#out + 1] = st.amt
		out[#out + 1] = st.td
		out[#out + 1] = st.tc
		out[#out + 1] = st.tl
	elseif step.op == "amount" then
		out[#out + 1] = adapt_amount(st, p)
	elseif step.op == "scale" then
		out[#out + 1] = adapt_scale(step.v, step.amt, step.ceil)
	elseif step.op == "ttl" then
		out[#out + 1] = adapt_ttl_ms(p)
	else
		return redis.error_reply("unknown op " .. tostring(step.op))
	end
end
return out

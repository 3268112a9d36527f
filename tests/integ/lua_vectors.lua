-- tests/integ/lua_vectors.lua - test-only wrapper around scripts/lib/strategy.lua
-- (loaded after it, never embedded in the daemon: it is not under scripts/).
--
-- ARGV[1] is one vector case as JSON ({params, state, steps}); the steps are
-- replayed in order and the reply is a flat array of integers, per step:
--   check: allowed (1/0), retry_after_ms, then whether the same check passes
--          at now + retry_after_ms and at now + retry_after_ms - 1 (1/0; -1
--          when the check passed or can never pass)
--   book:  the new state a, b, t
--   ttl:   strat_ttl_ms(params)
--   floor: strat_floor_units(params, floor, floor_ppm)
-- A check's floor is strat_floor_units(params, floor, floor_ppm) too.
local case = cjson.decode(ARGV[1])
local p = case.params
local st = { a = case.state.a, b = case.state.b, t = case.state.t }
local out = {}

local function flag(b)
	if b then
		return 1
	end
	return 0
end

for _, step in ipairs(case.steps) do
	if step.op == "check" then
		local cost = step.cost or 1
		local floor_units = strat_floor_units(p, step.floor or 0, step.floor_ppm or 0)
		local ok, retry = strat_check(st, p, step.now, cost, floor_units)
		local at, before = -1, -1
		if retry > 0 then
			at = flag(strat_check(st, p, step.now + retry, cost, floor_units))
			before = flag(strat_check(st, p, step.now + retry - 1, cost, floor_units))
		end
		for _, v in ipairs({ flag(ok), retry, at, before }) do
			out[#out + 1] = v
		end
	elseif step.op == "book" then
		strat_book(st, p, step.now, step.amount)
		out[#out + 1] = st.a
		out[#out + 1] = st.b
		out[#out + 1] = st.t
	elseif step.op == "floor" then
		out[#out + 1] = strat_floor_units(p, step.floor or 0, step.floor_ppm or 0)
	elseif step.op == "ttl" then
		out[#out + 1] = strat_ttl_ms(p)
	else
		return redis.error_reply("unknown op " .. tostring(step.op))
	end
end
return out

/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * check_strategy.c - unit tests for daemon/strategy: every case of
 * tests/vectors/strategy/<kind>.jsonl replayed through strat_check,
 * strat_book and strat_ttl_ms (the Lua replays the same files in
 * tests/integ/test_lua_vectors.py), plus properties the vectors cannot
 * enumerate: for random states, params and instants, a refused check's
 * retry_after_ms is exact (passes then, not a millisecond before) and a
 * check never changes the state.
 *
 * The vector dir is tests/vectors/strategy relative to the working
 * directory (make test-unit runs from the repo root), or $STRAT_VECTORS.
 */

#include "strategy.h"

#include "vector_file.h"

#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WAIT_MAX_MS	   1000000000000000LL /* retry_after_ms cap (strategy_impl.h) */
#define MIN_CASES_PER_KIND 12

/* Every vector case of every kind, loaded once in main (forked tests inherit it). */
static json_t **cases;
static int n_cases;
static int cases_per_kind[STRAT__COUNT];

static void load_kind(const char *dir, int kind)
{
	char path[1024];
	int n;

	snprintf(path, sizeof(path), "%s/%s.jsonl", dir, strat_kind_name((enum strat_kind)kind));
	n = vec_load(path, "check_strategy", &cases, &n_cases);
	if (n > 0)
		cases_per_kind[kind] += n;
}

static struct strat_params params_of(const json_t *c)
{
	const json_t *p = json_object_get(c, "params");
	struct strat_params sp = {
		.kind = (enum strat_kind)strat_kind_parse(
		    json_string_value(json_object_get(p, "kind"))),
		.amount = jint(p, "amount", 0),
		.window_ms = jint(p, "window_ms", 0),
		.burst = jint(p, "burst", 0),
	};

	ck_assert_msg((int)sp.kind >= 0, "vector with an unknown kind");
	return sp;
}

static struct strat_state state_of(const json_t *o)
{
	struct strat_state st = { jint(o, "a", -1), jint(o, "b", -1), jint(o, "t", -1) };

	return st;
}

/*
 * assert_exact - a refused check's retry_after_ms is the least wait: the
 * same check passes at now + retry and fails a millisecond earlier.
 */
static void assert_exact(const struct strat_state *st, const struct strat_params *p, int64_t now,
			 int64_t cost, int64_t floor_units, const char *what)
{
	struct strat_result r = strat_check(st, p, now, cost, floor_units);

	ck_assert_msg(r.allowed == (r.retry_after_ms == 0), "%s: allowed %d with retry %lld", what,
		      r.allowed, (long long)r.retry_after_ms);
	if (r.allowed || r.retry_after_ms < 0 || r.retry_after_ms >= WAIT_MAX_MS)
		return;
	ck_assert_msg(strat_check(st, p, now + r.retry_after_ms, cost, floor_units).allowed,
		      "%s: still refused after retry_after_ms %lld", what,
		      (long long)r.retry_after_ms);
	ck_assert_msg(!strat_check(st, p, now + r.retry_after_ms - 1, cost, floor_units).allowed,
		      "%s: retry_after_ms %lld is not minimal", what, (long long)r.retry_after_ms);
}

START_TEST(test_vector)
{
	const json_t *c = cases[_i];
	const char *name = json_string_value(json_object_get(c, "name"));
	struct strat_params p = params_of(c);
	struct strat_state st = state_of(json_object_get(c, "state"));
	const json_t *steps = json_object_get(c, "steps");
	size_t i;
	const json_t *step;

	ck_assert_msg(json_array_size(steps) > 0, "%s: no steps", name);
	json_array_foreach (steps, i, step) {
		const char *op = json_string_value(json_object_get(step, "op"));
		int64_t now = jint(step, "now", 0);
		char what[256];

		snprintf(what, sizeof(what), "%s %s step %zu", strat_kind_name(p.kind), name, i);
		ck_assert_msg(op != NULL, "%s: no op", what);
		if (strcmp(op, "check") == 0) {
			const json_t *exp = json_object_get(step, "expect");
			int64_t cost = jint(step, "cost", 1);
			int64_t fl = strat_floor_units(&p, jint(step, "floor", 0),
						       jint(step, "floor_ppm", 0));
			struct strat_state before = st;
			struct strat_result r = strat_check(&st, &p, now, cost, fl);

			ck_assert_msg(memcmp(&before, &st, sizeof(st)) == 0, "%s: check wrote",
				      what);
			ck_assert_msg(r.allowed == json_is_true(json_object_get(exp, "allowed")),
				      "%s: allowed %d", what, r.allowed);
			ck_assert_msg(r.retry_after_ms == jint(exp, "retry_after_ms", -2),
				      "%s: retry_after_ms %lld, want %lld", what,
				      (long long)r.retry_after_ms,
				      (long long)jint(exp, "retry_after_ms", -2));
			assert_exact(&st, &p, now, cost, fl, what);
		} else if (strcmp(op, "book") == 0) {
			struct strat_state want = state_of(json_object_get(step, "expect_state"));

			strat_book(&st, &p, now, jint(step, "amount", 0));
			ck_assert_msg(st.a == want.a && st.b == want.b && st.t == want.t,
				      "%s: state {%lld,%lld,%lld}, want {%lld,%lld,%lld}", what,
				      (long long)st.a, (long long)st.b, (long long)st.t,
				      (long long)want.a, (long long)want.b, (long long)want.t);
		} else if (strcmp(op, "floor") == 0) {
			int64_t fl = strat_floor_units(&p, jint(step, "floor", 0),
						       jint(step, "floor_ppm", 0));
			ck_assert_msg(fl == jint(step, "expect", -1), "%s: floor %lld, want %lld",
				      what, (long long)fl, (long long)jint(step, "expect", -1));
		} else if (strcmp(op, "ttl") == 0) {
			ck_assert_msg(strat_ttl_ms(&p) == jint(step, "expect", -1), "%s: ttl %lld",
				      what, (long long)strat_ttl_ms(&p));
		} else {
			ck_abort_msg("%s: unknown op %s", what, op);
		}
	}
}
END_TEST

START_TEST(test_enough_cases)
{
	for (int k = 0; k < STRAT__COUNT; k++)
		ck_assert_msg(cases_per_kind[k] >= MIN_CASES_PER_KIND, "%s: %d vector cases",
			      strat_kind_name((enum strat_kind)k), cases_per_kind[k]);
}
END_TEST

START_TEST(test_kind_names)
{
	static const char *const names[STRAT__COUNT] = {
		"token-bucket", "sliding-window", "fixed-window", "leaky-bucket", "session-window",
	};

	for (int k = 0; k < STRAT__COUNT; k++) {
		ck_assert_str_eq(strat_kind_name((enum strat_kind)k), names[k]);
		ck_assert_int_eq(strat_kind_parse(names[k]), k);
	}
	ck_assert_ptr_null(strat_kind_name(STRAT__COUNT));
	ck_assert_int_eq(strat_kind_parse("token_bucket"), -1);
	ck_assert_int_eq(strat_kind_parse("Token-Bucket"), -1);
	ck_assert_int_eq(strat_kind_parse(""), -1);
	ck_assert_int_eq(strat_kind_parse(NULL), -1);
}
END_TEST

START_TEST(test_unknown_kind)
{
	struct strat_params p = { .kind = STRAT__COUNT, .amount = 10, .window_ms = 1000 };
	struct strat_state st = { 1, 2, 3 };
	struct strat_result r = strat_check(&st, &p, 100, 1, 0);

	ck_assert(!r.allowed);
	ck_assert_int_eq(r.retry_after_ms, -1);
	strat_book(&st, &p, 100, 5);
	ck_assert(st.a == 1 && st.b == 2 && st.t == 3);
	ck_assert_int_eq(strat_ttl_ms(&p), 0);
}
END_TEST

/* Nonsense params are clamped, never divided by: window 0 acts as 1 ms. */
START_TEST(test_params_clamped)
{
	for (int k = 0; k < STRAT__COUNT; k++) {
		struct strat_params p = {
			.kind = (enum strat_kind)k, .amount = 0, .window_ms = 0, .burst = -5
		};
		struct strat_state st = { 0, 0, 0 };

		ck_assert(strat_check(&st, &p, 1000, 1, 0).allowed);
		strat_book(&st, &p, 1000, 1);
		assert_exact(&st, &p, 1000, 1, 0, strat_kind_name(p.kind));
		ck_assert_int_ge(strat_ttl_ms(&p), 1);
	}
}
END_TEST

/* strat_used: a fresh counter charged what st has used refuses, at that
 * instant, exactly what st refuses; overdrawn is the whole capacity. */
START_TEST(test_used_replays)
{
	struct strat_params p = {
		.kind = (enum strat_kind)_i, .amount = 10, .window_ms = 1000, .burst = 0
	};
	struct strat_state st = { 0, 0, 0 }, fresh = { 0, 0, 0 };
	int64_t now = 5000, used;

	ck_assert_int_eq(strat_used(&st, &p, now), 0);
	strat_book(&st, &p, now, 3);
	ck_assert_int_eq(strat_used(&st, &p, now), 3);
	strat_book(&st, &p, now + 400, 4);
	now += 700;
	used = strat_used(&st, &p, now);
	ck_assert_int_ge(used, 0);
	ck_assert_int_le(used, 7);
	strat_book(&fresh, &p, now, used);
	for (int64_t c = 1; c <= 11; c++)
		ck_assert_msg(strat_check(&st, &p, now, c, 0).allowed ==
				  strat_check(&fresh, &p, now, c, 0).allowed,
			      "%s: cost %lld", strat_kind_name(p.kind), (long long)c);
	strat_book(&st, &p, now, 50);
	ck_assert_int_eq(strat_used(&st, &p, now), 10);
}
END_TEST

/* xorshift64: deterministic, so a failure reproduces. */
static uint64_t rng_state;

static uint64_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static int64_t rng_below(int64_t n)
{
	return (int64_t)(rng() % (uint64_t)n);
}

/* A small or a huge value, so both ordinary and boundary arithmetic run. */
static int64_t rng_size(int64_t small, int64_t huge)
{
	return rng_below(4) == 0 ? huge - rng_below(3) : 1 + rng_below(small);
}

/* Random params of a kind: small or huge amounts and windows, a burst or none. */
static struct strat_params rng_params(enum strat_kind kind)
{
	struct strat_params p = { .kind = kind };

	p.amount = rng_size(20, STRAT_MAX_AMOUNT);
	p.window_ms = rng_size(5000, STRAT_MAX_WINDOW_MS);
	p.burst = rng_below(2) ? 0 : rng_size(40, STRAT_MAX_AMOUNT);
	return p;
}

/* The capacity of p: a bucket's burst when it has one, else its amount. */
static int64_t capacity(const struct strat_params *p)
{
	bool bucket = p->kind == STRAT_TOKEN_BUCKET || p->kind == STRAT_LEAKY_BUCKET;

	return bucket && p->burst > 0 ? p->burst : p->amount;
}

START_TEST(test_random_exact)
{
	rng_state = 0x9e3779b97f4a7c15ULL + (uint64_t)_i;
	for (int round = 0; round < 300; round++) {
		struct strat_params p = rng_params((enum strat_kind)_i);
		struct strat_state st = { 0, 0, 0 };
		int64_t now = 1700000000000LL + rng_below(1000000);

		for (int step = 0; step < 12; step++) {
			int64_t cap = p.amount > 50 ? p.amount : 50;
			int64_t cost = rng_below(3) == 0 ? 0 : 1 + rng_below(cap);
			int64_t fl = rng_below(2) ? 0 : rng_below(cap);
			int64_t back = rng_below(8) == 0 ? rng_below(2 * p.window_ms) : 0;
			char what[128];

			snprintf(what, sizeof(what), "%s round %d step %d", strat_kind_name(p.kind),
				 round, step);
			assert_exact(&st, &p, now - back, cost, fl, what);
			strat_book(&st, &p, now,
				   rng_below(4) == 0 ? -rng_below(cap) : rng_below(cap));
			ck_assert_msg(st.a >= 0 && st.t <= now, "%s: state {%lld,_,%lld}", what,
				      (long long)st.a, (long long)st.t);
			now += rng_below(3) == 0 ? 0 : rng_below(2 * p.window_ms);
		}
	}
}
END_TEST

/*
 * strat_used reads a level where a kind has one, and searches otherwise:
 * either way it is the capacity less the most units strat_check lets
 * through at that instant (found here by a search of strat_check alone).
 */
START_TEST(test_used_is_what_check_leaves)
{
	rng_state = 0x2545f4914f6cdd1dULL + (uint64_t)_i;
	for (int round = 0; round < 400; round++) {
		struct strat_params p = rng_params((enum strat_kind)_i);
		struct strat_state st = { 0, 0, 0 };
		int64_t now = 1700000000000LL + rng_below(1000000);
		int64_t cap = strat_used(&st, &p, now), lo = 0, hi;

		ck_assert_int_eq(cap, 0); /* fresh */
		strat_book(&st, &p, now, rng_below(3 * (p.amount < 40 ? p.amount : 40) + 1));
		now += rng_below(2) ? 0 : rng_below(p.window_ms);
		strat_book(&st, &p, now, 1 + rng_below(5));
		now += rng_below(3) == 0 ? 0 : rng_below(2 * p.window_ms);
		hi = capacity(&p);
		cap = hi;
		while (lo < hi) {
			int64_t mid = lo + (hi - lo + 1) / 2;
			if (strat_check(&st, &p, now, mid, 0).allowed)
				lo = mid;
			else
				hi = mid - 1;
		}
		ck_assert_msg(strat_used(&st, &p, now) == cap - lo,
			      "%s round %d: used %lld, check leaves %lld of %lld",
			      strat_kind_name(p.kind), round, (long long)strat_used(&st, &p, now),
			      (long long)lo, (long long)cap);
		/* and with a floor left untouched */
		{
			int64_t fl = rng_below(cap + 1), flo = 0, fhi = cap - fl;
			while (flo < fhi) {
				int64_t mid = flo + (fhi - flo + 1) / 2;
				if (strat_check(&st, &p, now, mid, fl).allowed)
					flo = mid;
				else
					fhi = mid - 1;
			}
			ck_assert_msg(strat_left(&st, &p, now, fl) == flo,
				      "%s round %d floor %lld: left %lld, check leaves %lld",
				      strat_kind_name(p.kind), round, (long long)fl,
				      (long long)strat_left(&st, &p, now, fl), (long long)flo);
		}
	}
}
END_TEST

/* strat_full_in is what strat_check of the whole capacity says, however it is worked out. */
START_TEST(test_full_in_is_the_whole_capacitys_wait)
{
	rng_state = 0x853c49e6748fea9bULL + (uint64_t)_i;
	for (int round = 0; round < 400; round++) {
		struct strat_params p = rng_params((enum strat_kind)_i);
		struct strat_state st = { 0, 0, 0 };
		int64_t now = 1700000000000LL + rng_below(1000000), cap;
		struct strat_result r;

		for (int step = 0; step < 4; step++) {
			strat_book(&st, &p, now, rng_below(4) == 0 ? 50 * p.amount : rng_below(40));
			now += rng_below(3) == 0 ? 0 : rng_below(2 * p.window_ms);
			cap = capacity(&p);
			r = strat_check(&st, &p, now, cap, 0);
			ck_assert_msg(strat_full_in(&st, &p, now) ==
					  (r.allowed ? 0 : r.retry_after_ms),
				      "%s round %d step %d: full in %lld, check says %lld",
				      strat_kind_name(p.kind), round, step,
				      (long long)strat_full_in(&st, &p, now),
				      (long long)(r.allowed ? 0 : r.retry_after_ms));
		}
	}
}
END_TEST

/*
 * What a reply's reset_ms is defined as (proto/PROTOCOL.md, "What is left"):
 * the ms until the limit would admit its whole capacity again if nothing
 * more were taken. A model of each kind kept from the bookings alone (never
 * the state's fields) says when that is:
 * - fixed window: the end of the window when it counts anything;
 * - sliding window: when the weighted count reaches 0, the end of the next
 *   window when the current one counts anything, else the end of this one
 *   when the previous one does;
 * - session window: the session's end (its first booking + the window);
 * - token and leaky bucket: level / rate, the level kept exactly (in
 *   1/window_ms milli-units) and drained at amount per window.
 */
struct reset_model {
	int64_t win_start, cur, prev; /* windows: the window counted and its counts */
	int64_t sess_start, sess_n;   /* session: its start and count */
	int64_t level, level_at;      /* buckets: level * 1000 * window_ms, at */
};

static void reset_model_roll(struct reset_model *m, const struct strat_params *p, int64_t now)
{
	int64_t w = p->window_ms, start = now / w * w;
	int64_t drain = (now - m->level_at) * p->amount * 1000;

	if (start != m->win_start) {
		m->prev = start - m->win_start == w ? m->cur : 0;
		m->cur = 0;
		m->win_start = start;
	}
	if (m->sess_n > 0 && now >= m->sess_start + w)
		m->sess_n = 0;
	m->level = m->level > drain ? m->level - drain : 0;
	m->level_at = now;
}

static void reset_model_book(struct reset_model *m, const struct strat_params *p, int64_t now,
			     int64_t n)
{
	reset_model_roll(m, p, now);
	m->cur += n;
	if (m->sess_n == 0)
		m->sess_start = now;
	m->sess_n += n;
	m->level += n * 1000 * p->window_ms;
}

static int64_t reset_model_ms(struct reset_model *m, const struct strat_params *p, int64_t now)
{
	int64_t w = p->window_ms, rate = p->amount * 1000;

	reset_model_roll(m, p, now);
	switch (p->kind) {
	case STRAT_FIXED_WINDOW: return m->cur > 0 ? m->win_start + w - now : 0;
	case STRAT_SLIDING_WINDOW:
		return m->cur > 0    ? m->win_start + 2 * w - now
		       : m->prev > 0 ? m->win_start + w - now
				     : 0;
	case STRAT_SESSION_WINDOW: return m->sess_n > 0 ? m->sess_start + w - now : 0;
	default: return (m->level + rate - 1) / rate;
	}
}

START_TEST(test_full_in_is_the_definition)
{
	rng_state = 0x2545f4914f6cdd1dULL + (uint64_t)_i;
	for (int round = 0; round < 300; round++) {
		struct strat_params p = { .kind = (enum strat_kind)_i,
					  .amount = 1 + rng_below(50),
					  .window_ms = 1 + rng_below(60000) };
		struct strat_state st = { 0, 0, 0 };
		int64_t now = 1700000000000LL + rng_below(1000000);
		struct reset_model m = { .win_start = now / p.window_ms * p.window_ms,
					 .level_at = now };

		if (rng_below(2) && (p.kind == STRAT_TOKEN_BUCKET || p.kind == STRAT_LEAKY_BUCKET))
			p.burst = 1 + rng_below(80);
		for (int step = 0; step < 16; step++) {
			int64_t n = 1 + rng_below(capacity(&p));

			now += rng_below(4) == 0 ? 0 : rng_below(p.window_ms + p.window_ms / 2 + 1);
			if (strat_check(&st, &p, now, n, 0).allowed) {
				strat_book(&st, &p, now, n);
				reset_model_book(&m, &p, now, n);
			}
			ck_assert_msg(strat_full_in(&st, &p, now) == reset_model_ms(&m, &p, now),
				      "%s %lld/%lld burst %lld round %d step %d: full in %lld, "
				      "the definition says %lld",
				      strat_kind_name(p.kind), (long long)p.amount,
				      (long long)p.window_ms, (long long)p.burst, round, step,
				      (long long)strat_full_in(&st, &p, now),
				      (long long)reset_model_ms(&m, &p, now));
		}
	}
}
END_TEST

static Suite *strategy_suite(void)
{
	Suite *s = suite_create("strategy");
	TCase *tv = tcase_create("vectors");
	TCase *tp = tcase_create("properties");

	tcase_add_test(tv, test_enough_cases);
	if (n_cases > 0)
		tcase_add_loop_test(tv, test_vector, 0, n_cases);
	tcase_add_test(tp, test_kind_names);
	tcase_add_test(tp, test_unknown_kind);
	tcase_add_test(tp, test_params_clamped);
	tcase_add_loop_test(tp, test_random_exact, 0, STRAT__COUNT);
	tcase_add_loop_test(tp, test_used_replays, 0, STRAT__COUNT);
	tcase_add_loop_test(tp, test_used_is_what_check_leaves, 0, STRAT__COUNT);
	tcase_add_loop_test(tp, test_full_in_is_the_whole_capacitys_wait, 0, STRAT__COUNT);
	tcase_add_loop_test(tp, test_full_in_is_the_definition, 0, STRAT__COUNT);
	tcase_set_timeout(tp, 60);
	suite_add_tcase(s, tv);
	suite_add_tcase(s, tp);
	return s;
}

int main(void)
{
	const char *dir = getenv("STRAT_VECTORS");
	SRunner *sr;
	int failed;

	if (dir == NULL || *dir == '\0')
		dir = "tests/vectors/strategy";
	for (int k = 0; k < STRAT__COUNT; k++)
		load_kind(dir, k);
	sr = srunner_create(strategy_suite());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	vec_free(cases, n_cases);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * check_adaptive.c - unit tests for daemon/strategy/adaptive.c: every case
 * of tests/vectors/adaptive/adaptive.jsonl replayed through adapt_apply,
 * adapt_amount, adapt_scale and adapt_ttl_ms (the Lua replays the same file
 * in tests/integ/test_lua_vectors.py), plus properties: for random outcome
 * sequences the amount stays in [floor, ceil], drops at most once per
 * interval, and rises by at most one step per interval.
 *
 * The vector file is tests/vectors/adaptive/adaptive.jsonl relative to the
 * working directory (make test-unit runs from the repo root), or
 * $ADAPT_VECTORS.
 */

#include "adaptive.h"

#include "vector_file.h"

#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIN_CASES 15

static json_t **cases;
static int n_cases;

static struct adapt_params params_of(const json_t *c)
{
	const json_t *p = json_object_get(c, "params");

	return (struct adapt_params){ .ceil = jint(p, "ceil", 0),
				      .floor = jint(p, "floor", 0),
				      .factor = jint(p, "factor", 0),
				      .step = jint(p, "step", 0),
				      .interval_ms = jint(p, "interval_ms", 0) };
}

static struct adapt_state state_of(const json_t *o)
{
	return (struct adapt_state){ jint(o, "amt", -1), jint(o, "td", -1), jint(o, "tc", -1),
				     jint(o, "tl", -1) };
}

START_TEST(test_vector)
{
	const json_t *c = cases[_i];
	const char *name = json_string_value(json_object_get(c, "name"));
	struct adapt_params p = params_of(c);
	struct adapt_state st = state_of(json_object_get(c, "state"));
	const json_t *steps = json_object_get(c, "steps"), *step;
	size_t i;

	ck_assert_msg(json_array_size(steps) > 0, "%s: no steps", name);
	json_array_foreach (steps, i, step) {
		const char *op = json_string_value(json_object_get(step, "op"));
		const json_t *exp = json_object_get(step, "expect");
		char what[256];

		snprintf(what, sizeof(what), "%s step %zu", name, i);
		ck_assert_msg(op != NULL, "%s: no op", what);
		if (strcmp(op, "apply") == 0) {
			const char *o = json_string_value(json_object_get(step, "outcome"));
			int oc = adapt_outcome_parse(o);
			struct adapt_state want = state_of(json_object_get(exp, "state"));
			bool changed;

			ck_assert_msg(oc >= 0, "%s: outcome %s", what, o ? o : "(none)");
			changed =
			    adapt_apply(&st, &p, jint(step, "now", 0), (enum adapt_outcome)oc);
			ck_assert_msg(changed == json_is_true(json_object_get(exp, "changed")),
				      "%s: changed %d", what, changed);
			ck_assert_msg(st.amt == want.amt && st.td == want.td && st.tc == want.tc &&
					  st.tl == want.tl,
				      "%s: state {%lld,%lld,%lld,%lld}, want {%lld,%lld,%lld,%lld}",
				      what, (long long)st.amt, (long long)st.td, (long long)st.tc,
				      (long long)st.tl, (long long)want.amt, (long long)want.td,
				      (long long)want.tc, (long long)want.tl);
		} else if (strcmp(op, "amount") == 0) {
			ck_assert_msg(adapt_amount(&st, &p) == json_integer_value(exp),
				      "%s: amount %lld, want %lld", what,
				      (long long)adapt_amount(&st, &p),
				      (long long)json_integer_value(exp));
		} else if (strcmp(op, "scale") == 0) {
			int64_t got = adapt_scale(jint(step, "v", 0), jint(step, "amt", 0),
						  jint(step, "ceil", 0));
			ck_assert_msg(got == json_integer_value(exp), "%s: scale %lld, want %lld",
				      what, (long long)got, (long long)json_integer_value(exp));
		} else if (strcmp(op, "ttl") == 0) {
			ck_assert_msg(adapt_ttl_ms(&p) == json_integer_value(exp), "%s: ttl %lld",
				      what, (long long)adapt_ttl_ms(&p));
		} else {
			ck_abort_msg("%s: unknown op %s", what, op);
		}
	}
}
END_TEST

START_TEST(test_enough_cases)
{
	ck_assert_msg(n_cases >= MIN_CASES, "%d adaptive vector cases", n_cases);
}
END_TEST

START_TEST(test_outcome_names)
{
	ck_assert_int_eq(adapt_outcome_parse("ok"), ADAPT_OK);
	ck_assert_int_eq(adapt_outcome_parse("limited"), ADAPT_LIMITED);
	ck_assert_int_eq(adapt_outcome_parse("error"), ADAPT_ERROR);
	ck_assert_int_eq(adapt_outcome_parse("OK"), -1);
	ck_assert_int_eq(adapt_outcome_parse("429"), -1);
	ck_assert_int_eq(adapt_outcome_parse(""), -1);
	ck_assert_int_eq(adapt_outcome_parse(NULL), -1);
}
END_TEST

/* Random outcomes: the amount stays in range, falls at most once per
 * interval and rises at most one step per interval. */
START_TEST(test_random_bounds)
{
	struct adapt_params p = { .ceil = 60000,
				  .floor = 1000 + _i * 500,
				  .factor = 500 + _i * 40,
				  .step = 700 + _i * 300,
				  .interval_ms = 250 + _i * 250 };
	struct adapt_state st = { 0, 0, 0, 0 };
	int64_t now = 1000000, last_dec = -1, last_inc = -1;
	unsigned seed = 12345u + (unsigned)_i;
	int k;

	for (k = 0; k < 20000; k++) {
		int64_t before = adapt_amount(&st, &p), after;
		enum adapt_outcome o = (enum adapt_outcome)(1 + rand_r(&seed) % 3);

		now += rand_r(&seed) % 200;
		adapt_apply(&st, &p, now, o);
		after = adapt_amount(&st, &p);
		ck_assert_msg(after >= p.floor && after <= p.ceil, "amount %lld out of range",
			      (long long)after);
		if (after < before) {
			ck_assert_int_eq(o, ADAPT_LIMITED);
			ck_assert_msg(last_dec < 0 || now - last_dec >= p.interval_ms,
				      "two decreases %lld ms apart", (long long)(now - last_dec));
			last_dec = now;
		} else if (after > before) {
			ck_assert_int_eq(o, ADAPT_OK);
			ck_assert_msg(after - before <= p.step, "rose by %lld",
				      (long long)(after - before));
			ck_assert_msg(last_inc < 0 || now - last_inc >= p.interval_ms,
				      "two increases %lld ms apart", (long long)(now - last_inc));
			last_inc = now;
		} else if (o == ADAPT_ERROR) {
			ck_assert_int_eq(after, before);
		}
	}
}
END_TEST

static Suite *adaptive_suite(void)
{
	Suite *s = suite_create("adaptive");
	TCase *tv = tcase_create("vectors");
	TCase *tp = tcase_create("properties");

	tcase_add_test(tv, test_enough_cases);
	if (n_cases > 0)
		tcase_add_loop_test(tv, test_vector, 0, n_cases);
	tcase_add_test(tp, test_outcome_names);
	tcase_add_loop_test(tp, test_random_bounds, 0, 8);
	suite_add_tcase(s, tv);
	suite_add_tcase(s, tp);
	return s;
}

int main(void)
{
	const char *path = getenv("ADAPT_VECTORS");
	SRunner *sr;
	int failed;

	vec_load(path != NULL ? path : "tests/vectors/adaptive/adaptive.jsonl", "check_adaptive",
		 &cases, &n_cases);
	sr = srunner_create(adaptive_suite());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	vec_free(cases, n_cases);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

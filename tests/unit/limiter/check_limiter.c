/*
 * check_limiter.c - unit tests for daemon/limiter/ (the decision, shares, state, left) with explicit `now`.
 *
 * Each test loads one [scope t] through conf_load_string and drives a
 * lim_state through check/book/release/penalize at chosen instants:
 * cluster_concurrency and concurrency rules cap the leases in flight,
 * serialized min_delay runs from completion (an expired lease pushes
 * nothing), send-spaced min_delay runs from admission, quota is a rolling
 * window whose retry_after is exact (passes at now+retry, refuses at
 * now+retry-1), penalties only extend, a refusal books nothing anywhere,
 * the longest wait names the refusal (ties: conf order), classes and
 * floor, token meters overdrawn at release, the fallback divisor, lim_idle
 * and lim_release_books; and what a reload carries over (lim_state_carry):
 * the state of unchanged limits, whatever their place or spelling; a rule
 * changed in place goes on from its usage; another strategy starts fresh.
 * A key's override (lim_override): it tightens, loosens only up to
 * override_max, moves a burst in proportion, paces a serialized scope from
 * its own min_delay, ends at its time, is lifted by lim_reset, keeps a key
 * from being idle, is divided like the conf's limits, and its arithmetic
 * replays tests/vectors/override/override.jsonl (as override.lua does).
 */

#include "limiter.h"

#include "conf.h"

#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HOUR 3600000LL

/* A fallback share: divisor d, rank unknown (rounded down); R: ranked. */
static struct lim_share D(double d) {
	return (struct lim_share){ .div = d, .rank = -1 };
}

static struct lim_share
R(double d, int64_t rank) {
	return (struct lim_share){ .div = d, .rank = rank };
}

static struct conf *cf;
static const struct conf_scope *cs;
static struct lim_state *st;

/* Load "[scope t]" with body; cs and a fresh st describe it. */
static void use(const char *body)
{
	char text[2048];

	snprintf(text, sizeof(text), "[scope t]\n%s", body);
	conf_free(cf);
	lim_state_free(st);
	cf = conf_load_string(text, "t.conf", stderr);
	ck_assert_msg(cf != NULL, "conf rejected:\n%s", text);
	cs = conf_scope_find(cf, "t");
	ck_assert_ptr_nonnull(cs);
	st = lim_state_new(cs);
	ck_assert_ptr_nonnull(st);
}

static void teardown(void)
{
	lim_state_free(st);
	st = NULL;
	conf_free(cf);
	cf = NULL;
	cs = NULL;
}

static const struct conf_class *cls(const char *name)
{
	const struct conf_class *c = conf_class_find(cs, name);

	ck_assert_msg(c != NULL, "no class %s", name);
	return c;
}

static struct lim_decision chk_full(int64_t now, const struct conf_class *c, int64_t cost,
				    int64_t count, struct lim_share div)
{
	struct lim_req rq = { .cls = c, .cost = cost, .count = count };

	return lim_check(st, cs, div, now, &rq);
}

static struct lim_decision chk(int64_t now)
{
	return chk_full(now, NULL, 1, 1, D(1.0));
}

static void book_full(int64_t now, const struct conf_class *c, int64_t cost, struct lim_share div,
		      const char *id)
{
	struct lim_req rq = { .cls = c, .cost = cost, .count = 1 };
	const char *ids[1] = { id };

	ck_assert(lim_book(st, cs, div, now, &rq, ids));
}

/* Check, must admit, then book. */
static void admit_full(int64_t now, const struct conf_class *c, int64_t cost, struct lim_share div,
		       const char *id)
{
	struct lim_decision d = chk_full(now, c, cost, 1, div);

	ck_assert_msg(d.admitted, "at %lld: refused by %s, retry %lld", (long long)now,
		      d.rule ? d.rule : "?", (long long)d.retry_after_ms);
	ck_assert_int_eq(d.retry_after_ms, 0);
	book_full(now, c, cost, div, id);
}

static void admit(int64_t now, const char *id)
{
	admit_full(now, NULL, 1, D(1.0), id);
}

static void refused(struct lim_decision d, const char *rule, int64_t retry)
{
	ck_assert_msg(!d.admitted, "admitted, want refusal by %s", rule);
	ck_assert_ptr_nonnull(d.rule);
	ck_assert_str_eq(d.rule, rule);
	ck_assert_int_eq(d.retry_after_ms, retry);
}

static bool release(int64_t now, const char *id)
{
	return lim_release(st, cs, D(1.0), now, id, NULL, NULL, 0);
}

/*
 * The retry of a refusal at `now` is exact: the same request still
 * refused at now+retry-1 and admitted at now+retry. Returns the retry.
 */
static int64_t exact_full(int64_t now, const struct conf_class *c, int64_t cost,
			  struct lim_share div, const char *rule)
{
	struct lim_decision d = chk_full(now, c, cost, 1, div);
	int64_t r = d.retry_after_ms;

	ck_assert_msg(!d.admitted, "admitted at %lld", (long long)now);
	ck_assert_int_gt(r, 0);
	if (rule != NULL)
		ck_assert_str_eq(d.rule, rule);
	if (r > 1) {
		d = chk_full(now + r - 1, c, cost, 1, div);
		ck_assert_msg(!d.admitted, "retry %lld at %lld not exact: admitted a ms early",
			      (long long)r, (long long)now);
	}
	d = chk_full(now + r, c, cost, 1, div);
	ck_assert_msg(d.admitted, "retry %lld at %lld: still refused by %s (retry %lld)",
		      (long long)r, (long long)now, d.rule ? d.rule : "?",
		      (long long)d.retry_after_ms);
	return r;
}

static int64_t exact(int64_t now, const char *rule)
{
	return exact_full(now, NULL, 1, D(1.0), rule);
}

/* ---- leases in flight ---- */

START_TEST(test_cluster_concurrency)
{
	use("cluster_concurrency = 3\nlease_ttl = 1s\nconcurrency_retry = 25ms\n");
	ck_assert(lim_tracks_leases(cs));
	ck_assert(!lim_serialized(cs));
	admit(0, "a");
	admit(10, "b");
	admit(20, "c");
	/* full: a short poll, bounded by the earliest deadline */
	refused(chk(30), PLAN_RULE_CLUSTER, 25);
	refused(chk(995), PLAN_RULE_CLUSTER, 5);
	ck_assert(release(40, "b"));
	ck_assert(!release(41, "b")); /* idempotent */
	ck_assert(!release(41, "nope"));
	admit(40, "d");
	refused(chk(40), PLAN_RULE_CLUSTER, 25);
	/* a's deadline is 1000: at 1000 its slot is free, and releasing it is a no-op */
	refused(chk(999), PLAN_RULE_CLUSTER, 1);
	ck_assert(chk(1000).admitted);
	ck_assert(!release(1000, "a"));
	/* more at once than the cap: never */
	refused(chk_full(1000, NULL, 1, 4, D(1.0)), PLAN_RULE_CLUSTER, -1);
}
END_TEST

START_TEST(test_concurrency_rule)
{
	use("rule = concurrency 2\nlease_ttl = 10s\n");
	ck_assert(lim_tracks_leases(cs));
	admit(0, "a");
	admit(0, "b");
	refused(chk(1), "concurrency 2", 25);
	ck_assert(release(2, "a"));
	admit(2, "c");
	refused(chk_full(3, NULL, 1, 3, D(1.0)), "concurrency 2", -1);
}
END_TEST

START_TEST(test_book_count)
{
	static const char *const ids[] = { "x1", "x2", "x3" };
	struct lim_req rq = { .cls = NULL, .cost = 1, .count = 3 };
	int i;

	use("cluster_concurrency = 4\nquota = 5/1s\n");
	ck_assert(lim_check(st, cs, D(1.0), 0, &rq).admitted);
	ck_assert(lim_book(st, cs, D(1.0), 0, &rq, ids));
	ck_assert_uint_eq(st->nleases, 3);
	ck_assert_uint_eq(st->quota_n, 3);
	/* two more would pass the cluster cap; the quota has room for two */
	refused(chk_full(1, NULL, 1, 2, D(1.0)), PLAN_RULE_CLUSTER, 25);
	admit(1, "y");
	/* both refuse two more: the quota's wait (4 instants, 5 max) is longer */
	refused(chk_full(2, NULL, 1, 2, D(1.0)), "quota 5/1s", 998);
	for (i = 0; i < 3; i++)
		ck_assert(release(3, ids[i]));
	refused(chk_full(3, NULL, 1, 2, D(1.0)), "quota 5/1s", 997);
	ck_assert(chk_full(3, NULL, 1, 1, D(1.0)).admitted);
}
END_TEST

/* ---- min_delay ---- */

START_TEST(test_serialized_min_delay)
{
	use("min_delay = 100ms\nlease_ttl = 1s\nconcurrency_retry = 25ms\n");
	ck_assert(lim_serialized(cs));
	ck_assert(lim_tracks_leases(cs));
	admit(0, "a");
	/* one at a time: while a is in flight, poll */
	refused(chk(10), PLAN_RULE_MIN_DELAY, 25);
	/* released at 50: the next one from 150, exactly */
	ck_assert(release(50, "a"));
	refused(chk(50), PLAN_RULE_MIN_DELAY, 100);
	ck_assert_int_eq(exact(50, PLAN_RULE_MIN_DELAY), 100);
	admit(150, "b");
	/* b expires at 1150 without a release: free at once, nothing pushed */
	refused(chk(1149), PLAN_RULE_MIN_DELAY, 1);
	ck_assert(chk(1150).admitted);
	ck_assert(!release(1200, "b"));
	ck_assert(chk(1200).admitted);
	ck_assert_int_eq(st->next_at, 150);
}
END_TEST

START_TEST(test_send_spaced_min_delay)
{
	use("cluster_concurrency = 2\nmin_delay = 100ms\nlease_ttl = 10s\n");
	ck_assert(!lim_serialized(cs));
	admit(0, "a");
	/* spaced from the admission, not the release */
	refused(chk(50), PLAN_RULE_MIN_DELAY, 50);
	ck_assert_int_eq(exact(50, PLAN_RULE_MIN_DELAY), 50);
	admit(100, "b");
	ck_assert(release(150, "a"));
	/* the release pushed nothing: next_at is still 200 */
	refused(chk(199), PLAN_RULE_MIN_DELAY, 1);
	admit(200, "c");
	/* two in flight: the cap refuses once the spacing has passed */
	/* both refuse: the longer wait names it */
	refused(chk(201), PLAN_RULE_MIN_DELAY, 99);
	refused(chk(290), PLAN_RULE_CLUSTER, 25);
	/* the spacing has passed: the cap alone refuses */
	refused(chk(300), PLAN_RULE_CLUSTER, 25);
}
END_TEST

/* ---- quota ---- */

START_TEST(test_quota)
{
	use("quota = 3/1s\n");
	ck_assert(!lim_tracks_leases(cs));
	admit(0, "");
	admit(100, "");
	admit(200, "");
	refused(chk(300), "quota 3/1s", 700);
	ck_assert_int_eq(exact(300, "quota 3/1s"), 700);
	admit(1000, ""); /* instants 100, 200, 1000 */
	refused(chk(1050), "quota 3/1s", 50);
	/* two at once: 100 has left, wait until 200 leaves too */
	refused(chk_full(1100, NULL, 1, 2, D(1.0)), "quota 3/1s", 100);
	refused(chk_full(1100, NULL, 1, 4, D(1.0)), "quota 3/1s", -1);
}
END_TEST

/*
 * Admit as early as allowed, over many windows (the ring wraps and
 * grows), and check against a model: never more than Q admissions in any
 * window of W, and every retry exact.
 */
START_TEST(test_quota_model)
{
	enum { Q = 5, W = 100, NADM = 400 };
	int64_t at[NADM];
	int64_t now = 0;
	unsigned seed = 12345;
	int n = 0, i;

	use("quota = 5/100ms\n");
	while (n < NADM) {
		struct lim_decision d = chk(now);

		if (d.admitted) {
			book_full(now, NULL, 1, D(1.0), "");
			at[n++] = now;
			seed = seed * 1103515245u + 12345u;
			now += (seed >> 16) % 40; /* 0..39 ms, bursts included */
			continue;
		}
		ck_assert_str_eq(d.rule, "quota 5/100ms");
		now += exact(now, "quota 5/100ms");
	}
	for (i = Q; i < n; i++)
		ck_assert_msg(at[i] - at[i - Q] >= W, "%d admissions within %lld ms", Q + 1,
			      (long long)(at[i] - at[i - Q]));
}
END_TEST

/* ---- penalty ---- */

START_TEST(test_penalty_extends_only)
{
	use("max_concurrent = 0\n");
	ck_assert(lim_idle(st, cs, 0));
	lim_penalize(st, 0, 1000);
	refused(chk(0), PLAN_RULE_PENALTY, 1000);
	lim_penalize(st, 100, 500); /* until 600: shorter, ignored */
	refused(chk(500), PLAN_RULE_PENALTY, 500);
	lim_penalize(st, 600, 0);
	lim_penalize(st, 600, -5);
	refused(chk(600), PLAN_RULE_PENALTY, 400);
	lim_penalize(st, 600, 1000); /* until 1600: longer, taken */
	ck_assert_int_eq(exact(700, PLAN_RULE_PENALTY), 900);
	ck_assert(!lim_idle(st, cs, 1599));
	ck_assert(lim_idle(st, cs, 1600));
}
END_TEST

/* ---- all or nothing, naming ---- */

START_TEST(test_refusal_books_nothing)
{
	int i;

	use("quota = 1/1h\n"
	    "rule a = requests fixed-window 10/1h\n"
	    "rule b = requests fixed-window 3/1h\n"
	    "class both = a b\n"
	    "class onlya = a\n");
	for (i = 0; i < 5; i++)
		refused(chk_full(10 + i, cls("both"), 5, 1, D(1.0)), "requests fixed-window 3/1h",
			-1);
	/* nothing was booked in a, nor in the quota */
	ck_assert_uint_eq(st->quota_n, 0);
	admit_full(20, cls("onlya"), 10, D(1.0), "");
	/* a is full now, the quota too; b was never touched */
	refused(chk_full(30, cls("onlya"), 1, 1, D(1.0)), "quota 1/1h", HOUR - 10);
}
END_TEST

START_TEST(test_longest_wait_names)
{
	use("rule = requests fixed-window 1/1s\n"
	    "rule = requests fixed-window 1/10s\n");
	admit(0, "");
	refused(chk(100), "requests fixed-window 1/10s", 9900);
	lim_penalize(st, 100, 20000);
	refused(chk(100), PLAN_RULE_PENALTY, 20000);
	refused(chk(15000), PLAN_RULE_PENALTY, 5100);
	/* after the penalty, a shorter one: the rule's wait is longer */
	admit(20100, "");
	lim_penalize(st, 20100, 500);
	refused(chk(20200), "requests fixed-window 1/10s", 9800);
}
END_TEST

START_TEST(test_never_beats_any_wait)
{
	use("quota = 1/1h\nrule = requests fixed-window 2/1h\n");
	lim_penalize(st, 0, 5000);
	refused(chk_full(0, NULL, 1, 2, D(1.0)), "quota 1/1h", -1);
	/* a cost the rule can never hold: -1, named after the rule */
	refused(chk_full(0, NULL, 3, 1, D(1.0)), "requests fixed-window 2/1h", -1);
}
END_TEST

START_TEST(test_ties_conf_order)
{
	/* both rules overdrawn by one booking of 2: both free at the window's end */
	use("rule = requests fixed-window 1/1s\nrule = requests fixed-window 2/1s\n");
	book_full(0, NULL, 2, D(1.0), "");
	refused(chk(100), "requests fixed-window 1/1s", 900);

	use("rule = requests fixed-window 2/1s\nrule = requests fixed-window 1/1s\n");
	book_full(0, NULL, 2, D(1.0), "");
	refused(chk(100), "requests fixed-window 2/1s", 900);
}
END_TEST

START_TEST(test_tie_quota_first)
{
	use("quota = 1/1s\nrule = requests fixed-window 1/1s\n");
	admit(0, "");
	refused(chk(100), "quota 1/1s", 900);
}
END_TEST

/* ---- classes ---- */

/* Does rule i apply to class c: is it in c's compiled plan? */
static bool applies(size_t i, const struct conf_class *c)
{
	const struct conf_plan *pl = conf_plan_of(cs, c);

	for (size_t k = 0; k < pl->nrules; k++)
		if (pl->rules[k] == i)
			return true;
	return false;
}

START_TEST(test_classes_floor)
{
	int i;

	use("rule shared = requests fixed-window 10/1h\n"
	    "rule = requests fixed-window 100/1h\n"
	    "class low = shared floor=4\n"
	    "class high = shared\n");
	ck_assert(applies(0, cls("low")));
	ck_assert(!applies(0, NULL));
	ck_assert(applies(1, NULL));
	ck_assert(applies(1, cls("high")));
	for (i = 0; i < 6; i++)
		admit_full(i, cls("low"), 1, D(1.0), "");
	/* low may not take the last 4 */
	refused(chk_full(10, cls("low"), 1, 1, D(1.0)), "requests fixed-window 10/1h", HOUR - 10);
	for (i = 0; i < 4; i++)
		admit_full(20 + i, cls("high"), 1, D(1.0), "");
	refused(chk_full(30, cls("high"), 1, 1, D(1.0)), "requests fixed-window 10/1h", HOUR - 30);
	/* no class: only the unnamed rule (10 of 100 used) */
	admit_full(40, NULL, 90, D(1.0), "");
	refused(chk_full(50, NULL, 1, 1, D(1.0)), "requests fixed-window 100/1h", HOUR - 50);
}
END_TEST

START_TEST(test_floor_bucket_exact)
{
	use("rule r = requests token-bucket 10/1s\nclass low = r floor=5\nclass high = r\n");
	admit_full(0, cls("high"), 5, D(1.0), "");
	/* 5 left, low needs 1 + floor 5: one token refills in 100ms */
	ck_assert_int_eq(exact_full(0, cls("low"), 1, D(1.0), "requests token-bucket 10/1s"), 100);
	admit_full(0, cls("high"), 5, D(1.0), "");
	ck_assert_int_eq(exact_full(0, cls("high"), 1, D(1.0), NULL), 100);
	ck_assert_int_eq(exact_full(0, cls("low"), 1, D(1.0), NULL), 600);
}
END_TEST

/* ---- token meters ---- */

START_TEST(test_tokens_overdraw)
{
	static const struct meter_tokens tk[] = { { "input", 300 }, { "output", 200 } };
	static const struct meter_tokens t99[] = { { "x", 99 } };
	static const struct meter_tokens t1[] = { { "x", 1 } };

	use("rule = tokens fixed-window 100/1h\n");
	ck_assert(lim_release_books(cs, NULL));
	admit(0, "");
	lim_release(st, cs, D(1.0), 5, "", NULL, t99, 1);
	admit(6, ""); /* 1 left: not overdrawn */
	lim_release(st, cs, D(1.0), 7, "", NULL, t1, 1);
	refused(chk(8), "tokens fixed-window 100/1h", HOUR - 8);
	/* a window later it passes; then a big report overdraws it */
	admit(HOUR, "");
	lim_release(st, cs, D(1.0), HOUR + 1, "", NULL, tk, 2);
	ck_assert_int_eq(exact(HOUR + 2, "tokens fixed-window 100/1h"), HOUR - 2);
}
END_TEST

START_TEST(test_tokens_key_bucket)
{
	static const struct meter_tokens out[] = { { "output", 1000 } };
	static const struct meter_tokens in[] = { { "output", 5 }, { "input", 30 } };

	use("rule = tokens.input token-bucket 10/1s\n");
	lim_release(st, cs, D(1.0), 0, "", NULL, out, 1);
	ck_assert(chk(0).admitted); /* other meters charge nothing */
	lim_release(st, cs, D(1.0), 0, "", NULL, in, 2);
	/* 30 from a bucket of 10: the debt is capped at one window (-10) */
	ck_assert_int_eq(exact(0, "tokens.input token-bucket 10/1s"), 1001);
}
END_TEST

/* ---- fallback divisor ---- */

START_TEST(test_divisor_params)
{
	struct strat_params p;
	int64_t amount = 0, burst = 0;

	use("rule = requests token-bucket 100/1s burst=40\nrule = requests fixed-window 10/1s\n");
	p = lim_rule_params(&cs->rules[0], D(1.0));
	ck_assert_int_eq(p.amount, 100);
	ck_assert_int_eq(p.burst, 40);
	p = lim_rule_params(&cs->rules[0], D(4.0));
	ck_assert_int_eq(p.amount, 25);
	ck_assert_int_eq(p.burst, 10);
	ck_assert_int_eq(p.window_ms, 1000);
	p = lim_rule_params(&cs->rules[0], D(1000.0)); /* unranked: rounded down */
	ck_assert_int_eq(p.amount, 0);
	ck_assert_int_eq(p.burst, 0);
	p = lim_rule_params(&cs->rules[0], D(0.5)); /* below 1: no change */
	ck_assert_int_eq(p.amount, 100);
	ck_assert_int_eq(p.burst, 40);
	p = lim_rule_params(&cs->rules[1], D(3.0)); /* no burst: the amount's */
	ck_assert_int_eq(p.amount, 3);
	ck_assert_int_eq(p.burst, 3);
	/* ranked: the remainder goes to the first pods, the shares add up */
	for (int64_t r = 0; r < 3; r++) {
		p = lim_rule_params(&cs->rules[0], R(3.0, r));
		ck_assert_int_eq(p.amount, r == 0 ? 34 : 33);
		ck_assert_int_eq(p.burst, r == 0 ? 14 : 13);
		amount += p.amount;
		burst += p.burst;
	}
	ck_assert_int_eq(amount, 100);
	ck_assert_int_eq(burst, 40);
	for (int64_t v = 0; v < 50; v++) {
		int64_t sum = 0;
		for (int64_t r = 0; r < 7; r++)
			sum += lim_share_of(v, R(7.0, r));
		ck_assert_int_eq(sum, v);
	}
}
END_TEST

START_TEST(test_divisor_limits)
{
	struct lim_decision d;

	use("cluster_concurrency = 8\nlease_ttl = 10s\n");
	admit_full(0, NULL, 1, D(4.0), "a");
	admit_full(0, NULL, 1, D(4.0), "b");
	refused(chk_full(0, NULL, 1, 1, D(4.0)), PLAN_RULE_CLUSTER, 25);
	ck_assert(chk_full(0, NULL, 1, 1, D(1.0)).admitted);

	/* a cap of 2 over 3 pods: 1, 1 and 0, never 3 in all */
	use("cluster_concurrency = 2\nlease_ttl = 10s\n");
	admit_full(0, NULL, 1, R(3.0, 1), "a");
	refused(chk_full(0, NULL, 1, 1, R(3.0, 1)), PLAN_RULE_CLUSTER, 25);
	use("cluster_concurrency = 2\nlease_ttl = 10s\n");
	d = chk_full(0, NULL, 1, 1, R(3.0, 2)); /* a share of 0: a wait, said so */
	refused(d, PLAN_RULE_CLUSTER, 25);
	ck_assert(d.share_short);
	ck_assert(chk_full(0, NULL, 1, 1, R(3.0, 0)).admitted);

	use("cluster_concurrency = 3\n");
	d = chk_full(0, NULL, 1, 1, D(10.0)); /* unranked 3/10: 0, a wait */
	refused(d, PLAN_RULE_CLUSTER, 25);
	ck_assert(d.share_short);
	refused(chk_full(0, NULL, 1, 4, D(10.0)), PLAN_RULE_CLUSTER, -1); /* above the whole */

	use("quota = 10/1s\n");
	admit_full(0, NULL, 1, D(4.0), "");
	admit_full(1, NULL, 1, D(4.0), "");
	refused(chk_full(2, NULL, 1, 1, D(4.0)), "quota 10/1s", 998);

	use("quota = 1/1s\n");
	d = chk_full(2, NULL, 1, 1, D(4.0));
	refused(d, "quota 1/1s", 1000);
	ck_assert(d.share_short);
	ck_assert(chk_full(2, NULL, 1, 1, R(4.0, 0)).admitted);

	use("rule = requests fixed-window 10/1h\n");
	admit_full(0, NULL, 1, D(4.0), "");
	admit_full(0, NULL, 1, D(4.0), "");
	refused(chk_full(0, NULL, 1, 1, D(4.0)), "requests fixed-window 10/1h", HOUR);
	d = chk_full(0, NULL, 1, 1, D(40.0)); /* a share of nothing: a window's wait */
	refused(d, "requests fixed-window 10/1h", HOUR);
	ck_assert(d.share_short);
}
END_TEST

START_TEST(test_divisor_min_delay)
{
	/* send-spaced: min_delay multiplied */
	use("cluster_concurrency = 5\nmin_delay = 100ms\n");
	admit_full(0, NULL, 1, D(4.0), "a");
	ck_assert(lim_release(st, cs, D(4.0), 10, "a", NULL, NULL, 0));
	ck_assert_int_eq(exact_full(10, NULL, 1, D(4.0), PLAN_RULE_MIN_DELAY), 390);

	/* serialized: from the release, whole: one pod (the owner) serves it */
	use("min_delay = 100ms\n");
	admit_full(0, NULL, 1, D(2.5), "a");
	ck_assert(lim_release(st, cs, D(2.5), 0, "a", NULL, NULL, 0));
	ck_assert_int_eq(exact_full(0, NULL, 1, D(2.5), PLAN_RULE_MIN_DELAY), 100);
}
END_TEST

/* A share in fallback: ranked among pods, the key's turn, down since out. */
static struct lim_share T(int64_t pods, int64_t rank, int64_t turn, int64_t out) {
	return (struct lim_share){
		.div = (double)pods, .rank = rank, .turn = turn, .pods = pods, .out_since = out
	};
}

START_TEST(test_turn_spreads_remainders)
{
	/* a cap of 4 over 3 pods: 2, 1, 1, the 2 at the pod the key's turn names */
	for (int64_t turn = 0; turn < 6; turn++) {
		int64_t sum = 0;
		for (int64_t r = 0; r < 3; r++) {
			int64_t v = lim_share_of(4, T(3, r, turn, 0));
			ck_assert_int_eq(v, r == turn % 3 ? 2 : 1);
			sum += v;
		}
		ck_assert_int_eq(sum, 4);
	}
	for (int64_t v = 0; v < 30; v++)
		for (int64_t turn = 0; turn < 9; turn++) {
			int64_t sum = 0;
			for (int64_t r = 0; r < 7; r++)
				sum += lim_share_of(v, T(7, r, turn, 0));
			ck_assert_int_eq(sum, v);
		}
}
END_TEST

START_TEST(test_serialized_owner)
{
	struct lim_decision d;
	int64_t owners = 0;

	/* one owner of every key among the ranked pods; the others wait, said so */
	for (int64_t turn = 0; turn < 5; turn++) {
		owners = 0;
		for (int64_t r = 0; r < 3; r++)
			owners += lim_owner(T(3, r, turn, 1));
		ck_assert_int_eq(owners, 1);
		ck_assert(lim_owner(T(3, turn % 3, turn, 1)));
	}
	ck_assert(lim_owner(D(1.0)));	     /* alone, or the whole limit */
	ck_assert(!lim_owner(D(3.0)));	     /* unranked: born in the outage */
	ck_assert(lim_owner(T(1, 0, 7, 1))); /* the only pod ranked */

	use("min_delay = 500ms\nlease_ttl = 2s\n");
	d = chk_full(5000, NULL, 1, 1, T(3, 1, 0, 1000));
	refused(d, PLAN_RULE_OWNER, 25);
	ck_assert(d.slot);
	/* the owner: a lease another pod took through Redis may be held until
	 * lease_ttl after Redis stopped answering (polled) */
	d = chk_full(1500, NULL, 1, 1, T(3, 0, 0, 1000));
	refused(d, PLAN_RULE_MIN_DELAY, 25);
	d = chk_full(2990, NULL, 1, 1, T(3, 0, 0, 1000));
	refused(d, PLAN_RULE_MIN_DELAY, 10);
	ck_assert(chk_full(3000, NULL, 1, 1, T(3, 0, 0, 1000)).admitted);
	/* ... unless its own release pushed the pacing past the outage's start */
	admit_full(0, NULL, 1, D(1.0), "a");
	ck_assert(lim_release(st, cs, D(1.0), 600, "a", NULL, NULL, 0)); /* next 1100 */
	refused(chk_full(1050, NULL, 1, 1, T(3, 0, 0, 1000)), PLAN_RULE_MIN_DELAY, 50);
	ck_assert(chk_full(1100, NULL, 1, 1, T(3, 0, 0, 1000)).admitted);
	/* alone at the last heartbeat: no other pod's lease to wait out */
	use("min_delay = 500ms\nlease_ttl = 2s\n");
	ck_assert(chk_full(1500, NULL, 1, 1, T(1, 0, 5, 1000)).admitted);
	/* Redis up (no out_since): every pod, as before */
	ck_assert(chk_full(1100, NULL, 1, 1, T(3, 1, 0, 0)).admitted);
}
END_TEST

START_TEST(test_spend_share)
{
	/* quota: the share's instants at the birth, out of the window W later */
	use("quota = 30/1m\n");
	lim_spend_share(st, cs, D(3.0), 1000);
	refused(chk_full(1000, NULL, 1, 1, D(3.0)), "quota 30/1m", 60000);
	ck_assert(chk_full(61000, NULL, 1, 1, D(3.0)).admitted);
	lim_spend_share(st, cs, D(3.0), 1000); /* again: nothing more */
	ck_assert(chk_full(61000, NULL, 1, 1, D(3.0)).admitted);

	/* a token bucket: empty, refilling at the share's rate */
	use("rule = requests token-bucket 30/3s\n");
	lim_spend_share(st, cs, D(3.0), 0);
	refused(chk_full(0, NULL, 1, 1, D(3.0)), "requests token-bucket 30/3s", 300);
	ck_assert(chk_full(300, NULL, 1, 1, D(3.0)).admitted);

	/* a fixed window: the birth's window full, the next one the share's */
	use("rule = requests fixed-window 9/1s\n");
	lim_spend_share(st, cs, D(3.0), 10500);
	ck_assert(!chk_full(10999, NULL, 1, 1, D(3.0)).admitted);
	for (int i = 0; i < 3; i++)
		admit_full(11000, NULL, 1, D(3.0), "");
	ck_assert(!chk_full(11000, NULL, 1, 1, D(3.0)).admitted);

	/* send-spaced pacing starts at the birth */
	use("cluster_concurrency = 3\nmin_delay = 100ms\n");
	lim_spend_share(st, cs, D(3.0), 50);
	ck_assert_int_eq(exact_full(50, NULL, 1, D(3.0), PLAN_RULE_MIN_DELAY), 300);
}
END_TEST

/* ---- overrides ---- */

static void ovr(int64_t until, int64_t min_delay, const int64_t *amount)
{
	ck_assert(lim_override(st, cs, until, min_delay, amount));
}

START_TEST(test_override_tightens_until_its_end)
{
	static const int64_t one[] = { 1 };

	use("rule = requests fixed-window 5/1m\noverride_max = 2\n");
	ovr(1000, -1, one);
	admit(0, "a");
	refused(chk(1), "requests fixed-window 5/1m", 59999);
	/* ended: the conf's 5 again (1 of them used) */
	admit(1000, "b");
	admit(1000, "c");
	admit(1000, "d");
	admit(1000, "e");
	refused(chk(1000), "requests fixed-window 5/1m", 59000);
}
END_TEST

START_TEST(test_override_loosens_up_to_the_ceiling)
{
	static const int64_t many[] = { 50 };
	int i;

	use("rule = requests fixed-window 5/1m\noverride_max = 2\n");
	ovr(HOUR, -1, many); /* asked 50: 10 is the most override_max = 2 allows */
	for (i = 0; i < 10; i++)
		admit(0, "x");
	refused(chk(0), "requests fixed-window 5/1m", 60000);
	ck_assert_int_eq(lim_which_limit(cs, NULL, 0, lim_key_share(st, cs, D(1.0), 0)), 10);
	/* a fallback share divides the amount in force */
	ck_assert_int_eq(lim_which_limit(cs, NULL, 0, lim_key_share(st, cs, D(2.0), 0)), 5);
	/* reset lifts it */
	lim_reset(st);
	ck_assert_ptr_null(lim_ovr_in_force(st, cs, 0));
	ck_assert_int_eq(lim_which_limit(cs, NULL, 0, lim_key_share(st, cs, D(1.0), 0)), 5);
}
END_TEST

START_TEST(test_override_moves_the_burst)
{
	static const int64_t five[] = { 5 };
	int i;

	/* 10/1s burst 20, amount 5: burst 10 */
	use("rule = requests token-bucket 10/1s burst=20\noverride_max = 1\n");
	ovr(HOUR, -1, five);
	for (i = 0; i < 10; i++)
		admit(0, "x");
	/* refills at 5/s: one unit every 200 ms */
	ck_assert_int_eq(exact_full(0, NULL, 1, D(1.0), "requests token-bucket 10/1s burst=20"),
			 200);
}
END_TEST

START_TEST(test_override_min_delay)
{
	/* serialized: the next one 300 ms after the release, not 1 s */
	use("min_delay = 1s\noverride_max = 4\n");
	ovr(HOUR, 300, NULL);
	admit(0, "a");
	ck_assert(release(10, "a"));
	ck_assert_int_eq(exact_full(10, NULL, 1, D(1.0), PLAN_RULE_MIN_DELAY), 300);
	/* below the floor (1 s / 4): bounded when used */
	use("min_delay = 1s\noverride_max = 4\n");
	ovr(HOUR, 1, NULL);
	admit(0, "a");
	ck_assert(release(0, "a"));
	ck_assert_int_eq(exact_full(0, NULL, 1, D(1.0), PLAN_RULE_MIN_DELAY), 250);
	/* send-spaced, tighter than the conf */
	use("cluster_concurrency = 5\nmin_delay = 100ms\noverride_max = 1\n");
	ovr(HOUR, 700, NULL);
	admit(0, "a");
	ck_assert_int_eq(exact_full(0, NULL, 1, D(1.0), PLAN_RULE_MIN_DELAY), 700);
}
END_TEST

START_TEST(test_override_keeps_the_key)
{
	static const int64_t two[] = { 2 };

	use("rule = requests fixed-window 5/1s\noverride_max = 1\n");
	ck_assert(lim_idle(st, cs, HOUR));
	ovr(3 * HOUR, -1, two);
	ck_assert(!lim_idle(st, cs, 3 * HOUR - 1));
	ck_assert(lim_idle(st, cs, 3 * HOUR));
	/* a scope without override_max never applies one */
	use("rule = requests fixed-window 5/1s\n");
	ovr(HOUR, -1, two);
	ck_assert_ptr_null(lim_ovr_in_force(st, cs, 0));
	admit(0, "a");
	admit(0, "b");
	admit(0, "c");
}
END_TEST

static json_t *ovr_cases;

START_TEST(test_override_vector)
{
	json_t *c = json_array_get(ovr_cases, (size_t)_i), *a = json_object_get(c, "args");
	const char *fn = json_string_value(json_object_get(c, "fn"));
	int64_t x = json_integer_value(json_array_get(a, 0));
	int64_t y = json_integer_value(json_array_get(a, 1));
	int64_t z = json_integer_value(json_array_get(a, 2)), got;

	if (strcmp(fn, "cap") == 0)
		got = lim_ovr_cap(x, y);
	else if (strcmp(fn, "amount") == 0)
		got = lim_ovr_amount(x, y, z);
	else if (strcmp(fn, "delay") == 0)
		got = lim_ovr_delay(x, y, z);
	else if (strcmp(fn, "burst") == 0)
		got = lim_ovr_burst(x, y, z);
	else
		ck_abort_msg("unknown fn %s", fn);
	ck_assert_msg(got == json_integer_value(json_object_get(c, "want")),
		      "%s(%lld, %lld, %lld) = %lld", fn, (long long)x, (long long)y, (long long)z,
		      (long long)got);
}
END_TEST

/* Every line of the vector file, parsed; enough of them to mean something. */
static size_t ovr_load(const char *path)
{
	FILE *f = fopen(path, "r");
	char line[1024];

	ovr_cases = json_array();
	if (f == NULL) {
		fprintf(stderr, "cannot open %s\n", path);
		exit(EXIT_FAILURE);
	}
	while (fgets(line, sizeof(line), f) != NULL) {
		json_t *c = json_loads(line, 0, NULL);
		if (c == NULL) {
			fprintf(stderr, "%s: bad line %s", path, line);
			exit(EXIT_FAILURE);
		}
		json_array_append_new(ovr_cases, c);
	}
	fclose(f);
	return json_array_size(ovr_cases);
}

/* ---- lim_idle ---- */

START_TEST(test_idle_windows)
{
	/* a monotonic clock far from 0 (a fresh state's last booking is 0) */
	const int64_t t0 = 100 * HOUR;

	use("quota = 2/1s\nrule = requests fixed-window 5/1s\n");
	ck_assert(lim_idle(st, cs, t0));
	admit(t0, "");
	ck_assert(!lim_idle(st, cs, t0));
	ck_assert(!lim_idle(st, cs, t0 + 999));
	ck_assert(lim_idle(st, cs, t0 + 1000));

	use("cluster_concurrency = 2\nlease_ttl = 5s\n");
	admit(t0, "a");
	admit(t0, "b");
	ck_assert(release(t0 + 10, "a"));
	ck_assert(!lim_idle(st, cs, t0 + 4999)); /* b still in flight */
	ck_assert(lim_idle(st, cs, t0 + 5000));

	use("min_delay = 100ms\n");
	admit(t0, "a");
	ck_assert(!lim_idle(st, cs, t0 + 5));
	ck_assert(release(t0 + 10, "a"));
	ck_assert(!lim_idle(st, cs, t0 + 109));
	ck_assert(lim_idle(st, cs, t0 + 110));
}
END_TEST

/*
 * Whenever lim_idle says the state is idle, it must decide exactly as a
 * fresh state would (the daemon drops idle states).
 */
START_TEST(test_idle_is_fresh)
{
	static const struct meter_tokens big[] = { { "in", 1000 } };
	static const char *const bodies[] = {
		"rule = tokens token-bucket 10/1s\n",
		"rule = tokens leaky-bucket 10/1s burst=30\n",
		"rule = requests sliding-window 3/1s\n",
		"rule = requests session-window 3/1s\n",
		"rule = tokens fixed-window 10/1s\nquota = 2/300ms\n",
	};
	size_t b;

	for (b = 0; b < sizeof(bodies) / sizeof(bodies[0]); b++) {
		struct lim_state *fresh;
		bool was_idle = false;
		int64_t t;

		use(bodies[b]);
		fresh = lim_state_new(cs);
		ck_assert_ptr_nonnull(fresh);
		admit(0, "");
		admit(1, "");
		lim_release(st, cs, D(1.0), 2, "", NULL, big, 1);
		for (t = 2; t < 20000; t += 37) {
			bool idle = lim_idle(st, cs, t);
			int64_t cost;

			ck_assert_msg(!was_idle || idle, "%s: idle, then not at %lld", bodies[b],
				      (long long)t);
			was_idle = idle;
			for (cost = 1; idle && cost <= 3; cost++) {
				struct lim_req rq = { .cls = NULL, .cost = cost, .count = 1 };
				struct lim_decision a = lim_check(st, cs, D(1.0), t, &rq);
				struct lim_decision f = lim_check(fresh, cs, D(1.0), t, &rq);

				ck_assert_msg(a.admitted == f.admitted &&
						  a.retry_after_ms == f.retry_after_ms,
					      "%s: idle at %lld but decides apart", bodies[b],
					      (long long)t);
			}
		}
		ck_assert_msg(was_idle, "%s: never idle", bodies[b]);
		lim_state_free(fresh);
	}
}
END_TEST

/* ---- lim_release_books ---- */

START_TEST(test_release_books)
{
	use("rule = requests fixed-window 5/1s\nquota = 3/1s\n");
	ck_assert(!lim_release_books(cs, NULL));
	ck_assert(!lim_tracks_leases(cs));

	use("cluster_concurrency = 2\n");
	ck_assert(lim_release_books(cs, NULL));

	use("min_delay = 10ms\n");
	ck_assert(lim_release_books(cs, NULL));

	use("rule = concurrency 3\n");
	ck_assert(lim_release_books(cs, NULL));

	use("rule = tokens.out fixed-window 5/1s\n");
	ck_assert(lim_release_books(cs, NULL));

	use("rule t = tokens fixed-window 5/1h\nrule r = requests fixed-window 5/1h\n"
	    "class c = t\nclass d = r\n");
	ck_assert(lim_release_books(cs, cls("c")));
	ck_assert(!lim_release_books(cs, cls("d")));
	ck_assert(!lim_release_books(cs, NULL));
}
END_TEST

/*
 * A reload: the old rule 2/1m is now written 2/60s and comes second; a new
 * rule comes first; the quota changed. Only the 2/1m counter carries over
 * (the key used its 2 at 0: still refused until the window ends), the new
 * rule and the changed quota start fresh, and the lease in flight and the
 * penalty are kept.
 */
START_TEST(test_carry_unchanged_limits)
{
	struct conf *ocf;
	const struct conf_scope *ocs;
	struct lim_state *ost;

	use("rule = requests fixed-window 2/1m\nrule = requests fixed-window 5/1m\n"
	    "quota = 4/1m\ncluster_concurrency = 10\n");
	admit(0, "a");
	admit(0, "b");
	refused(chk(1), "requests fixed-window 2/1m", 59999);
	lim_penalize(st, 0, 500);
	/* keep the old conf and state; load the new ones */
	ocf = cf;
	ocs = cs;
	ost = st;
	cf = NULL;
	st = NULL;
	use("rule = requests fixed-window 100/1m\nrule = requests fixed-window 2/60s\n"
	    "quota = 3/1m\ncluster_concurrency = 10\n");
	lim_state_carry(st, cs, ost, ocs);
	lim_state_clear(ost);
	free(ost);
	conf_free(ocf);
	ck_assert_uint_eq(st->nleases, 2);
	ck_assert_int_eq(st->penalty_until, 500);
	refused(chk(1), "requests fixed-window 2/60s", 59999);
	ck_assert_int_eq(st->rules[0].a, 0);
	ck_assert_int_eq(st->quota_n, 0);
}
END_TEST

/* A rule changed in place counts on: 2 used of a raised 4 leave 2; the
 * next rule, of another strategy in its place, starts fresh. */
START_TEST(test_carry_changed_in_place)
{
	struct conf *ocf;
	const struct conf_scope *ocs;
	struct lim_state *ost;

	use("rule = requests fixed-window 2/1m\nrule = requests 2/1m\n");
	admit(0, "a");
	admit(0, "b");
	ocf = cf;
	ocs = cs;
	ost = st;
	cf = NULL;
	st = NULL;
	use("rule = requests fixed-window 4/1m\nrule = requests sliding-window 3/1m\n");
	lim_state_carry(st, cs, ost, ocs);
	lim_state_clear(ost);
	free(ost);
	conf_free(ocf);
	ck_assert_int_eq(st->rules[1].a, 0);
	ck_assert_int_eq(st->rules[1].b, 0);
	admit(1, "c");
	admit(1, "d");
	refused(chk(1), "requests fixed-window 4/1m", 59999);
}
END_TEST

/* The meter of left named so, or NULL. */
static const struct lim_meter_left *meter_of(const struct lim_left *left, const char *name)
{
	char buf[80];

	for (size_t i = 0; i < left->nm; i++)
		if (strcmp(lim_meter_name(&left->m[i], buf, sizeof(buf)), name) == 0)
			return &left->m[i];
	return NULL;
}

/* Per meter: the fewest units left (ties: the sooner reset), named; merged across targets. */
START_TEST(test_left_per_meter)
{
	struct lim_left left = { 0 }, other = { 0 };
	const struct lim_meter_left *m;

	use("rule = requests fixed-window 10/1h\nrule big = requests fixed-window 10/1m\n"
	    "rule = tokens token-bucket 6000/1m\nrule = tokens.out token-bucket 100/1s\n"
	    "class c = big\n");
	admit_full(0, cls("c"), 1, D(1.0), "a");
	lim_left_state(&left, st, cs, cls("c"), D(1.0), 0);
	ck_assert_uint_eq(left.nm, 3);
	m = meter_of(&left, "requests");
	ck_assert_ptr_nonnull(m);
	/* 9 of 10 in each: the 1m window resets sooner */
	ck_assert_str_eq(m->rule, "big");
	ck_assert_int_eq(m->remaining, 9);
	ck_assert_int_eq(m->reset_ms, 60000);
	m = meter_of(&left, "tokens");
	ck_assert_ptr_null(m->rule);
	ck_assert_int_eq(m->idx, 2);
	ck_assert_int_eq(m->limit, 6000);
	ck_assert_ptr_nonnull(meter_of(&left, "tokens.out"));
	/* another target with fewer requests left wins that meter alone */
	lim_left_add(&other, &(struct lim_meter_left){ .meter = METER_REQUESTS,
						       .rule = LIM_RULE_QUOTA,
						       .limit = 100,
						       .remaining = 5,
						       .reset_ms = 7 });
	lim_left_merge(&left, &other);
	ck_assert_str_eq(meter_of(&left, "requests")->rule, LIM_RULE_QUOTA);
	ck_assert_int_eq(meter_of(&left, "tokens")->limit, 6000);
	/* overall: 5 of 100 is the smallest part left */
	ck_assert_int_eq(left.remaining, 5);
	lim_left_age(&left, 10);
	ck_assert_int_eq(left.reset_ms, 0);
	ck_assert_int_eq(meter_of(&left, "tokens.out")->reset_ms, 0);
	ck_assert_int_eq(meter_of(&left, "requests")->reset_ms, 0);
}
END_TEST

/* Past LIM_LEFT_METERS meters the others are left out; the overall still counts them. */
START_TEST(test_left_meters_bounded)
{
	struct lim_left left = { 0 };
	char body[1024] = "";

	for (int i = 0; i < LIM_LEFT_METERS + 2; i++)
		snprintf(body + strlen(body), sizeof(body) - strlen(body),
			 "rule = tokens.m%d fixed-window %d/1h\n", i, 100 - i);
	use(body);
	lim_left_state(&left, st, cs, NULL, D(1.0), 0);
	ck_assert_uint_eq(left.nm, LIM_LEFT_METERS);
	ck_assert_int_eq(left.capacity, 100); /* all full: the first seen */
	ck_assert_ptr_null(meter_of(&left, "tokens.m7"));
	ck_assert_ptr_nonnull(meter_of(&left, "tokens.m5"));
}
END_TEST

static Suite *limiter_suite(void)
{
	Suite *s = suite_create("limiter");
	TCase *tc = tcase_create("limiter"), *tv;
	size_t n;

	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_add_test(tc, test_override_tightens_until_its_end);
	tcase_add_test(tc, test_override_loosens_up_to_the_ceiling);
	tcase_add_test(tc, test_override_moves_the_burst);
	tcase_add_test(tc, test_override_min_delay);
	tcase_add_test(tc, test_override_keeps_the_key);
	tcase_add_test(tc, test_cluster_concurrency);
	tcase_add_test(tc, test_concurrency_rule);
	tcase_add_test(tc, test_book_count);
	tcase_add_test(tc, test_serialized_min_delay);
	tcase_add_test(tc, test_send_spaced_min_delay);
	tcase_add_test(tc, test_quota);
	tcase_add_test(tc, test_quota_model);
	tcase_add_test(tc, test_penalty_extends_only);
	tcase_add_test(tc, test_refusal_books_nothing);
	tcase_add_test(tc, test_longest_wait_names);
	tcase_add_test(tc, test_never_beats_any_wait);
	tcase_add_test(tc, test_ties_conf_order);
	tcase_add_test(tc, test_tie_quota_first);
	tcase_add_test(tc, test_classes_floor);
	tcase_add_test(tc, test_floor_bucket_exact);
	tcase_add_test(tc, test_tokens_overdraw);
	tcase_add_test(tc, test_tokens_key_bucket);
	tcase_add_test(tc, test_divisor_params);
	tcase_add_test(tc, test_divisor_limits);
	tcase_add_test(tc, test_divisor_min_delay);
	tcase_add_test(tc, test_turn_spreads_remainders);
	tcase_add_test(tc, test_serialized_owner);
	tcase_add_test(tc, test_spend_share);
	tcase_add_test(tc, test_idle_windows);
	tcase_add_test(tc, test_idle_is_fresh);
	tcase_add_test(tc, test_release_books);
	tcase_add_test(tc, test_carry_unchanged_limits);
	tcase_add_test(tc, test_carry_changed_in_place);
	tcase_add_test(tc, test_left_per_meter);
	tcase_add_test(tc, test_left_meters_bounded);
	suite_add_tcase(s, tc);
	tv = tcase_create("override vectors");
	if ((n = ovr_load("tests/vectors/override/override.jsonl")) < 100) {
		fprintf(stderr, "override.jsonl: %zu cases, want 100 or more\n", n);
		exit(EXIT_FAILURE);
	}
	tcase_add_loop_test(tv, test_override_vector, 0, (int)n);
	suite_add_tcase(s, tv);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(limiter_suite());
	int nfail;

	srunner_run_all(sr, CK_ENV);
	nfail = srunner_ntests_failed(sr);
	srunner_free(sr);
	json_decref(ovr_cases);
	return nfail == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

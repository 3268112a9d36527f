/*
 * limiter_test.h - the helpers of the limiter's tests: one [scope t] loaded
 * through conf_load_string with a fresh lim_state (use, teardown), shares
 * (D, R), and check/book/admit/release at an explicit `now`, with exact:
 * a refusal's retry_after is exact (still refused a millisecond before,
 * admitted at it). Included by exactly one file of each test binary.
 */

#ifndef ADMITD_TEST_LIMITER_TEST_H
#define ADMITD_TEST_LIMITER_TEST_H

#include "limiter.h"

#include "conf.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HOUR 3600000LL

/* A fallback share: divisor d, rank unknown (rounded down); R: ranked. */
static inline struct lim_share D(double d) {
	return (struct lim_share){ .div = d, .rank = -1 };
}

static inline struct lim_share
R(double d, int64_t rank) {
	return (struct lim_share){ .div = d, .rank = rank };
}

static struct conf *cf;
static const struct conf_scope *cs;
static struct lim_state *st;

/* Load "[scope t]" with body; cs and a fresh st describe it. */
static inline void use(const char *body)
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

static inline void teardown(void)
{
	lim_state_free(st);
	st = NULL;
	conf_free(cf);
	cf = NULL;
	cs = NULL;
}

static inline const struct conf_class *cls(const char *name)
{
	const struct conf_class *c = conf_class_find(cs, name);

	ck_assert_msg(c != NULL, "no class %s", name);
	return c;
}

static inline struct lim_decision chk_full(int64_t now, const struct conf_class *c, int64_t cost,
					   int64_t count, struct lim_share div)
{
	struct lim_req rq = { .cls = c, .cost = cost, .count = count };

	return lim_check(st, cs, div, now, &rq);
}

static inline struct lim_decision chk(int64_t now)
{
	return chk_full(now, NULL, 1, 1, D(1.0));
}

static inline void book_full(int64_t now, const struct conf_class *c, int64_t cost,
			     struct lim_share div, const char *id)
{
	struct lim_req rq = { .cls = c, .cost = cost, .count = 1 };
	const char *ids[1] = { id };

	ck_assert(lim_book(st, cs, div, now, &rq, ids));
}

/* Check, must admit, then book. */
static inline void admit_full(int64_t now, const struct conf_class *c, int64_t cost,
			      struct lim_share div, const char *id)
{
	struct lim_decision d = chk_full(now, c, cost, 1, div);

	ck_assert_msg(d.admitted, "at %lld: refused by %s, retry %lld", (long long)now,
		      d.rule ? d.rule : "?", (long long)d.retry_after_ms);
	ck_assert_int_eq(d.retry_after_ms, 0);
	book_full(now, c, cost, div, id);
}

static inline void admit(int64_t now, const char *id)
{
	admit_full(now, NULL, 1, D(1.0), id);
}

static inline void refused(struct lim_decision d, const char *rule, int64_t retry)
{
	ck_assert_msg(!d.admitted, "admitted, want refusal by %s", rule);
	ck_assert_ptr_nonnull(d.rule);
	ck_assert_str_eq(d.rule, rule);
	ck_assert_int_eq(d.retry_after_ms, retry);
}

static inline bool release(int64_t now, const char *id)
{
	return lim_release(st, cs, D(1.0), now, id, NULL, NULL, 0);
}

/*
 * The retry of a refusal at `now` is exact: the same request still
 * refused at now+retry-1 and admitted at now+retry. Returns the retry.
 */
static inline int64_t exact_full(int64_t now, const struct conf_class *c, int64_t cost,
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

static inline int64_t exact(int64_t now, const char *rule)
{
	return exact_full(now, NULL, 1, D(1.0), rule);
}

#endif

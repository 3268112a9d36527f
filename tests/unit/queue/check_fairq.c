/*
 * check_fairq.c - unit tests for daemon/queue/fairq.c, the start-time fair
 * queuing of one class's waiters on a key: the tag arithmetic, the order
 * it gives backlogged tenants weighted 4:2:1 (the shares, and the SFQ bound
 * on their gap), a tenant arriving late starts at V (no credit, no debt),
 * the rollback of a canceled last waiter, the default flow that every
 * unlisted tenant shares and that a full table sends new names to.
 */

#include "fairq.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

START_TEST(test_tag_arithmetic)
{
	double s, f;

	fairq_tag(10, 3, 1, 4, &s, &f); /* behind V: starts at V */
	ck_assert(s == 10 && f == 10.25);
	fairq_tag(10, 12, 6, 3, &s, &f); /* ahead of V: starts at its last finish */
	ck_assert(s == 12 && f == 14);
	fairq_tag(0, 0, 0, 1, &s, &f); /* cost 0 takes no turn */
	ck_assert(s == 0 && f == 0);
	ck_assert(fairq_rollback(14, 12, 14) == 12); /* its last: back to its start */
	ck_assert(fairq_rollback(16, 12, 14) == 16); /* another came after it */
}
END_TEST

/* A queue of tagged waiters, served smallest start tag first (ties: arrival). */
struct q {
	double s[4096], f[4096];
	int slot[4096], who[4096];
	int n;
};

static void push(struct q *q, struct fairq_cls *c, const char *tenant, int who, int weight)
{
	q->slot[q->n] = fairq_join(c, tenant, 1, weight, &q->s[q->n], &q->f[q->n]);
	q->who[q->n++] = who;
}

static int pop(struct q *q, struct fairq_cls *c)
{
	int i, best = 0, who;

	for (i = 1; i < q->n; i++)
		if (q->s[i] < q->s[best])
			best = i;
	who = q->who[best];
	fairq_served(c, q->s[best]);
	fairq_leave(c, q->slot[best], q->s[best], q->f[best], true);
	for (i = best; i + 1 < q->n; i++) {
		q->s[i] = q->s[i + 1];
		q->f[i] = q->f[i + 1];
		q->slot[i] = q->slot[i + 1];
		q->who[i] = q->who[i + 1];
	}
	q->n--;
	return who;
}

START_TEST(test_backlogged_4_2_1)
{
	static const char *names[] = { "gold", "silver", "bronze" };
	static const int weight[] = { 4, 2, 1 };
	struct fairq_cls *c = fairq_cls_new("");
	struct q *q = calloc(1, sizeof(*q));
	int got[3] = { 0 }, i, k, w;

	/* each tenant keeps 5 waiting: one more queued as one is served */
	for (k = 0; k < 3; k++)
		for (i = 0; i < 5; i++)
			push(q, c, names[k], k, weight[k]);
	for (i = 0; i < 700; i++) {
		w = pop(q, c);
		got[w]++;
		push(q, c, names[w], w, weight[w]);
		/* SFQ: |W_a/w_a - W_b/w_b| <= 1/w_a + 1/w_b at every instant */
		for (k = 0; k < 3; k++)
			for (w = 0; w < 3; w++)
				ck_assert(
				    fabs((double)got[k] / weight[k] - (double)got[w] / weight[w]) <=
				    1.0 / weight[k] + 1.0 / weight[w] + 1e-9);
	}
	ck_assert_int_eq(got[0], 400);
	ck_assert_int_eq(got[1], 200);
	ck_assert_int_eq(got[2], 100);
	free(q);
	free(c);
}
END_TEST

START_TEST(test_late_tenant_starts_at_v)
{
	struct fairq_cls *c = fairq_cls_new("bulk");
	struct q *q = calloc(1, sizeof(*q));
	int i;

	for (i = 0; i < 50; i++)
		push(q, c, "heavy", 0, 1);
	for (i = 0; i < 20; i++)
		pop(q, c);
	ck_assert(c->v == 19);
	/* a light tenant arriving now starts at V, before every start queued:
	 * it goes next, then the heavy one resumes */
	push(q, c, "light", 1, 1);
	ck_assert(q->s[q->n - 1] == c->v);
	ck_assert_int_eq(pop(q, c), 1);
	ck_assert_int_eq(pop(q, c), 0);
	/* one at a time, it stays at V: next again */
	push(q, c, "light", 1, 1);
	ck_assert(q->s[q->n - 1] == c->v);
	ck_assert_int_eq(pop(q, c), 1);
	/* two new tenants at V: the tie goes by arrival */
	push(q, c, "p", 2, 1);
	push(q, c, "r", 3, 1);
	ck_assert_int_eq(pop(q, c), 2);
	ck_assert_int_eq(pop(q, c), 3);
	free(q);
	free(c);
}
END_TEST

START_TEST(test_cancel_rolls_back_the_last)
{
	struct fairq_cls *c = fairq_cls_new("");
	double s1, f1, s2, f2, s3, f3;
	int a = fairq_join(c, "a", 1, 2, &s1, &f1), b;

	b = fairq_join(c, "a", 1, 2, &s2, &f2);
	ck_assert_int_eq(a, b);
	ck_assert(s2 == 0.5 && f2 == 1);
	ck_assert(!fairq_leave(c, b, s2, f2, false)); /* canceled, its tenant's last */
	fairq_join(c, "a", 1, 2, &s3, &f3);
	ck_assert(s3 == 0.5);			      /* charged nothing for the canceled one */
	ck_assert(!fairq_leave(c, a, s1, f1, false)); /* from the middle: stays charged */
	ck_assert(fairq_leave(c, a, s3, f3, false));  /* the queue is empty */
	free(c);
}
END_TEST

START_TEST(test_unlisted_and_overflow_share_the_default_flow)
{
	struct fairq_cls *c = fairq_cls_new("");
	double s, f;
	char name[16];
	int i;

	ck_assert_int_eq(fairq_join(c, NULL, 1, 1, &s, &f), 0);
	ck_assert_int_eq(fairq_join(c, "", 1, 1, &s, &f), 0);
	ck_assert(s == 1 && f == 2); /* absent and "" are one flow */
	for (i = 1; i < FAIRQ_FLOWS; i++) {
		snprintf(name, sizeof(name), "t%d", i);
		ck_assert_int_eq(fairq_join(c, name, 1, 5, &s, &f), i);
	}
	/* the table is full: a new name joins the default flow, at weight 1 */
	ck_assert_int_eq(fairq_join(c, "late", 1, 1000, &s, &f), 0);
	ck_assert(s == 2 && f == 3);
	free(c);
}
END_TEST

static Suite *fairq_suite(void)
{
	Suite *s = suite_create("fairq");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_tag_arithmetic);
	tcase_add_test(tc, test_backlogged_4_2_1);
	tcase_add_test(tc, test_late_tenant_starts_at_v);
	tcase_add_test(tc, test_cancel_rolls_back_the_last);
	tcase_add_test(tc, test_unlisted_and_overflow_share_the_default_flow);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(fairq_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

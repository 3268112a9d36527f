/*
 * check_metrics.c - unit tests for daemon/metrics.c: the wait histogram's
 * bucket choice at and around each bound, and the exact Prometheus text of
 * a daemon in local mode whose counters the test sets (HELP and TYPE once
 * per family, every outcome of every scope, cumulative buckets, _sum and
 * _count, the same per class, zeros for the backend's operations without a backend).
 */

#include "admitd.h"
#include "class_wait.h"
#include "metrics.h"
#include "scope.h"

#include <check.h>
#include <event2/buffer.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct admitd ad;

static void setup(void)
{
	memset(&ad, 0, sizeof(ad));
	TAILQ_INIT(&ad.conns.list);
	ad.rt.conf =
	    conf_load_string("[scope api]\nrule = requests 5/1s\n[scope db.main]\n"
			     "max_concurrent = 2\nrule fast = requests 9/1s\nclass hi = fast\n"
			     "class lo = fast\ndefault_class = lo\n",
			     "test.conf", stderr);
	ck_assert_ptr_nonnull(ad.rt.conf);
	ck_assert(scopes_init(&ad.rt));
}

static void teardown(void)
{
	scopes_free(&ad.rt);
	conf_free(ad.rt.conf);
}

/* The whole rendering as a NUL-terminated string (the caller frees it). */
static char *render(void)
{
	struct evbuffer *b = evbuffer_new();
	size_t n;
	char *s;

	ck_assert_ptr_nonnull(b);
	ck_assert(metrics_render(&ad, b));
	n = evbuffer_get_length(b);
	s = malloc(n + 1);
	ck_assert_ptr_nonnull(s);
	ck_assert_int_eq(evbuffer_remove(b, s, n), (int)n);
	s[n] = '\0';
	evbuffer_free(b);
	return s;
}

/* line occurs in text as a whole line. */
static bool has_line(const char *text, const char *line)
{
	size_t n = strlen(line);

	for (const char *p = text; (p = strstr(p, line)) != NULL; p++)
		if ((p == text || p[-1] == '\n') && p[n] == '\n')
			return true;
	return false;
}

static size_t count_of(const char *text, const char *needle)
{
	size_t n = 0;

	for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
		n++;
	return n;
}

START_TEST(test_observe_buckets)
{
	static const struct {
		int64_t ms;
		size_t bucket;
	} v[] = {
		{ 0, 0 },      { 1, 1 },      { 2, 2 },		{ 3, 3 },     { 5, 3 },
		{ 6, 4 },      { 100, 7 },    { 101, 8 },	{ 1000, 10 }, { 1001, 11 },
		{ 30000, 14 }, { 30001, 15 }, { 86400000, 15 },
	};
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		uint64_t h[WAIT_HIST_NBUCKETS] = { 0 };
		wait_hist_observe(h, v[i].ms);
		for (size_t j = 0; j < WAIT_HIST_NBUCKETS; j++)
			ck_assert_msg(h[j] == (j == v[i].bucket), "ms=%lld bucket %zu holds %llu",
				      (long long)v[i].ms, j, (unsigned long long)h[j]);
	}
}
END_TEST

START_TEST(test_render_exact)
{
	struct scope_rt *api = &ad.rt.scopes[0];
	char *t;

	api->admitted = 3;
	api->outcome[ADMIT_E_LIMITED] = 2;
	api->outcome[ADMIT_E_TIMEOUT] = 1;
	api->canceled = 4;
	api->releases = 5;
	api->penalties = 6;
	api->leases = 7;
	api->waiting = 8;
	api->expired = 9;
	api->batches = 2;
	api->batched = 12;
	api->admitted_ahead = 13;
	api->tickets = 21;
	api->tickets_dropped = 2;
	wait_hist_observe(api->wait_hist, 0);
	wait_hist_observe(api->wait_hist, 40);
	wait_hist_observe(api->wait_hist, 40000);
	api->wait_ms_total = 40040;
	class_wait_observe(api, NULL, wait_hist_bucket(0), 0);
	class_wait_observe(api, NULL, wait_hist_bucket(40), 40);
	class_wait_observe(&ad.rt.scopes[1], &ad.rt.conf->scopes[1].classes[0],
			   wait_hist_bucket(3000), 3000);
	ad.rt.nconns = 2;
	ad.rt.reloads_ok = 1;
	ad.rt.key_evictions = 11;
	t = render();
	ck_assert(has_line(t, "# TYPE admitd_acquires_total counter"));
	ck_assert(has_line(t, "admitd_acquires_total{scope=\"api\",outcome=\"acquired\"} 3"));
	ck_assert(has_line(t, "admitd_acquires_total{scope=\"api\",outcome=\"limited\"} 2"));
	ck_assert(has_line(t, "admitd_acquires_total{scope=\"api\",outcome=\"timeout\"} 1"));
	ck_assert(has_line(t, "admitd_acquires_total{scope=\"api\",outcome=\"canceled\"} 4"));
	ck_assert(has_line(t, "admitd_acquires_total{scope=\"db.main\",outcome=\"limited\"} 0"));
	/* 2 scopes x (acquired + 7 refusals + canceled) */
	ck_assert_uint_eq(count_of(t, "\nadmitd_acquires_total{"), 18);
	ck_assert(has_line(t, "# TYPE admitd_acquire_wait_seconds histogram"));
	ck_assert(has_line(t, "admitd_acquire_wait_seconds_bucket{scope=\"api\",le=\"0\"} 1"));
	ck_assert(has_line(t, "admitd_acquire_wait_seconds_bucket{scope=\"api\",le=\"0.025\"} 1"));
	ck_assert(has_line(t, "admitd_acquire_wait_seconds_bucket{scope=\"api\",le=\"0.05\"} 2"));
	ck_assert(has_line(t, "admitd_acquire_wait_seconds_bucket{scope=\"api\",le=\"30\"} 2"));
	ck_assert(has_line(t, "admitd_acquire_wait_seconds_bucket{scope=\"api\",le=\"+Inf\"} 3"));
	ck_assert(has_line(t, "admitd_acquire_wait_seconds_sum{scope=\"api\"} 40.040"));
	ck_assert(has_line(t, "admitd_acquire_wait_seconds_count{scope=\"api\"} 3"));
	ck_assert(has_line(t, "admitd_acquire_wait_seconds_count{scope=\"db.main\"} 0"));
	/* per class: "" for the acquires without one; a scope's classes, counted or not */
	ck_assert(has_line(t, "# TYPE admitd_acquire_class_wait_seconds histogram"));
	ck_assert(has_line(t, "admitd_acquire_class_wait_seconds_bucket{scope=\"api\",class=\"\","
			      "le=\"0\"} 1"));
	ck_assert(has_line(t, "admitd_acquire_class_wait_seconds_bucket{scope=\"api\",class=\"\","
			      "le=\"0.05\"} 2"));
	ck_assert(has_line(t, "admitd_acquire_class_wait_seconds_sum{scope=\"api\",class=\"\"} "
			      "0.040"));
	ck_assert(has_line(t, "admitd_acquire_class_wait_seconds_bucket{scope=\"db.main\","
			      "class=\"hi\",le=\"2.5\"} 0"));
	ck_assert(has_line(t, "admitd_acquire_class_wait_seconds_bucket{scope=\"db.main\","
			      "class=\"hi\",le=\"5\"} 1"));
	ck_assert(has_line(t, "admitd_acquire_class_wait_seconds_count{scope=\"db.main\","
			      "class=\"lo\"} 0"));
	/* db.main has a default_class: no acquire of it is without a class */
	ck_assert(strstr(t, "{scope=\"db.main\",class=\"\"") == NULL);
	ck_assert_uint_eq(count_of(t, "\nadmitd_acquire_class_wait_seconds_count{"), 3);
	ck_assert(has_line(t, "admitd_releases_total{scope=\"api\"} 5"));
	ck_assert(has_line(t, "admitd_penalties_total{scope=\"api\"} 6"));
	ck_assert(has_line(t, "admitd_leases{scope=\"api\"} 7"));
	ck_assert(has_line(t, "admitd_waiters{scope=\"api\"} 8"));
	ck_assert(has_line(t, "admitd_leases_expired_total{scope=\"api\"} 9"));
	ck_assert(has_line(t, "admitd_redis_batches_total{scope=\"api\"} 2"));
	ck_assert(has_line(t, "admitd_redis_batched_acquires_total{scope=\"api\"} 12"));
	ck_assert(has_line(t, "admitd_admissions_ahead_total{scope=\"api\"} 13"));
	ck_assert(has_line(t, "admitd_fair_tickets_total{scope=\"api\"} 21"));
	ck_assert(has_line(t, "admitd_fair_tickets_dropped_total{scope=\"api\"} 2"));
	ck_assert(has_line(t, "admitd_keys 0"));
	/* no adaptive scope: the family has no samples */
	ck_assert(strstr(t, "\nadmitd_adaptive_amount{") == NULL);
	ck_assert(has_line(t, "admitd_key_evictions_total 11"));
	ck_assert(has_line(t, "admitd_backend_errors_total{op=\"acquire\"} 0"));
	ck_assert(has_line(t, "admitd_backend_errors_total{op=\"heartbeat\"} 0"));
	ck_assert(has_line(t, "admitd_redis_calls_total{op=\"release\"} 0"));
	ck_assert(has_line(t, "admitd_redis_up 0"));
	ck_assert(has_line(t, "admitd_connections 2"));
	ck_assert(has_line(t, "admitd_reloads_total{result=\"ok\"} 1"));
	ck_assert(has_line(t, "admitd_reloads_total{result=\"error\"} 0"));
	ck_assert(has_line(t, "admitd_build_info{version=\"" ADMITD_VERSION "\"} 1"));
	/* one HELP and one TYPE per family, and nothing but them starts with # */
	ck_assert_uint_eq(count_of(t, "# HELP "), count_of(t, "# TYPE "));
	ck_assert_uint_eq(count_of(t, "# HELP "), 25);
	ck_assert_uint_eq(count_of(t, "\n#"), 2 * 25 - 1);
	free(t);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("metrics");
	TCase *tc = tcase_create("metrics");
	SRunner *sr;
	int failed;

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_observe_buckets);
	tcase_add_test(tc, test_render_exact);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

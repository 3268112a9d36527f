/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * libadmit_cancel.c - the mode cancel: admit_cancel from another thread or
 * a signal handler ends an acquire waiting in the daemon's queue, which
 * spends nothing, and a cancel when nothing waits is forgotten.
 */

#include "admit.h"
#include "libadmit_test.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int64_t busy_waiting(struct admit *c)
{
	struct admit_result r;
	int64_t n = -1;
	size_t i;

	if (admit_status(c, &r) == ADMIT_OK)
		for (i = 0; i < r.nscopes; i++)
			if (strcmp(r.scopes[i].name, "busy") == 0)
				n = r.scopes[i].waiting;
	admit_result_free(&r);
	return n;
}

/* Poll until busy has `n` waiting (true), or 5 s have passed (false). */
static bool busy_waits(struct admit *c, int64_t n)
{
	int64_t end = mono_ms() + 5000;
	const struct timespec tick = { 0, 10 * 1000000L };

	while (busy_waiting(c) != n) {
		if (mono_ms() >= end)
			return false;
		nanosleep(&tick, NULL);
	}
	return true;
}

/* busy's remaining units for key k, -1 when inspect fails. */
static int64_t busy_remaining(struct admit *c, const char *k)
{
	struct admit_result r;
	int64_t n = -1;
	size_t i;

	if (admit_inspect(c, "busy", k, NULL, NULL, &r) == ADMIT_OK)
		for (i = 0; i < r.inspect->nrules; i++)
			if (strcmp(r.inspect->rules[i].rule, BUSY_RULE) == 0)
				n = r.inspect->rules[i].remaining;
	admit_result_free(&r);
	return n;
}

struct canceler {
	struct admit *watch; /* its own handle: a handle serves one thread */
	struct admit *victim;
	pthread_t signal_to; /* with `by_signal`: SIGUSR1 to this thread instead */
	bool by_signal;
	bool seen;
};

static struct admit *cancel_on_signal;

static void on_usr1(int sig)
{
	(void)sig;
	admit_cancel(cancel_on_signal);
}

static void *canceler_main(void *arg)
{
	struct canceler *cn = arg;

	cn->seen = busy_waits(cn->watch, 1);
	if (cn->by_signal)
		pthread_kill(cn->signal_to, SIGUSR1);
	else
		admit_cancel(cn->victim);
	return NULL;
}

/*
 * One acquire on busy/k that waits behind a holder, canceled from another
 * thread (or by a signal whose handler calls admit_cancel): it returns
 * ADMIT_E_INTERRUPTED at once and spent nothing; the handle's other lease
 * is still held (the connection was kept) and it serves the next call.
 */
static void cancel_one(struct admit *a, struct admit *c, const char *k, bool by_signal)
{
	struct admit *b = admit_connect(sock_path), *w = admit_connect(sock_path);
	struct admit_req rq = req("busy", k), hold = req("hold", k);
	struct canceler cn = { .watch = w, .victim = a, .by_signal = by_signal };
	struct admit_result r;
	char *holder, *mine;
	pthread_t th;
	int64_t t0;

	CHECK(b != NULL && w != NULL, "connect: %s", strerror(errno));
	if (b == NULL || w == NULL) {
		admit_close(b);
		admit_close(w);
		return;
	}
	CHECK(admit_acquire(b, &rq, &r) == ADMIT_OK, "holder: %s", r.message);
	holder = steal_lease(&r);
	CHECK(admit_acquire(a, &hold, &r) == ADMIT_OK, "own lease: %s", r.message);
	mine = steal_lease(&r);
	cn.signal_to = pthread_self();
	cancel_on_signal = a;
	rq.timeout_ms = 30000;
	CHECK(pthread_create(&th, NULL, canceler_main, &cn) == 0, "thread");
	t0 = mono_ms();
	admit_acquire(a, &rq, &r);
	pthread_join(th, NULL);
	CHECK(cn.seen, "the acquire waited");
	CHECK_ERR(r, ADMIT_E_INTERRUPTED);
	CHECK(mono_ms() - t0 < 5000 + 2000, "returned soon after the cancel: %lld ms",
	      (long long)(mono_ms() - t0));
	admit_result_free(&r);
	CHECK(busy_waits(c, 0), "the daemon no longer has it waiting");
	CHECK(admit_release(b, holder, NULL, 0, &r) == ADMIT_OK && r.held, "holder released");
	admit_result_free(&r);
	CHECK(busy_remaining(c, k) == 9, "only the holder's unit is spent: %lld",
	      (long long)busy_remaining(c, k));
	admit_try(c, &hold, &r);
	CHECK_ERR(r, ADMIT_E_LIMITED); /* a's own lease survived the cancel */
	admit_result_free(&r);
	CHECK(admit_release(a, mine, NULL, 0, &r) == ADMIT_OK && r.held, "own lease still held");
	admit_result_free(&r);
	rq.timeout_ms = 1000;
	CHECK(admit_acquire(a, &rq, &r) == ADMIT_OK, "the handle serves on: %s", r.message);
	admit_result_free(&r);
	CHECK(busy_remaining(c, k) == 8, "and that one spent a unit");
	free(holder);
	free(mine);
	admit_close(b);
	admit_close(w);
}

void mode_cancel(void)
{
	struct admit *a = admit_connect(sock_path), *c = admit_connect(sock_path);
	struct sigaction sa = { .sa_handler = on_usr1 };
	struct admit_req rq = req("busy", "lib-cancel-late");
	struct admit_result r;

	CHECK(a != NULL && c != NULL, "connect: %s", strerror(errno));
	CHECK(admit_cancel(NULL) == -1, "NULL handle");
	if (a != NULL && c != NULL) {
		sigemptyset(&sa.sa_mask);
		sigaction(SIGUSR1, &sa, NULL);
		cancel_one(a, c, "lib-cancel-thread", false);
		cancel_one(a, c, "lib-cancel-signal", true);
		/* a cancel when nothing waits is forgotten by the next acquire */
		CHECK(admit_cancel(a) == 0, "cancel");
		rq.timeout_ms = 1000;
		CHECK(admit_acquire(a, &rq, &r) == ADMIT_OK, "not canceled: %s", r.message);
		admit_result_free(&r);
	}
	admit_close(a);
	admit_close(c);
}

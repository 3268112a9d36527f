/*
 * check_proto_vectors.c - the protocol's vectors against the codec: every
 * "send" of proto/vectors/NAME.jsonl (under $ADMITD_SRCDIR, or the working
 * directory) is decoded and, where the codec alone can decide, its error
 * code and id echo compared with the vector's.
 */

#include "proto.h"

#include <check.h>
#include <glob.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- proto/vectors replay ---- */

struct vsend {
	char *name;
	char *line; /* what is written on the socket, without '\n' */
	char *err;  /* expected error code, NULL when the vector expects ok */
	json_t *id; /* expected id echo, or NULL */
};

static struct vsend *vsends;
static size_t nvsends;
static size_t nvbad; /* lines that are not JSON, steps without "send" */

static const char *srcdir(void)
{
	const char *d = getenv("ADMITD_SRCDIR");

	return d ? d : ".";
}

static void vsend_add(const char *file, const char *name, json_t *send, json_t *expect)
{
	struct vsend *v, *nv;
	json_t *err = json_object_get(expect, "error");

	if (send == NULL) {
		nvbad++;
		return;
	}
	nv = realloc(vsends, (nvsends + 1) * sizeof(*nv));
	if (nv == NULL)
		abort();
	vsends = nv;
	v = &vsends[nvsends++];
	if (asprintf(&v->name, "%s: %s", file, name) < 0)
		abort();
	v->line = json_is_string(send) ? strdup(json_string_value(send))
				       : json_dumps(send, JSON_COMPACT | JSON_ENCODE_ANY);
	v->err = json_is_string(err) ? strdup(json_string_value(err)) : NULL;
	v->id = json_incref(json_object_get(expect, "id"));
	if (v->line == NULL)
		abort();
}

/* Every "send" of proto/vectors/NAME.jsonl, single or in "steps". */
static void vectors_load(void)
{
	char pat[512];
	glob_t g;
	size_t f;

	snprintf(pat, sizeof(pat), "%s/proto/vectors/*.jsonl", srcdir());
	if (glob(pat, 0, NULL, &g) != 0)
		return;
	for (f = 0; f < g.gl_pathc; f++) {
		FILE *fp = fopen(g.gl_pathv[f], "r");
		char *buf = NULL;
		size_t cap = 0;
		const char *base = strrchr(g.gl_pathv[f], '/') + 1;

		if (fp == NULL)
			continue;
		while (getline(&buf, &cap, fp) > 0) {
			json_t *v = json_loads(buf, 0, NULL), *steps;
			const char *name;
			size_t i;

			if (v == NULL) {
				nvbad++; /* test_vectors_present fails on it */
				continue;
			}
			name = json_string_value(json_object_get(v, "name"));
			name = name ? name : "?";
			steps = json_object_get(v, "steps");
			if (json_is_array(steps)) {
				for (i = 0; i < json_array_size(steps); i++) {
					json_t *st = json_array_get(steps, i);
					vsend_add(base, name, json_object_get(st, "send"),
						  json_object_get(st, "expect"));
				}
			} else if (json_object_get(v, "send") != NULL) {
				vsend_add(base, name, json_object_get(v, "send"),
					  json_object_get(v, "expect"));
			}
			json_decref(v);
		}
		free(buf);
		fclose(fp);
	}
	globfree(&g);
}

static void vectors_free(void)
{
	size_t i;

	for (i = 0; i < nvsends; i++) {
		free(vsends[i].name);
		free(vsends[i].line);
		free(vsends[i].err);
		json_decref(vsends[i].id);
	}
	free(vsends);
}

START_TEST(test_vectors_present)
{
	ck_assert_msg(nvsends >= 40, "only %zu sends read from %s/proto/vectors", nvsends,
		      srcdir());
	ck_assert_msg(nvbad == 0, "%zu vector lines or steps unreadable", nvbad);
}
END_TEST

/*
 * true when only ops.c can refuse the request: a target names no key (does
 * the scope have a default key?), tokens or a reservation are named (does
 * a rule of the scope meter them?), an override (does the scope take it,
 * and within its override_max?), or an acquire without a lease (does a
 * release book nothing in each target's scope?)
 */
static bool needs_conf(const struct request *rq)
{
	size_t i;

	if ((rq->op == OP_RELEASE && rq->ntokens > 0) ||
	    (rq->op == OP_ACQUIRE && (rq->nreserve > 0 || rq->no_lease)) || rq->op == OP_OVERRIDE)
		return true;
	if (rq->op != OP_ACQUIRE && rq->op != OP_PENALIZE)
		return false;
	for (i = 0; i < rq->ntargets; i++)
		if (!rq->targets[i].has_key)
			return true;
	return false;
}

START_TEST(test_vectors_replay)
{
	const struct vsend *v = &vsends[_i];
	struct request rq;
	char msg[256] = "";
	enum admit_err e = proto_decode(v->line, strlen(v->line), &rq, msg, sizeof(msg));
	int want = v->err ? admit_err_parse(v->err) : ADMIT_OK;

	ck_assert_msg(want >= 0, "%s: unknown error \"%s\"", v->name, v->err);
	if (want == ADMIT_E_LINE_TOO_LONG) {
		/* framing, decided by conn.c before the codec sees the line */
	} else if (want == ADMIT_E_BAD_REQUEST || want == ADMIT_E_UNKNOWN_OP) {
		if (e == ADMIT_OK)
			ck_assert_msg(want == ADMIT_E_BAD_REQUEST && needs_conf(&rq),
				      "%s: decoded, the vector wants %s", v->name, v->err);
		else
			ck_assert_msg((int)e == want, "%s: got %s (%s), want %s", v->name,
				      admit_err_str(e), msg, v->err);
	} else {
		/* ok, or refused by the limiter / ops: the codec must accept it */
		ck_assert_msg(e == ADMIT_OK, "%s: got %s (%s)", v->name, admit_err_str(e), msg);
	}
	/* an error reply echoes the id the vector expects (decided by the codec) */
	if (e != ADMIT_OK && v->id != NULL) {
		json_t *got = rq.id ? json_loads(rq.id, JSON_DECODE_ANY, NULL) : NULL;
		ck_assert_msg(json_equal(got, v->id), "%s: id %s", v->name,
			      rq.id ? rq.id : "(none)");
		json_decref(got);
	}
	proto_request_clear(&rq);
}
END_TEST
static Suite *proto_vectors_suite(void)
{
	Suite *s = suite_create("proto_vectors");
	TCase *tc;

	tc = tcase_create("vectors");
	tcase_add_test(tc, test_vectors_present);
	if (nvsends > 0)
		tcase_add_loop_test(tc, test_vectors_replay, 0, (int)nvsends);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr;
	int nfail;

	vectors_load();
	sr = srunner_create(proto_vectors_suite());
	srunner_run_all(sr, CK_ENV);
	nfail = srunner_ntests_failed(sr);
	srunner_free(sr);
	vectors_free();
	return nfail == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

/*
 * vector_file.h - the JSON-lines vector files the strategy tests replay
 * (tests/vectors/strategy/KIND.jsonl, tests/vectors/adaptive/adaptive.jsonl):
 * vec_load appends every line of a file, parsed, to a growing array of
 * cases (a line that is not JSON is reported and left out, so the test that
 * counts the cases fails), vec_free releases them, and jint reads an
 * integer field with a default. Shared by check_strategy.c and
 * check_adaptive.c; included by exactly one file of each test binary.
 */

#ifndef ADMITD_TEST_VECTOR_FILE_H
#define ADMITD_TEST_VECTOR_FILE_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Append path's cases to *cases (*n of them so far); returns how many, or -1. */
static inline int vec_load(const char *path, const char *who, json_t ***cases, int *n)
{
	char *line = NULL;
	size_t cap = 0;
	int added = 0;
	FILE *f = fopen(path, "r");

	if (f == NULL) {
		fprintf(stderr, "%s: cannot open %s\n", who, path);
		return -1;
	}
	while (getline(&line, &cap, f) > 0) {
		json_error_t err;
		json_t *c = json_loads(line, 0, &err);
		json_t **nc;

		if (c == NULL) {
			fprintf(stderr, "%s:%d: %s\n", path, err.line, err.text);
			continue; /* counted short: the test of the count fails */
		}
		nc = realloc(*cases, (size_t)(*n + 1) * sizeof(**cases));
		if (nc == NULL)
			abort();
		*cases = nc;
		(*cases)[(*n)++] = c;
		added++;
	}
	free(line);
	fclose(f);
	return added;
}

static inline void vec_free(json_t **cases, int n)
{
	for (int i = 0; i < n; i++)
		json_decref(cases[i]);
	free(cases);
}

/* obj's integer field key, or dflt when it is missing or not an integer. */
static inline int64_t jint(const json_t *obj, const char *key, int64_t dflt)
{
	const json_t *v = json_object_get(obj, key);

	return json_is_integer(v) ? (int64_t)json_integer_value(v) : dflt;
}

#endif

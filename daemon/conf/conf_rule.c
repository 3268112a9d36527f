/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * conf_rule.c - the repeatable keys of a scope: rule, class and weight.
 *
 * Owns: appending a parsed rule to a scope's rules, a parsed class to
 * its classes and a tenant's weight to its weights (the class's rule names are kept in the parse state, to be
 * resolved once the whole scope is read, by conf_check.c), and clearing a
 * rule. The syntax of both is conf_value.c's.
 */

#include "conf_int.h"

#include <stdlib.h>
#include <string.h>

void conf_rule_clear(struct conf_rule *r)
{
	free(r->name);
	free(r->text);
	free(r->meter_key);
}

const char *conf_set_rule(struct conf_ctx *x, const struct conf_key *k, void *base, const char *arg,
			  const char *val)
{
	struct conf_scope *s = base;
	struct conf_rule r = { 0 }, *nr;
	const char *e;

	(void)k;
	if (arg != NULL) {
		if (!cv_name_ok(arg))
			return "bad rule name ([A-Za-z0-9_.-], 1 to 64 characters)";
		for (size_t i = 0; i < s->nrules; i++)
			if (s->rules[i].name && strcmp(s->rules[i].name, arg) == 0)
				return conf_fmt(x, "rule \"%s\" already defined at line %d", arg,
						s->rules[i].line);
	}
	if ((e = cv_rule(val, &r, x->errbuf, sizeof(x->errbuf))) != NULL)
		return e;
	r.line = x->lineno;
	if ((arg != NULL && (r.name = strdup(arg)) == NULL) ||
	    (nr = realloc(s->rules, (s->nrules + 1) * sizeof(*nr))) == NULL) {
		conf_rule_clear(&r);
		return "out of memory";
	}
	s->rules = nr;
	s->rules[s->nrules++] = r;
	return NULL;
}

const char *conf_set_class(struct conf_ctx *x, const struct conf_key *k, void *base,
			   const char *arg, const char *val)
{
	struct conf_scope *s = base;
	struct conf_pscope *ps = &x->ps[x->scope];
	struct cv_class cv;
	struct cv_class *np;
	struct conf_class *nc;
	const char *e;
	char *name;

	(void)k;
	if (!cv_name_ok(arg))
		return "bad class name ([A-Za-z0-9_.-], 1 to 64 characters)";
	for (size_t i = 0; i < s->nclasses; i++)
		if (strcmp(s->classes[i].name, arg) == 0)
			return conf_fmt(x, "class \"%s\" already defined at line %d", arg,
					s->classes[i].line);
	if ((e = cv_class(val, &cv, x->errbuf, sizeof(x->errbuf))) != NULL)
		return e;
	/* grow both arrays before committing, so a failure leaves them in step */
	if ((name = strdup(arg)) == NULL ||
	    (np = realloc(ps->pend, (s->nclasses + 1) * sizeof(*np))) == NULL)
		goto oom;
	ps->pend = np;
	if ((nc = realloc(s->classes, (s->nclasses + 1) * sizeof(*nc))) == NULL)
		goto oom;
	s->classes = nc;
	s->classes[s->nclasses] = (struct conf_class){ .name = name,
						       .floor = cv.floor,
						       .floor_ppm = cv.floor_ppm,
						       .priority = (int)cv.priority,
						       .line = x->lineno };
	ps->pend[s->nclasses++] = cv;
	return NULL;
oom:
	free(name);
	cv_class_clear(&cv);
	return "out of memory";
}

const char *conf_set_weight(struct conf_ctx *x, const struct conf_key *k, void *base,
			    const char *arg, const char *val)
{
	struct conf_scope *s = base;
	struct conf_weight *nw;
	int64_t w;
	char *name;

	if (!cv_name_ok(arg))
		return "bad tenant name ([A-Za-z0-9_.-], 1 to 64 characters)";
	for (size_t i = 0; i < s->nweights; i++)
		if (strcmp(s->weights[i].name, arg) == 0)
			return conf_fmt(x, "weight of \"%s\" already given at line %d", arg,
					s->weights[i].line);
	if (s->nweights == CONF_MAX_WEIGHTS)
		return conf_fmt(x, "at most %d weight lines in a scope", CONF_MAX_WEIGHTS);
	if (cv_int(val, &w) != NULL || w < k->min || w > k->max)
		return conf_fmt(x, "weight must be an integer %lld..%lld", (long long)k->min,
				(long long)k->max);
	if ((name = strdup(arg)) == NULL)
		return "out of memory";
	if ((nw = realloc(s->weights, (s->nweights + 1) * sizeof(*nw))) == NULL) {
		free(name);
		return "out of memory";
	}
	s->weights = nw;
	s->weights[s->nweights++] =
	    (struct conf_weight){ .name = name, .weight = (int)w, .line = x->lineno };
	return NULL;
}

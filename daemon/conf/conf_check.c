/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * conf_check.c - the checks across keys, once the whole file is read.
 *
 * Owns: per scope, the default class and the classes' rule names, the
 * adaptive keys and their range, and the override bound; and the Redis
 * keys that only make sense together. Each problem is reported at the line
 * of the key it is about.
 */

#include "conf_int.h"

#include "redis_url.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static size_t conf_key_index(const struct conf_key *table, const char *name)
{
	size_t i = 0;

	while (table[i].name != NULL && strcmp(table[i].name, name) != 0)
		i++;
	return i;
}

/* A rate n/w in milli-units of rule r's amount per its window (rounded down). */
static double conf_adapt_milli(const struct conf_rule *r, int64_t n, int64_t w_ms)
{
	return floor((double)n * (double)r->sp.window_ms * 1000.0 / (double)w_ms);
}

/* adaptive = yes: its rule, its range and its steps, in milli-units of the rule. */
static void conf_validate_adaptive(struct conf_ctx *x, struct conf_scope *s, struct conf_pscope *ps)
{
	static const char *const keys[] = { "adaptive_floor", "adaptive_decrease",
					    "adaptive_increase", "adaptive_interval" };
	int line = ps->seen[conf_key_index(conf_scope_keys, "adaptive")];
	int fl_line = ps->seen[conf_key_index(conf_scope_keys, "adaptive_floor")];
	int dec_line = ps->seen[conf_key_index(conf_scope_keys, "adaptive_decrease")];
	int inc_line = ps->seen[conf_key_index(conf_scope_keys, "adaptive_increase")];
	const struct conf_rule *r = NULL;
	double fl, step;
	size_t i;

	s->adapt_rule = -1;
	if (!s->adaptive) {
		for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
			int l = ps->seen[conf_key_index(conf_scope_keys, keys[i])];
			if (l != 0)
				conf_err(x, l, "%s: only with adaptive = yes", keys[i]);
		}
		return;
	}
	for (i = 0; i < s->nrules && r == NULL; i++)
		if (s->rules[i].meter == METER_REQUESTS) {
			r = &s->rules[i];
			s->adapt_rule = (long)i;
		}
	if (r == NULL) {
		conf_err(x, line, "adaptive: [scope %s] has no requests rule to adapt", s->name);
		return;
	}
	if (s->adaptive_floor_n == 0) {
		conf_err(x, line, "adaptive: needs adaptive_floor (the least rate, e.g. 1/1s)");
		return;
	}
	s->adapt.ceil = r->sp.amount * 1000;
	fl = conf_adapt_milli(r, s->adaptive_floor_n, s->adaptive_floor_w_ms);
	if (fl >= (double)s->adapt.ceil) {
		conf_err(x, fl_line, "adaptive_floor: not below the rate of rule %s", r->text);
		return;
	}
	if (fl < 1) {
		conf_err(x, fl_line,
			 "adaptive_floor: too small for rule %s (under 1/1000 of a unit)", r->text);
		return;
	}
	s->adapt.floor = (int64_t)fl;
	s->adapt.factor = (int64_t)floor(s->adaptive_decrease * 1000.0 + 0.5);
	if (s->adapt.factor < 1 || s->adapt.factor > 999)
		conf_err(x, dec_line,
			 "adaptive_decrease: must be above 0 and below 1 (0.001 to 0.999)");
	if (s->adaptive_increase_pct > 0)
		step = floor((double)s->adapt.ceil * s->adaptive_increase_pct / 100.0);
	else
		step = conf_adapt_milli(r, s->adaptive_increase_n, s->adaptive_increase_w_ms);
	if (step < 1)
		conf_err(x, inc_line,
			 "adaptive_increase: too small for rule %s (under 1/1000 of a unit)",
			 r->text);
	s->adapt.step = step > (double)s->adapt.ceil ? s->adapt.ceil : (int64_t)step;
	s->adapt.interval_ms = s->adaptive_interval_ms;
}

/* Resolve class rule names and check what needs the whole scope. */
void conf_validate_scope(struct conf_ctx *x, struct conf_scope *s, struct conf_pscope *ps)
{
	bool *used = calloc(s->nrules + 1, sizeof(*used));
	int dc_line = ps->seen[conf_key_index(conf_scope_keys, "default_class")];

	if (used == NULL) {
		conf_err(x, 0, "out of memory");
		return;
	}
	for (size_t i = 0; i < s->nclasses; i++) {
		struct conf_class *cl = &s->classes[i];
		struct cv_class *pc = &ps->pend[i];

		if ((cl->rules = calloc(pc->nnames + 1, sizeof(*cl->rules))) == NULL) {
			conf_err(x, 0, "out of memory");
			break;
		}
		for (size_t j = 0; j < pc->nnames; j++) {
			size_t r;

			for (r = 0; r < s->nrules; r++)
				if (s->rules[r].name && strcmp(s->rules[r].name, pc->names[j]) == 0)
					break;
			if (r == s->nrules) {
				conf_err(x, cl->line, "class %s: unknown rule \"%s\"", cl->name,
					 pc->names[j]);
				continue;
			}
			used[r] = true;
			cl->rules[cl->nrules++] = r;
			/* a floor the rule can never leave makes the class never admitted */
			int64_t cap =
			    s->rules[r].sp.burst ? s->rules[r].sp.burst : s->rules[r].sp.amount;
			if (cl->floor >= cap)
				conf_err(x, cl->line,
					 "class %s: floor=%lld leaves nothing of rule %s (%lld)",
					 cl->name, (long long)cl->floor, pc->names[j],
					 (long long)cap);
		}
	}
	for (size_t r = 0; r < s->nrules; r++)
		if (s->rules[r].name && !used[r])
			conf_err(x, s->rules[r].line,
				 "rule %s: named rule is not used by any class (list it in a "
				 "class, or drop its name to apply it to all)",
				 s->rules[r].name);
	free(used);
	if (s->default_class != NULL && conf_class_find(s, s->default_class) == NULL)
		conf_err(x, dc_line, "default_class: no class \"%s\" in [scope %s]",
			 s->default_class, s->name);
	/* documented: a per-daemon cap below the cluster's would hide the cluster's */
	if (s->max_concurrent != 0 && s->cluster_concurrency > s->max_concurrent)
		s->max_concurrent = s->cluster_concurrency;
	conf_validate_adaptive(x, s, ps);
	for (size_t r = 0; r < s->nrules; r++)
		s->rules[r].idx = r;
	if (s->override_max != 0 && s->override_max < 1)
		conf_err(x, ps->seen[conf_key_index(conf_scope_keys, "override_max")],
			 "override_max: 0 (no overrides) or a factor of at least 1 (1: overrides "
			 "may only tighten)");
	s->override_milli = (int64_t)floor(s->override_max * 1000.0 + 0.5);
}

/* The Redis keys that only make sense together. */
void conf_validate_redis(struct conf_ctx *x)
{
	static const char *const tls_keys[] = { "redis_tls_ca_file", "redis_tls_cert_file",
						"redis_tls_key_file", "redis_tls_server_name",
						"redis_tls_verify" };
	const struct conf *c = x->c;
	struct redis_url u;
	char msg[200];
	bool have = c->redis != NULL && c->redis[0] != '\0' &&
		    redis_url_parse(c->redis, &u, msg, sizeof(msg)) == 0;
	int key_line = x->admitd_seen[conf_key_index(conf_admitd_keys, "redis_tls_key_file")];
	int sp_line = x->admitd_seen[conf_key_index(conf_admitd_keys, "sentinel_password_file")];

	if (key_line != 0 && c->redis_tls_cert_file == NULL)
		conf_err(x, key_line, "redis_tls_key_file without redis_tls_cert_file");
	if (!have)
		return;
	for (size_t i = 0; !u.tls && i < sizeof(tls_keys) / sizeof(tls_keys[0]); i++) {
		int line = x->admitd_seen[conf_key_index(conf_admitd_keys, tls_keys[i])];
		if (line != 0)
			conf_err(x, line,
				 "%s is set but redis is not a TLS url (rediss://, or ?tls=1 on "
				 "redis+sentinel:// and redis+cluster://)",
				 tls_keys[i]);
	}
	if (sp_line != 0 && u.kind != REDIS_URL_SENTINEL)
		conf_err(x, sp_line,
			 "sentinel_password_file is set but redis is not a "
			 "redis+sentinel:// url");
}

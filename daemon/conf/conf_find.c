/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * conf_find.c - lookups in a loaded conf.
 *
 * Owns: conf_scope_find, conf_class_find and conf_weight_find, a scope, a
 * class or a listed tenant's weight by its name. The checks after the parse (conf_check.c) and the runtime layers
 * above use them; they call nothing, so they sit at the bottom of the
 * folder, below the parser that builds what they read.
 */

#include "conf.h"

#include <string.h>

const struct conf_scope *conf_scope_find(const struct conf *c, const char *name)
{
	for (size_t i = 0; i < c->nscopes; i++)
		if (strcmp(c->scopes[i].name, name) == 0)
			return &c->scopes[i];
	return NULL;
}

const struct conf_class *conf_class_find(const struct conf_scope *s, const char *name)
{
	for (size_t i = 0; i < s->nclasses; i++)
		if (strcmp(s->classes[i].name, name) == 0)
			return &s->classes[i];
	return NULL;
}

const struct conf_weight *conf_weight_find(const struct conf_scope *s, const char *tenant)
{
	for (size_t i = 0; tenant != NULL && i < s->nweights; i++)
		if (strcmp(s->weights[i].name, tenant) == 0)
			return &s->weights[i];
	return NULL;
}

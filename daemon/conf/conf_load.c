/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * conf_load.c - load admitd.conf into an immutable, validated struct conf.
 *
 * Owns: the parse itself: the generic walker that applies defaults and
 * values through the option tables (conf_keys.c) and their setters,
 * unknown-key hints, section headers, our line reader for libinih, every
 * problem in the file reported (through conf_msg.c, as "file:line:
 * message"), not only the first, and loading and freeing a conf. The
 * syntax of each value is conf_value.c's and the setters'; the checks
 * across keys are conf_check.c's; the lookups in a loaded conf are
 * conf_find.c's; what the daemon does with the snapshot is not this file's
 * business.
 *
 * Why our own reader: libinih 55 reads into a fixed 200-byte buffer and
 * counts one line per reader call, so a longer physical line becomes
 * several "lines" and the tail is parsed as garbage or as a continuation.
 * It also reports only the first syntax error, truncates section names to
 * 50 bytes and never tells the handler its line number (INI_HANDLER_LINENO
 * is a compile-time switch the packaged library does not use; defining it
 * here would break the ABI). So conf_reader hands libinih one physical line
 * per call and keeps the physical line number; it also handles what libinih
 * would get wrong or report vaguely: over-long lines, section headers
 * (parsed here in full, then hidden from libinih), lines that are neither
 * a section nor "key = value", NUL bytes, and leading whitespace (stripped,
 * so an indented line is never glued to the previous value as a
 * configparser-style continuation). libinih is left to split "key = value"
 * (or "key: value"), trim both, and strip inline comments, which start at
 * a ';' preceded by whitespace ('#' only starts a whole-line comment).
 */

#include "conf_int.h"
#include "conf_plan.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <stdlib.h>
#include <string.h>

#define CONF_FILE_MAX (1024 * 1024) /* a conf larger than this is a mistake */

/* ---- the generic walker ------------------------------------------------ */

/*
 * Set every key of `table` that has a default, parsing the default string
 * with the key's own setter, so defaults obey the same rules as values.
 */
static void conf_defaults(struct conf_ctx *x, const struct conf_key *table, void *base)
{
	const char *e;

	for (const struct conf_key *k = table; k->name != NULL; k++) {
		if (k->def == NULL)
			continue;
		if ((e = conf_types[k->type].set(x, k, base, NULL, k->def)) != NULL)
			conf_err(x, 0, "internal: default of %s (\"%s\"): %s", k->name, k->def, e);
	}
}

#define CONF_SUGGEST_MAX 2  /* edits (insert, delete, change, swap) a suggestion is away */
#define CONF_SUGGEST_LEN 48 /* longer words are not compared */

/*
 * Edit distance of a[0..alen) and b with adjacent swaps counted as one edit
 * (optimal string alignment), so "min_dealy" is one edit from "min_delay".
 * Returns CONF_SUGGEST_MAX + 1 for a word too long to compare.
 */
static size_t conf_distance(const char *a, size_t alen, const char *b)
{
	size_t blen = strlen(b), d[3][CONF_SUGGEST_LEN + 1];

	if (alen > CONF_SUGGEST_LEN || blen > CONF_SUGGEST_LEN)
		return CONF_SUGGEST_MAX + 1;
	/* rows i-2, i-1 and i of the usual table, by i % 3 */
	for (size_t j = 0; j <= blen; j++)
		d[0][j] = j;
	for (size_t i = 1; i <= alen; i++) {
		size_t *cur = d[i % 3], *up = d[(i - 1) % 3], *up2 = d[(i + 1) % 3];

		cur[0] = i;
		for (size_t j = 1; j <= blen; j++) {
			size_t v = up[j - 1] + (a[i - 1] != b[j - 1]);

			if (up[j] + 1 < v)
				v = up[j] + 1;
			if (cur[j - 1] + 1 < v)
				v = cur[j - 1] + 1;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
			    up2[j - 2] + 1 < v)
				v = up2[j - 2] + 1;
			cur[j] = v;
		}
	}
	return d[alen % 3][blen];
}

/*
 * The key of `table` closest to the unknown word (at most CONF_SUGGEST_MAX
 * edits away, and fewer edits than the word has letters, so that "x" is not
 * taken for "key"), or NULL. The first of equally close keys wins.
 */
static const char *conf_suggest(const struct conf_key *table, const char *word, size_t wlen)
{
	const char *best = NULL;
	size_t best_d = CONF_SUGGEST_MAX + 1;

	for (const struct conf_key *k = table; k->name != NULL; k++) {
		size_t d = conf_distance(word, wlen, k->name);

		if (d < best_d && d < wlen) {
			best = k->name;
			best_d = d;
		}
	}
	return best;
}

/* An unknown key, with a hint: a close key of this section, or the section the key is of. */
static void conf_unknown_key(struct conf_ctx *x, const struct conf_key *table, const char *section,
			     const char *keyname, const char *word, size_t wlen)
{
	const struct conf_key *other =
	    table == conf_admitd_keys ? conf_scope_keys : conf_admitd_keys;
	const char *close = conf_suggest(table, word, wlen);

	if (close != NULL) {
		conf_err(x, x->lineno, "unknown key \"%s\" in %s (did you mean \"%s\"?)", keyname,
			 section, close);
		return;
	}
	for (const struct conf_key *k = other; k->name != NULL; k++) {
		if (strlen(k->name) == wlen && strncmp(k->name, word, wlen) == 0) {
			conf_err(x, x->lineno, "unknown key \"%s\" in %s (%s is a key of %s)",
				 keyname, section, k->name,
				 other == conf_admitd_keys ? "[admitd]" : "[scope NAME]");
			return;
		}
	}
	conf_err(x, x->lineno, "unknown key \"%s\" in %s", keyname, section);
}

/*
 * Apply "name = value" from the current section through `table`. `name` is
 * "key" or "key ARG"; seen[] holds the line each key was first set at.
 */
static void conf_apply(struct conf_ctx *x, const struct conf_key *table, int *seen, void *base,
		       const char *section, const char *name, const char *val)
{
	const struct conf_key *k;
	size_t wlen = strcspn(name, " \t");
	const char *arg = name + wlen, *e;
	char keyname[128];

	while (*arg == ' ' || *arg == '\t')
		arg++;
	snprintf(keyname, sizeof(keyname), "%.*s%s%s", (int)wlen, name, *arg ? " " : "", arg);
	for (k = table; k->name != NULL; k++)
		if (strlen(k->name) == wlen && strncmp(k->name, name, wlen) == 0)
			break;
	if (k->name == NULL) {
		conf_unknown_key(x, table, section, keyname, name, wlen);
		return;
	}
	if (*arg == '\0') {
		arg = NULL;
		if (k->flags & CONF_F_ARG_REQUIRED) {
			conf_err(x, x->lineno, "%s: needs a name: %s NAME = ...", keyname, k->name);
			return;
		}
	} else if (!(k->flags & CONF_F_ARG)) {
		conf_err(x, x->lineno, "unknown key \"%s\" in %s", keyname, section);
		return;
	} else if (strpbrk(arg, " \t") != NULL) {
		conf_err(x, x->lineno, "%s: the name must be one word", keyname);
		return;
	}
	if (!(k->flags & CONF_F_REPEATABLE)) {
		if (seen[k - table] != 0) {
			conf_err(x, x->lineno, "%s: duplicate key (first set at line %d)", keyname,
				 seen[k - table]);
			return;
		}
		seen[k - table] = x->lineno;
	}
	if ((e = conf_types[k->type].set(x, k, base, arg, val)) != NULL)
		conf_err(x, x->lineno, "%s: %s", keyname, e);
}

/* libinih's handler; `section` is ignored: the reader tracks sections. */
static int conf_ini_handler(void *user, const char *section, const char *name, const char *value)
{
	struct conf_ctx *x = user;
	char where[CV_NAME_MAX + sizeof("[scope ]")];

	(void)section;
	switch (x->sect) {
	case SECT_NONE:
		conf_err(x, x->lineno, "\"%s\" outside a section ([admitd] or [scope NAME])", name);
		break;
	case SECT_ADMITD:
		conf_apply(x, conf_admitd_keys, x->admitd_seen, x->c, "[admitd]", name, value);
		break;
	case SECT_SCOPE:
		snprintf(where, sizeof(where), "[scope %s]", x->c->scopes[x->scope].name);
		conf_apply(x, conf_scope_keys, x->ps[x->scope].seen, &x->c->scopes[x->scope], where,
			   name, value);
		break;
	case SECT_IGNORED: /* its header was already reported */ break;
	}
	return 1;
}

/* ---- sections and the line reader ------------------------------------ */

/* Start [scope NAME]: a new scope with its defaults. */
static void conf_scope_open(struct conf_ctx *x, const char *name)
{
	struct conf *c = x->c;
	struct conf_scope *ns;
	struct conf_pscope *np;
	char *copy;

	x->sect = SECT_IGNORED;
	if (!cv_name_ok(name)) {
		conf_err(x, x->lineno, "bad scope name \"%s\" ([A-Za-z0-9_.-], 1 to 64 characters)",
			 name);
		return;
	}
	for (size_t i = 0; i < c->nscopes; i++) {
		if (strcmp(c->scopes[i].name, name) == 0) {
			conf_err(x, x->lineno, "duplicate scope \"%s\" (first at line %d)", name,
				 c->scopes[i].line);
			return;
		}
	}
	/* both arrays grow before the scope counts, so they stay in step */
	if ((copy = strdup(name)) == NULL)
		goto oom;
	if ((np = realloc(x->ps, (c->nscopes + 1) * sizeof(*np))) == NULL)
		goto oom;
	x->ps = np;
	if ((ns = realloc(c->scopes, (c->nscopes + 1) * sizeof(*ns))) == NULL)
		goto oom;
	c->scopes = ns;
	memset(&ns[c->nscopes], 0, sizeof(*ns));
	memset(&np[c->nscopes], 0, sizeof(*np));
	x->scope = c->nscopes++;
	ns[x->scope].line = x->lineno;
	ns[x->scope].name = copy;
	conf_defaults(x, conf_scope_keys, &ns[x->scope]);
	x->sect = SECT_SCOPE;
	return;
oom:
	free(copy);
	conf_err(x, x->lineno, "out of memory");
}

/* A "[...]" line, given without leading blanks; s is NUL-terminated. */
static void conf_section(struct conf_ctx *x, char *s)
{
	char *close = strchr(s, ']'), *in, *arg, *rest;

	x->sect = SECT_IGNORED;
	if (close == NULL) {
		conf_err(x, x->lineno, "missing ']' in section header");
		return;
	}
	for (rest = close + 1; *rest == ' ' || *rest == '\t'; rest++)
		;
	if (*rest != '\0' && *rest != ';' && *rest != '#') {
		conf_err(x, x->lineno, "unexpected text after ']'");
		return;
	}
	*close = '\0';
	in = s + 1;
	in += strspn(in, " \t");
	for (char *e = close; e > in && (e[-1] == ' ' || e[-1] == '\t');)
		*--e = '\0';
	arg = in + strcspn(in, " \t");
	if (*arg != '\0') {
		*arg++ = '\0';
		arg += strspn(arg, " \t");
	}
	if (strcmp(in, "admitd") == 0 && *arg == '\0') {
		if (x->admitd_line != 0) {
			conf_err(x, x->lineno, "duplicate section [admitd] (first at line %d)",
				 x->admitd_line);
			return;
		}
		x->admitd_line = x->lineno;
		x->sect = SECT_ADMITD;
	} else if (strcmp(in, "scope") == 0) {
		if (*arg == '\0')
			conf_err(x, x->lineno, "a scope needs a name: [scope NAME]");
		else
			conf_scope_open(x, arg);
	} else {
		conf_err(x, x->lineno, "unknown section [%s%s%s]", in, *arg ? " " : "", arg);
	}
}

/*
 * True when libinih will find "key = value" (or "key: value") on s: a '='
 * or ':' before any inline comment (';' after a blank).
 */
static bool conf_has_separator(const char *s)
{
	for (const char *p = s; *p; p++) {
		if (*p == '=' || *p == ':')
			return true;
		if (*p == ';' && p > s && isspace((unsigned char)p[-1]))
			return false;
	}
	return false;
}

/*
 * The ini_reader: one physical line per call into buf (num bytes, as
 * libinih's stack buffer allows). Lines libinih must not see (comments,
 * section headers, errors) are handed over as empty lines, so libinih's
 * count stays equal to ours. Returns NULL at the end of the input.
 */
static char *conf_reader(char *buf, int num, void *stream)
{
	struct conf_ctx *x = stream;
	const char *s, *nl, *e;
	size_t len;

	if (x->p >= x->end)
		return NULL;
	x->lineno++;
	s = x->p;
	nl = memchr(s, '\n', (size_t)(x->end - s));
	e = nl ? nl : x->end;
	x->p = nl ? nl + 1 : x->end;
	if (e > s && e[-1] == '\r')
		e--;
	if (x->lineno == 1 && e - s >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0)
		s += 3;
	/* Every blank libinih's lskip would skip (\v and \f too): a line it
	 * sees starting with one would be glued onto the previous value. */
	while (s < e && isspace((unsigned char)*s))
		s++;
	len = (size_t)(e - s);
	buf[0] = '\0';
	if (len == 0 || *s == ';' || *s == '#')
		return buf; /* blank or comment: may be of any length */
	if (memchr(s, '\0', len) != NULL) {
		conf_err(x, x->lineno, "NUL byte in line");
		return buf;
	}
	if (num < 2 || len > (size_t)num - 2) {
		conf_err(x, x->lineno, "line too long");
		/* a section header we cannot read would file its keys wrongly */
		if (*s == '[') {
			x->sect = SECT_IGNORED;
			x->bad_headers++;
		}
		return buf;
	}
	memcpy(buf, s, len);
	buf[len] = '\0';
	if (*buf == '[') {
		conf_section(x, buf);
		if (x->sect == SECT_IGNORED)
			x->bad_headers++;
		buf[0] = '\0';
	} else if (!conf_has_separator(buf)) {
		conf_err(x, x->lineno, "expected \"key = value\" or \"[section]\"");
		buf[0] = '\0';
	}
	return buf;
}

/* ---- public ------------------------------------------------------------ */

static struct conf *conf_parse(const char *text, size_t len, const char *name, FILE *errf)
{
	struct conf_ctx x = { .name = name, .errf = errf, .p = text, .end = text + len };
	int rc;

	if ((x.c = calloc(1, sizeof(*x.c))) == NULL || (x.c->path = strdup(name)) == NULL) {
		conf_err(&x, 0, "out of memory");
		goto done;
	}
	x.c->socket_group = -1;
	conf_defaults(&x, conf_admitd_keys, x.c);
	rc = ini_parse_stream(conf_reader, &x, conf_ini_handler, &x);
	if (rc < 0)
		conf_err(&x, 0, "libinih failed (%d)", rc);
	for (size_t i = 0; i < x.c->nscopes; i++)
		conf_validate_scope(&x, &x.c->scopes[i], &x.ps[i]);
	conf_validate_redis(&x);
	/* A daemon with no scope refuses every request: an empty or truncated
	 * file (a reload caught between a truncate and a slow write) must not
	 * pass. A section header that failed was reported already, and may
	 * have been meant as the scope. */
	if (x.c->nscopes == 0 && x.bad_headers == 0)
		conf_err(&x, x.lineno,
			 "no [scope NAME] section: a conf needs at least one scope (is the file "
			 "empty or cut short?)");
	for (size_t i = 0; i < x.c->nscopes && x.nerrors == 0; i++)
		if (!conf_plan_compile(&x.c->scopes[i]))
			conf_err(&x, 0, "out of memory");
done:
	if (x.c != NULL) {
		for (size_t i = 0; i < x.c->nscopes; i++) {
			for (size_t j = 0; j < x.c->scopes[i].nclasses; j++)
				cv_class_clear(&x.ps[i].pend[j]);
			free(x.ps[i].pend);
		}
	}
	free(x.ps);
	if (x.nerrors > 0) {
		conf_free(x.c);
		return NULL;
	}
	return x.c;
}

struct conf *conf_load_string(const char *text, const char *name, FILE *errf)
{
	return conf_parse(text, strlen(text), name, errf);
}

struct conf *conf_load(const char *path, FILE *errf)
{
	struct conf *c = NULL;
	char *buf = NULL;
	size_t len = 0;
	FILE *f;

	if ((f = fopen(path, "r")) == NULL) {
		if (errf != NULL)
			fprintf(errf, "%s: cannot open: %s\n", path, strerror(errno));
		return NULL;
	}
	/* one byte more than allowed tells "too large" from "exactly the max" */
	if ((buf = malloc(CONF_FILE_MAX + 1)) == NULL) {
		if (errf != NULL)
			fprintf(errf, "%s: out of memory\n", path);
		goto done;
	}
	len = fread(buf, 1, CONF_FILE_MAX + 1, f);
	if (ferror(f)) {
		if (errf != NULL)
			fprintf(errf, "%s: read error: %s\n", path, strerror(errno));
	} else if (len > CONF_FILE_MAX) {
		if (errf != NULL)
			fprintf(errf, "%s: larger than %d bytes\n", path, CONF_FILE_MAX);
	} else {
		c = conf_parse(buf, len, path, errf);
	}
done:
	free(buf);
	fclose(f);
	return c;
}

void conf_free(struct conf *c)
{
	if (c == NULL)
		return;
	for (size_t i = 0; i < c->nscopes; i++) {
		struct conf_scope *s = &c->scopes[i];

		for (size_t j = 0; j < s->nrules; j++)
			conf_rule_clear(&s->rules[j]);
		for (size_t j = 0; j < s->nclasses; j++) {
			free(s->classes[j].name);
			free(s->classes[j].rules);
		}
		for (size_t j = 0; j < s->nweights; j++)
			free(s->weights[j].name);
		free(s->weights);
		conf_plan_free(s);
		free(s->name);
		free(s->rules);
		free(s->classes);
		free(s->quota_text);
		free(s->default_class);
		free(s->default_key);
	}
	free(c->scopes);
	free(c->path);
	free(c->socket);
	free(c->redis);
	free(c->prefix);
	free(c->redis_password_file);
	free(c->redis_user);
	free(c->sentinel_password_file);
	free(c->redis_tls_ca_file);
	free(c->redis_tls_cert_file);
	free(c->redis_tls_key_file);
	free(c->redis_tls_server_name);
	free(c->log_level);
	free(c->metrics);
	free(c->allow_uids.ids);
	free(c->allow_gids.ids);
	free(c);
}

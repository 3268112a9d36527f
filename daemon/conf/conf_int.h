/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * conf_int.h - what the pieces of the conf loader share, and nothing else
 * includes: the option-table types and flags, the parse context, error
 * reporting, the setters the type table names from other files, and the
 * validation pass. conf_load.c parses, conf_keys.c holds the tables and the
 * --help-conf text, conf_set.c, conf_rule.c and conf_ids.c the setters,
 * conf_check.c the checks after the parse, conf_reload.c the reload rules,
 * conf_msg.c the messages all of them format, conf_find.c the lookups.
 * Inside the folder the calls run one way: conf_load.c on top, the checks, the
 * tables and the setters below it, the messages, the lookups and the value
 * parsers at the bottom.
 */

#ifndef ADMITD_CONF_INT_H
#define ADMITD_CONF_INT_H

#include "conf.h"
#include "conf_value.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- option tables ---------------------------------------------------- */

enum conf_type {
	CT_STRING,	/* any non-empty text */
	CT_FILE,	/* a path the daemon reads: readable when the conf is loaded */
	CT_SOCKET,	/* a Unix socket path that fits sun_path */
	CT_URL,		/* a Redis URL, or empty for local mode */
	CT_HOSTPORT,	/* HOST:PORT of a TCP listener, or empty for none */
	CT_PREFIX,	/* a Redis key prefix: no blanks, no hash-tag braces */
	CT_NAME,	/* [A-Za-z0-9_.-]{1,64} */
	CT_OCTAL,	/* file mode */
	CT_INT,		/* int64, min..max */
	CT_SIZE,	/* int64 bytes, min..max */
	CT_DURATION,	/* int64 ms, min..max */
	CT_DOUBLE,	/* double, min..max */
	CT_BOOL,	/* bool */
	CT_LOG_LEVEL,	/* char *, one of log_levels */
	CT_FAIL_MODE,	/* enum conf_fail_mode */
	CT_QUOTA,	/* scope: quota, quota_window_ms, quota_text */
	CT_DIVISOR,	/* scope: fallback_divisor, fallback_divisor_auto */
	CT_RULE,	/* scope: appends to rules */
	CT_CLASS,	/* scope: appends to classes */
	CT_WEIGHT,	/* scope: appends to weights */
	CT_UIDS,	/* struct conf_ids: user names or uids, space separated */
	CT_GIDS,	/* struct conf_ids: group names or gids, space separated */
	CT_GROUP,	/* int64 gid: one group name or gid */
	CT_ADAPT_FLOOR, /* scope: adaptive_floor_n, adaptive_floor_w_ms */
	CT_ADAPT_STEP,	/* scope: adaptive_increase_pct, or _n and _w_ms */
	CT__COUNT
};

#define CONF_F_REPEATABLE   0x01 /* may appear more than once in a section */
#define CONF_F_ARG	    0x02 /* "key NAME = ..." allowed */
#define CONF_F_ARG_REQUIRED 0x04
#define CONF_F_EMPTY_NULL   0x08 /* an empty value means "unset" (NULL) */
/* How a reload applies a changed [admitd] key (conf_reload_keys). A key with
 * neither flag needs a restart, and the running value is kept: a key added
 * without thought for reloads is safe by default. (A key of a type with no
 * comparison, CS_OTHER, allow_uids and allow_gids, is taken from the new conf
 * without a word: both are read at each accept, and a reload checks the open
 * connections against them.) */
#define CONF_F_LIVE  0x10 /* read where it is used: the new value applies at once */
#define CONF_F_REDIS 0x20 /* the Redis connections are remade with it */

struct conf_key {
	const char *name;
	enum conf_type type;
	size_t offset;
	const char *def; /* as a user would write it; NULL: no default */
	int64_t min, max;
	unsigned flags;
	const char *help;
};

#define MS_SEC	      1000LL
#define MS_MIN	      (60 * MS_SEC)
#define MS_HOUR	      (60 * MS_MIN)
#define MS_DAY	      (24 * MS_HOUR)
#define ADMITD_OFF(f) offsetof(struct conf, f)
#define SCOPE_OFF(f)  offsetof(struct conf_scope, f)

/* Keys of each table, without its terminator (conf_keys.c checks them). */
#define CONF_ADMITD_NKEYS 31
#define CONF_SCOPE_NKEYS  24

extern const struct conf_key conf_admitd_keys[CONF_ADMITD_NKEYS + 1];
extern const struct conf_key conf_scope_keys[CONF_SCOPE_NKEYS + 1];

/* ---- parse state ------------------------------------------------------- */

enum conf_sect { SECT_NONE = 0, SECT_ADMITD, SECT_SCOPE, SECT_IGNORED };

/* Per-scope state that only the parse needs. */
struct conf_pscope {
	int seen[CONF_SCOPE_NKEYS]; /* line each key was set at; 0 = not set */
	struct cv_class *pend;	    /* parallel to scope->classes: names to resolve */
};

struct conf_ctx {
	struct conf *c;
	const char *name; /* file name in messages */
	FILE *errf;
	int nerrors;
	int lineno; /* physical line being parsed */
	enum conf_sect sect;
	size_t scope;	 /* SECT_SCOPE: index into c->scopes */
	int admitd_line; /* line of [admitd]; 0 = not seen */
	int bad_headers; /* section headers refused (a scope's among them, maybe) */
	int admitd_seen[CONF_ADMITD_NKEYS];
	struct conf_pscope *ps; /* parallel to c->scopes */
	const char *keyname;	/* the key being set, for messages */
	char errbuf[256];	/* setters format messages here */
	/* the reader's input */
	const char *p, *end;
};

/* ---- messages (conf_msg.c) -------------------------------------------- */

/* Report one problem; line 0 means "not about a line". */
void conf_err(struct conf_ctx *x, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Format a setter's message into the context's buffer and return it. */
const char *conf_fmt(struct conf_ctx *x, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* "1500ms" / "2s" / "1m": the largest unit that divides ms exactly. */
void conf_fmt_duration(char *buf, size_t len, int64_t ms);

/* ---- setters: one per type; NULL or a message ------------------------- */

#define FIELD(base, k, T) ((T *)(void *)((char *)(base) + (k)->offset))

typedef const char *(*conf_setter)(struct conf_ctx *x, const struct conf_key *k, void *base,
				   const char *arg, const char *val);

/* How a type stores its value, for comparing two confs (conf_reload_keys). */
enum conf_store { CS_OTHER = 0, CS_STRING, CS_INT, CS_INT64, CS_DOUBLE, CS_BOOL, CS_ENUM };

/* What each type is: its --help-conf words, its setter, how it is stored. */
struct conf_type_info {
	const char *doc; /* for conf_dump_keys */
	conf_setter set;
	enum conf_store store;
};

extern const struct conf_type_info conf_types[CT__COUNT];

/* conf_rule.c: rules and classes of a scope */
const char *conf_set_rule(struct conf_ctx *x, const struct conf_key *k, void *base, const char *arg,
			  const char *val);
const char *conf_set_class(struct conf_ctx *x, const struct conf_key *k, void *base,
			   const char *arg, const char *val);
const char *conf_set_weight(struct conf_ctx *x, const struct conf_key *k, void *base,
			    const char *arg, const char *val);
void conf_rule_clear(struct conf_rule *r);

/* conf_ids.c: users and groups */
const char *conf_set_ids(struct conf_ctx *x, const struct conf_key *k, void *base, const char *arg,
			 const char *val);
const char *conf_set_group(struct conf_ctx *x, const struct conf_key *k, void *base,
			   const char *arg, const char *val);

/* conf_check.c: the checks across keys, after the whole file */
void conf_validate_scope(struct conf_ctx *x, struct conf_scope *s, struct conf_pscope *ps);
void conf_validate_redis(struct conf_ctx *x);

#endif /* ADMITD_CONF_INT_H */

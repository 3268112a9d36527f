/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * rpool_drive.c - drive daemon/redis_client/rpool.c from a script on stdin, for tests.
 *
 *   rpool_drive [-n POOL] [-t TIMEOUT_MS] [-u USER] [-b MIN_MS:MAX_MS] URL [SCRIPT.lua...]
 *
 * The password comes from $RPOOL_DRIVE_PASSWORD (or the URL), never argv;
 * the sentinels' from $RPOOL_DRIVE_SENTINEL_PASSWORD. TLS: $RPOOL_DRIVE_TLS_CA,
 * _CERT, _KEY, _NAME (the rpool_conf fields) and _NOVERIFY (set: no checks).
 * Each SCRIPT.lua is scripts[i] in file order. Commands, one per line,
 * tokens split on blanks:
 *
 *   eval S NKEYS [ARG...]   rpool_eval of script S
 *   cmd ARG...              rpool_command
 *   multi N                 the next N lines are evals, sent with rpool_eval_multi
 *   evalfree S NKEYS ...    eval whose callback calls rpool_free
 *   evalchain S NKEYS ...   eval whose callback submits `cmd PING` (a new id)
 *   sleep MS                run the loop for MS before the next line
 *   wait                    until every accepted call has completed
 *   waitup MS / waitdown MS until the pool is up / down (prints a line)
 *   echo TEXT               print TEXT (a marker for the test)
 *   (a cluster master back while the pool stayed up prints `node_up ADDR`)
 *   nodes                   `nodes KIND N`, then N lines `node ADDR STATE slots=
 *                           calls= failures=` (rpool_topology, rpool_nodes)
 *   free                    rpool_free now
 *
 * Output, one line each: `call ID ok <reply>`, `call ID timeout|conn|shutdown`,
 * `call ID conn rejected` (not accepted), `state up|down`, `up`, `down`,
 * `waitup timeout`, `DUP call ID` (a second completion: a bug), and at EOF,
 * after all calls complete and the pool is freed, `bye calls=N dups=D`.
 * IDs count submissions from 1. Exit status 3 when a call completed twice.
 */

#include "rpool.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_TOK	  64
#define MAX_CALLS 100000

enum pause { P_NONE = 0, P_SLEEP, P_WAIT, P_UP, P_DOWN };
enum after { A_NONE = 0, A_FREE, A_CHAIN };

struct drv {
	struct event_base *base;
	struct rpool *pool;
	struct evbuffer *in;
	struct event *stdin_ev, *timer;
	enum pause pause;
	bool eof, done;
	int multi_left; /* eval lines still to collect for `multi` */
	char *multi_lines[MAX_TOK];
	int multi_n;
	int ncalls, outstanding, dups;
	unsigned char completions[MAX_CALLS + 1];
	enum after after[MAX_CALLS + 1];
};

static struct drv D;

static void pump(void);

static void put_str(const char *tag, const char *s, size_t len)
{
	printf("%s \"", tag);
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (ch == '"' || ch == '\\')
			printf("\\%c", ch);
		else if (ch < 0x20 || ch >= 0x7f)
			printf("\\x%02x", ch);
		else
			putchar(ch);
	}
	putchar('"');
}

static void put_rval(const struct rval *v)
{
	switch (v->type) {
	case RV_NIL: printf("nil"); break;
	case RV_INT: printf("int %lld", v->i); break;
	case RV_STR: put_str("str", v->s, v->len); break;
	case RV_STATUS: put_str("status", v->s, v->len); break;
	case RV_ERR: put_str("err", v->s, v->len); break;
	case RV_ARR:
		printf("arr [");
		for (size_t i = 0; i < v->n; i++) {
			if (i > 0)
				printf(", ");
			put_rval(&v->a[i]);
		}
		printf("]");
		break;
	}
}

static const char *const st_names[] = { "ok", "timeout", "conn", "shutdown" };

static int submit_cmd(int argc, char **argv);

static void on_call(void *arg, enum rp_status st, const struct rval *reply)
{
	int id = (int)(intptr_t)arg;

	if (D.completions[id]++ > 0) {
		printf("DUP call %d\n", id);
		D.dups++;
		return;
	}
	D.outstanding--;
	printf("call %d %s", id, st_names[st]);
	if (st == RP_OK && reply != NULL) {
		putchar(' ');
		put_rval(reply);
	}
	putchar('\n');
	if (D.after[id] == A_FREE && D.pool != NULL) {
		struct rpool *p = D.pool;
		D.pool = NULL;
		rpool_free(p);
	} else if (D.after[id] == A_CHAIN) {
		char ping[] = "PING";
		char *argv[1] = { ping };
		submit_cmd(1, argv);
	}
	pump();
}

static void on_state(void *arg, bool up)
{
	(void)arg;
	printf("state %s\n", up ? "up" : "down");
	pump();
}

static int next_id(void)
{
	if (D.ncalls >= MAX_CALLS) {
		fprintf(stderr, "rpool_drive: too many calls\n");
		exit(2);
	}
	return ++D.ncalls;
}

static void accepted(int id, int rc)
{
	if (rc == 0)
		D.outstanding++;
	else
		printf("call %d conn rejected\n", id);
}

static int submit_cmd(int argc, char **argv)
{
	int id = next_id();
	int rc = D.pool ? rpool_command(D.pool, (size_t)argc, (const char *const *)argv, NULL,
					on_call, (void *)(intptr_t)id)
			: -1;

	accepted(id, rc);
	return rc;
}

/* "S NKEYS ARG..." -> a rpool_call (argv points into tok). */
static bool parse_eval(int ntok, char **tok, struct rpool_call *c)
{
	char *end;

	if (ntok < 2)
		return false;
	c->script = strtoul(tok[0], &end, 10);
	if (*end != '\0')
		return false;
	c->nkeys = strtoul(tok[1], &end, 10);
	if (*end != '\0')
		return false;
	c->argc = (size_t)ntok - 2;
	c->argv = (const char *const *)(tok + 2);
	c->argvlen = NULL;
	c->cb = on_call;
	return true;
}

static int split(char *line, char **tok)
{
	int n = 0;

	for (char *t = strtok(line, " \t\r"); t != NULL && n < MAX_TOK; t = strtok(NULL, " \t\r"))
		tok[n++] = t;
	return n;
}

static void run_multi(void)
{
	struct rpool_call calls[MAX_TOK];
	char *toks[MAX_TOK][MAX_TOK];
	int ids[MAX_TOK], rc;

	for (int i = 0; i < D.multi_n; i++) {
		int n = split(D.multi_lines[i], toks[i]);
		memset(&calls[i], 0, sizeof(calls[i]));
		if (n < 1 || strcmp(toks[i][0], "eval") != 0 ||
		    !parse_eval(n - 1, toks[i] + 1, &calls[i])) {
			fprintf(stderr, "rpool_drive: multi wants eval lines\n");
			exit(2);
		}
		ids[i] = next_id();
		calls[i].arg = (void *)(intptr_t)ids[i];
	}
	rc = D.pool ? rpool_eval_multi(D.pool, (size_t)D.multi_n, calls) : -1;
	for (int i = 0; i < D.multi_n; i++) {
		accepted(ids[i], rc);
		free(D.multi_lines[i]);
	}
	D.multi_n = 0;
}

static void arm(int64_t ms)
{
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };

	evtimer_add(D.timer, &tv);
}

static void exec_line(char *line)
{
	char *tok[MAX_TOK];
	int n;

	if (D.multi_left > 0) {
		D.multi_lines[D.multi_n++] = strdup(line);
		if (--D.multi_left == 0)
			run_multi();
		return;
	}
	n = split(line, tok);
	if (n == 0 || tok[0][0] == '#')
		return;
	if (strcmp(tok[0], "eval") == 0 || strcmp(tok[0], "evalfree") == 0 ||
	    strcmp(tok[0], "evalchain") == 0) {
		struct rpool_call c = { 0 };
		int id, rc;
		if (!parse_eval(n - 1, tok + 1, &c)) {
			fprintf(stderr, "rpool_drive: bad eval line\n");
			exit(2);
		}
		id = next_id();
		D.after[id] = tok[0][4] == 'f' ? A_FREE : tok[0][4] == 'c' ? A_CHAIN : A_NONE;
		rc = D.pool ? rpool_eval(D.pool, c.script, c.nkeys, c.argc, c.argv, NULL, on_call,
					 (void *)(intptr_t)id)
			    : -1;
		accepted(id, rc);
	} else if (strcmp(tok[0], "cmd") == 0 && n > 1) {
		submit_cmd(n - 1, tok + 1);
	} else if (strcmp(tok[0], "multi") == 0 && n == 2) {
		D.multi_left = atoi(tok[1]);
		if (D.multi_left < 1 || D.multi_left > MAX_TOK) {
			fprintf(stderr, "rpool_drive: multi 1..%d\n", MAX_TOK);
			exit(2);
		}
	} else if (strcmp(tok[0], "sleep") == 0 && n == 2) {
		D.pause = P_SLEEP;
		arm(atoll(tok[1]));
	} else if (strcmp(tok[0], "wait") == 0) {
		D.pause = P_WAIT;
	} else if ((strcmp(tok[0], "waitup") == 0 || strcmp(tok[0], "waitdown") == 0) && n == 2) {
		D.pause = tok[0][4] == 'u' ? P_UP : P_DOWN;
		arm(atoll(tok[1]));
	} else if (strcmp(tok[0], "echo") == 0) {
		for (int i = 1; i < n; i++)
			printf("%s%s", tok[i], i + 1 < n ? " " : "\n");
	} else if (strcmp(tok[0], "nodes") == 0 && D.pool != NULL) {
		struct rpool_node_info ni[64];
		size_t k = rpool_nodes(D.pool, ni, 64);
		printf("nodes %s %zu\n", rpool_topology(D.pool), k);
		for (size_t i = 0; i < k && i < 64; i++)
			printf("node %s %s slots=%d calls=%llu failures=%llu\n", ni[i].addr,
			       ni[i].state, ni[i].slots, (unsigned long long)ni[i].calls,
			       (unsigned long long)ni[i].failures);
	} else if (strcmp(tok[0], "free") == 0) {
		struct rpool *p = D.pool;
		D.pool = NULL;
		rpool_free(p);
	} else {
		fprintf(stderr, "rpool_drive: unknown command %s\n", tok[0]);
		exit(2);
	}
}

/* A cluster master back while the pool stayed up. */
static void on_node_up(void *arg, const char *node)
{
	(void)arg;
	printf("node_up %s\n", node);
}

/* Is the current pause over? */
static bool unpaused(void)
{
	bool up = D.pool != NULL && rpool_up(D.pool);

	switch (D.pause) {
	case P_WAIT:
		if (D.outstanding == 0)
			D.pause = P_NONE;
		break;
	case P_UP:
	case P_DOWN:
		if (up == (D.pause == P_UP)) {
			printf("%s\n", up ? "up" : "down");
			evtimer_del(D.timer);
			D.pause = P_NONE;
		}
		break;
	default: break;
	}
	return D.pause == P_NONE;
}

static void pump(void)
{
	static bool pumping;
	size_t len;
	char *line;

	if (pumping || D.done)
		return; /* a callback from inside exec_line (rpool_free) */
	pumping = true;
	while (unpaused() && (line = evbuffer_readln(D.in, &len, EVBUFFER_EOL_LF)) != NULL) {
		exec_line(line);
		free(line);
	}
	if (D.eof && D.pause == P_NONE && evbuffer_get_length(D.in) == 0 && D.multi_left == 0 &&
	    D.outstanding == 0) {
		struct rpool *p = D.pool;
		D.done = true;
		D.pool = NULL;
		rpool_free(p);
		printf("bye calls=%d dups=%d\n", D.ncalls, D.dups);
		event_base_loopbreak(D.base);
	}
	pumping = false;
}

static void stdin_cb(evutil_socket_t fd, short what, void *arg)
{
	int n;

	(void)what;
	(void)arg;
	n = evbuffer_read(D.in, fd, 4096);
	if (n <= 0) {
		/* a last line without '\n' still counts */
		if (evbuffer_get_length(D.in) > 0)
			evbuffer_add(D.in, "\n", 1);
		D.eof = true;
		event_del(D.stdin_ev);
	}
	pump();
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	if (D.pause == P_UP || D.pause == P_DOWN)
		printf("%s timeout\n", D.pause == P_UP ? "waitup" : "waitdown");
	D.pause = P_NONE;
	pump();
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long n;

	if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 ||
	    fseek(f, 0, SEEK_SET) != 0 || (buf = calloc(1, (size_t)n + 1)) == NULL ||
	    fread(buf, 1, (size_t)n, f) != (size_t)n) {
		fprintf(stderr, "rpool_drive: cannot read %s\n", path);
		exit(2);
	}
	fclose(f);
	return buf;
}

int main(int argc, char **argv)
{
	struct rpool_conf conf = { .pool_size = 2, .timeout_ms = 250 };
	char **scripts = NULL, err[256];
	int opt, nscripts, rc;

	while ((opt = getopt(argc, argv, "n:t:u:b:")) != -1) {
		switch (opt) {
		case 'n': conf.pool_size = atoi(optarg); break;
		case 't': conf.timeout_ms = atoll(optarg); break;
		case 'u': conf.user = optarg; break;
		case 'b': {
			long lo, hi;
			if (sscanf(optarg, "%ld:%ld", &lo, &hi) != 2) {
				fprintf(stderr, "rpool_drive: -b MIN_MS:MAX_MS\n");
				return 2;
			}
			conf.backoff_min_ms = lo;
			conf.backoff_max_ms = hi;
			break;
		}
		default:
			fprintf(stderr, "usage: rpool_drive [-n POOL] [-t MS] [-u USER] "
					"[-b MIN:MAX] URL [SCRIPT.lua...]\n");
			return 2;
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "rpool_drive: URL required\n");
		return 2;
	}
	conf.url = argv[optind++];
	conf.password = getenv("RPOOL_DRIVE_PASSWORD");
	conf.sentinel_password = getenv("RPOOL_DRIVE_SENTINEL_PASSWORD");
	conf.tls_ca_file = getenv("RPOOL_DRIVE_TLS_CA");
	conf.tls_cert_file = getenv("RPOOL_DRIVE_TLS_CERT");
	conf.tls_key_file = getenv("RPOOL_DRIVE_TLS_KEY");
	conf.tls_server_name = getenv("RPOOL_DRIVE_TLS_NAME");
	conf.tls_no_verify = getenv("RPOOL_DRIVE_TLS_NOVERIFY") != NULL;
	conf.on_node_up = on_node_up;
	nscripts = argc - optind;
	scripts = calloc((size_t)nscripts + 1, sizeof(*scripts));
	for (int i = 0; i < nscripts; i++)
		scripts[i] = slurp(argv[optind + i]);
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);

	D.base = event_base_new();
	D.in = evbuffer_new();
	D.timer = evtimer_new(D.base, timer_cb, NULL);
	D.stdin_ev = event_new(D.base, STDIN_FILENO, EV_READ | EV_PERSIST, stdin_cb, NULL);
	D.pool = rpool_new(D.base, &conf, (const char *const *)scripts, (size_t)nscripts, on_state,
			   NULL, err, sizeof(err));
	if (D.pool == NULL) {
		printf("error %s\n", err);
		rc = 1;
		goto cleanup;
	}
	event_add(D.stdin_ev, NULL);
	event_base_dispatch(D.base);
	rc = D.dups > 0 ? 3 : 0;
cleanup:
	rpool_free(D.pool);
	event_free(D.stdin_ev);
	event_free(D.timer);
	evbuffer_free(D.in);
	event_base_free(D.base);
	for (int i = 0; i < nscripts; i++)
		free(scripts[i]);
	free(scripts);
	return rc;
}

/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * confwatch.h - notice that the conf file changed (watch_conf = yes).
 */

#ifndef ADMITD_CONFWATCH_H
#define ADMITD_CONFWATCH_H

#include <stdbool.h>

struct event_base;
struct confwatch;

typedef void confwatch_cb(void *arg);

/*
 * confwatch_new - watch the directory holding path (inotify) and call cb
 * when what path names (through any symlinks) has changed: a new file, new
 * contents, or a symlink now leading elsewhere. Events come in bursts (an
 * editor's write, a ConfigMap's swap), so cb runs once the directory has
 * been quiet for a moment, and only when the file really differs from the
 * last time it was seen. NULL (logged) on failure.
 */
struct confwatch *confwatch_new(struct event_base *base, const char *path, confwatch_cb *cb,
				void *arg);
void confwatch_free(struct confwatch *w);

#endif

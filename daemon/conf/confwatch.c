/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * confwatch.c - watch_conf: an inotify watch on the conf file's directory.
 *
 * Owns: the inotify descriptor, its read event and the settle timer. The
 * directory is watched rather than the file because a Kubernetes ConfigMap
 * volume never changes the file in place: the kubelet writes a new
 * timestamped directory, points a `..data` symlink at it by a rename, and
 * the conf (`admitd.conf -> ..data/admitd.conf`) is a symlink through
 * `..data`; a watch on the file's inode would never fire, and one on the
 * old target dies with the old directory. So any event in the directory
 * only arms a short timer; when it fires, the file is stat'ed through its
 * symlinks and reported when its identity (device, inode) or its size or
 * mtime differ from the last look. A file that is gone for the moment (a
 * rename in progress) is looked at again at the next event.
 *
 * A conf that is a symlink into another directory (/etc/admitd.conf ->
 * /srv/cfg/admitd.conf) changes where the symlink's directory sees
 * nothing: the directory of the file it resolves to is watched as well,
 * and resolved again after each look, so a retargeted symlink moves that
 * second watch to the new file's directory.
 */

#include "confwatch.h"

#include "log.h"

#include <errno.h>
#include <event2/event.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

/* Quiet time after the last event before the file is looked at. */
#define CONFWATCH_SETTLE_MS 100

struct confwatch {
	int fd;
	int wd_dir;  /* the conf path's own directory */
	int wd_real; /* the directory of the file it resolves to; -1: the same, or none */
	struct event *read_ev, *settle_ev;
	char *path;
	confwatch_cb *cb;
	void *arg;
	bool seen; /* st holds the last look */
	struct stat st;
};

/* Has the file changed since the last look? Updates the last look. */
static bool confwatch_changed(struct confwatch *w)
{
	struct stat st;
	bool changed;

	if (stat(w->path, &st) != 0)
		return false; /* gone for now: the next event looks again */
	changed = !w->seen || st.st_dev != w->st.st_dev || st.st_ino != w->st.st_ino ||
		  st.st_size != w->st.st_size || st.st_mtim.tv_sec != w->st.st_mtim.tv_sec ||
		  st.st_mtim.tv_nsec != w->st.st_mtim.tv_nsec;
	w->st = st;
	w->seen = true;
	return changed;
}

#define CONFWATCH_MASK                                                                      \
	(IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_DELETE | IN_ATTRIB | \
	 IN_MODIFY | IN_ONLYDIR)

/*
 * Watch the directory of the file the conf path resolves to, when it is
 * not the path's own directory: a symlink into another directory. Drops
 * the watch of a directory the symlink no longer leads to. A path that
 * does not resolve for now keeps the watch it has.
 */
static void confwatch_follow(struct confwatch *w)
{
	char *real = realpath(w->path, NULL), *slash;
	int wd;

	if (real == NULL)
		return;
	slash = strrchr(real, '/');
	if (slash == real)
		slash[1] = '\0';
	else if (slash != NULL)
		*slash = '\0';
	wd = inotify_add_watch(w->fd, real, CONFWATCH_MASK);
	if (wd < 0)
		log_warn("conf watch: cannot watch the directory the conf resolves to",
			 "dir=\"%s\" err=\"%s\"", real, strerror(errno));
	if (wd == w->wd_dir)
		wd = -1; /* the same directory (inotify gives one wd per inode) */
	if (w->wd_real >= 0 && w->wd_real != wd)
		(void)inotify_rm_watch(w->fd, w->wd_real); /* fails when it is gone: fine */
	if (wd >= 0 && wd != w->wd_real)
		log_info("watching the directory the conf resolves to", "dir=\"%s\"", real);
	w->wd_real = wd;
	free(real);
}

static void confwatch_settle_cb(evutil_socket_t fd, short what, void *arg)
{
	struct confwatch *w = arg;
	bool changed;

	(void)fd;
	(void)what;
	changed = confwatch_changed(w);
	confwatch_follow(w);
	if (changed)
		w->cb(w->arg);
}

static void confwatch_read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct confwatch *w = arg;
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	struct timeval settle = { 0, CONFWATCH_SETTLE_MS * 1000 };
	bool any = false;
	ssize_t n;

	(void)what;
	/* The events' names do not matter (any change in the directory may be
	 * the conf's: a symlink swap names ..data), only that there were some,
	 * and whether the directory itself went (no event comes after that). */
	while ((n = read(fd, buf, sizeof(buf))) > 0) {
		for (char *p = buf; p < buf + n;) {
			const struct inotify_event *ev = (const struct inotify_event *)(void *)p;
			/* the resolved file's directory going (a ConfigMap's old
			 * timestamped one) is routine: it is looked for again */
			if (ev->wd == w->wd_real && (ev->mask & IN_IGNORED))
				w->wd_real = -1;
			else if (ev->wd == w->wd_dir && (ev->mask & IN_IGNORED))
				log_warn("conf watch: the directory is gone, changes are no longer "
					 "seen (SIGHUP still reloads)",
					 "path=\"%s\"", w->path);
			p += sizeof(*ev) + ev->len;
		}
		any = true;
	}
	if (n < 0 && errno != EAGAIN && errno != EINTR)
		log_ratelimited(LOG_SLOT_NOTIFY, 10000, "conf watch: read failed", "err=\"%s\"",
				strerror(errno));
	if (any && evtimer_add(w->settle_ev, &settle) != 0)
		log_warn("conf watch: cannot arm its timer", NULL);
}

struct confwatch *confwatch_new(struct event_base *base, const char *path, confwatch_cb *cb,
				void *arg)
{
	struct confwatch *w = calloc(1, sizeof(*w));
	const char *errpos = NULL;
	char *dir = NULL, *slash;

	if (w == NULL) {
		log_error("cannot watch the conf: out of memory", NULL);
		return NULL;
	}
	w->fd = -1;
	w->wd_real = -1;
	if ((w->path = strdup(path)) == NULL || (dir = strdup(path)) == NULL) {
		errpos = "malloc";
		goto fail;
	}
	w->cb = cb;
	w->arg = arg;
	slash = strrchr(dir, '/');
	if (slash == NULL)
		strcpy(dir, ".");
	else if (slash == dir)
		dir[1] = '\0';
	else
		*slash = '\0';
	if ((w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) < 0) {
		errpos = "inotify_init1";
		goto fail;
	}
	if ((w->wd_dir = inotify_add_watch(w->fd, dir, CONFWATCH_MASK)) < 0) {
		errpos = "inotify_add_watch";
		goto fail;
	}
	w->read_ev = event_new(base, w->fd, EV_READ | EV_PERSIST, confwatch_read_cb, w);
	w->settle_ev = evtimer_new(base, confwatch_settle_cb, w);
	if (w->read_ev == NULL || w->settle_ev == NULL || event_add(w->read_ev, NULL) != 0) {
		errpos = "event_new";
		goto fail;
	}
	(void)confwatch_changed(w); /* the file as loaded: the baseline */
	log_info("watching the conf for changes", "dir=\"%s\"", dir);
	confwatch_follow(w);
	free(dir);
	return w;
fail:
	log_error("cannot watch the conf", "path=\"%s\" call=%s err=\"%s\"", path, errpos,
		  strerror(errno));
	free(dir);
	confwatch_free(w);
	return NULL;
}

void confwatch_free(struct confwatch *w)
{
	if (w == NULL)
		return;
	if (w->read_ev != NULL)
		event_free(w->read_ev);
	if (w->settle_ev != NULL)
		event_free(w->settle_ev);
	if (w->fd >= 0 && close(w->fd) != 0)
		log_warn("conf watch: close failed", "err=\"%s\"", strerror(errno));
	free(w->path);
	free(w);
}

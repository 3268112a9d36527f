/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * cli_run.c - `admit run`: one admission around one command.
 *
 * Owns: acquiring (not detached: if admit itself dies, the closed socket
 * releases), fork and exec of CMD with the forwarded signals blocked across
 * the fork, CMD killed by the kernel when admit dies (PR_SET_PDEATHSIG),
 * passing SIGINT, SIGTERM, SIGHUP and SIGQUIT on to CMD unless the kernel
 * already sent them to its whole process group, waiting for CMD, releasing
 * with its outcome (0: ok, --limited-exit N: limited, else error), and
 * exiting with CMD's status (128+N when signal N killed it).
 */

#include "cli.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t cli_child;
static volatile sig_atomic_t cli_session_leader; /* set before the handler is installed */

/*
 * Pass a signal on to CMD, unless the kernel sent it to our whole process
 * group, CMD included: a terminal's INTR (^C), QUIT (^\) or hangup reach the
 * foreground group with si_code SI_KERNEL (> 0), and forwarding them too
 * would give CMD two SIGINTs for one ^C. Sent by a process (kill(1), a
 * supervisor: SI_USER, SI_QUEUE, SI_TKILL, all <= 0) they reached admit
 * only. The kernel's hangup of a session goes to its leader only: when that
 * is admit, CMD has not seen it.
 */
static void cli_forward(int sig, siginfo_t *si, void *uctx)
{
	(void)uctx;
	if (si != NULL && si->si_code > 0 && sig != SIGTERM &&
	    !(sig == SIGHUP && cli_session_leader))
		return;
	if (cli_child > 0)
		kill((pid_t)cli_child, sig);
}

static const int cli_fwd_sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT };
#define NFWD (sizeof(cli_fwd_sigs) / sizeof(cli_fwd_sigs[0]))

/*
 * Fork and exec cmd with the forwarded signals blocked across the fork, so a
 * signal never finds the child's pid unset. SIGCHLD is set to its default
 * for admit's waitpid (an ignored SIGCHLD, inherited through exec, has the
 * kernel reap CMD by itself: ECHILD); CMD gets back the disposition admit
 * was started with. Returns the wait status, or -1 after saying on stderr
 * what failed.
 */
static int cli_spawn(char **cmd)
{
	struct sigaction sa = { .sa_sigaction = cli_forward, .sa_flags = SA_SIGINFO | SA_RESTART };
	struct sigaction chld = { .sa_handler = SIG_DFL }, oldchld;
	sigset_t block, old;
	int status, e;
	size_t i;
	pid_t pid, parent;

	cli_session_leader = getsid(0) == getpid();
	sigemptyset(&chld.sa_mask);
	sigaction(SIGCHLD, &chld, &oldchld);
	sigemptyset(&block);
	for (i = 0; i < NFWD; i++)
		sigaddset(&block, cli_fwd_sigs[i]);
	sigprocmask(SIG_BLOCK, &block, &old);
	fflush(NULL);
	parent = getpid();
	pid = fork();
	if (pid == 0) {
		/* The lease dies with admit (its socket closes), so CMD must too:
		 * even a SIGKILLed admit, which forwards nothing. Checked after
		 * the prctl, for an admit that died before it took hold. */
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
			fprintf(stderr, "admit: run: prctl: %s\n", strerror(errno));
			_exit(EXIT_CANNOT_EXEC);
		}
		if (getppid() != parent)
			_exit(EXIT_CANNOT_EXEC);
		sigaction(SIGCHLD, &oldchld, NULL);
		sigprocmask(SIG_SETMASK, &old, NULL);
		execvp(cmd[0], cmd);
		e = errno;
		fprintf(stderr, "admit: run: %s: %s\n", cmd[0], strerror(e));
		_exit(e == ENOENT ? EXIT_NOT_FOUND : EXIT_CANNOT_EXEC);
	}
	if (pid < 0) {
		e = errno;
		sigprocmask(SIG_SETMASK, &old, NULL);
		fprintf(stderr, "admit: run: fork: %s\n", strerror(e));
		return -1;
	}
	cli_child = pid;
	sigemptyset(&sa.sa_mask);
	for (i = 0; i < NFWD; i++)
		sigaction(cli_fwd_sigs[i], &sa, NULL);
	sigprocmask(SIG_SETMASK, &old, NULL);
	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR) {
			e = errno;
			cli_child = 0;
			fprintf(stderr, "admit: run: waiting for %s (pid %ld): %s\n", cmd[0],
				(long)pid, strerror(e));
			return -1;
		}
	}
	cli_child = 0;
	return status;
}

int cmd_run(struct admit *a, const struct cli_args *ar)
{
	struct cli_acq q = { .rq = ADMIT_REQ_INIT };
	struct admit_result r;
	const char *outcome;
	int64_t limited_exit = -1;
	char *lease;
	int rc, status;

	if (ar->set[O_LIMITED_EXIT] && (cli_int(ar->val[O_LIMITED_EXIT], &limited_exit) < 0 ||
					limited_exit < 1 || limited_exit > 255))
		return cli_usage_error("--limited-exit %s: want an exit status 1 to 255",
				       ar->val[O_LIMITED_EXIT]);
	rc = cli_req(ar, &q);
	if (rc != 0)
		return rc;
	/* not detached: if admit itself dies, closing the socket releases */
	admit_acquire(a, &q.rq, &r);
	cli_acq_free(&q);
	if (r.err != ADMIT_OK || r.lease == NULL) {
		if (r.err == ADMIT_OK)
			r.err = ADMIT_E_PROTO;
		rc = cli_fail("run", &r);
		admit_result_free(&r);
		return rc;
	}
	lease = r.lease;
	r.lease = NULL;
	admit_result_free(&r);
	status = cli_spawn(ar->cmd);
	if (status < 0) {
		rc = EXIT_SOFTWARE;
	} else if (WIFSIGNALED(status)) {
		rc = 128 + WTERMSIG(status);
	} else {
		rc = WEXITSTATUS(status);
	}
	outcome = status >= 0 && WIFEXITED(status) && rc == 0		   ? "ok"
		  : status >= 0 && WIFEXITED(status) && rc == limited_exit ? "limited"
									   : "error";
	if (admit_release_outcome(a, lease, NULL, 0, outcome, &r) != ADMIT_OK)
		cli_fail("run: release", &r);
	else if (!r.held)
		fprintf(stderr, "admit: run: the lease was no longer held when the command ended "
				"(it expired, or the daemon restarted)\n");
	admit_result_free(&r);
	free(lease);
	return rc;
}

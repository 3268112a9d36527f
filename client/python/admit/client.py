"""admit.client - the blocking, thread-safe client for admitd.

Owns: one Unix-socket connection per Client, shared by every thread that
uses it. Each request carries a fresh integer "id"; a reader thread reads
reply lines and hands each to the thread waiting on that id, so an acquire
that waits for seconds never holds up another thread's release, status or
acquire (the protocol lets a connection pipeline, and replies to acquires
come back out of order).

Connecting: a socket that is missing or refused (the daemon is not up
yet: it starts beside the application) is retried with a short jittered
backoff for up to connect_timeout, and never beyond the request's own
budget (an acquire with timeout=0.3 spends at most ~0.3 s connecting and
waiting together). Reconnecting follows one rule: a request in flight when
the connection dies fails with Unavailable (it is never sent again: an
acquire might have been admitted); the next request connects again, the
same way, including when the daemon closed the connection (a restart)
since the last request. After a fork the child closes its copy of the
parent's socket at once (so the parent's leases do not outlive the
parent) and connects again on first use.

Leases not asked with detach=True live as long as the connection: if it
closes (Client.close(), the process exits, the daemon restarts), admitd
releases them. A request line longer than max_line is refused here with
BadRequest and never sent: the daemon would answer it by closing the
connection, and so releasing every thread's non-detached leases on it.
"""

import itertools
import os
import socket as _socket
import threading
import time
import weakref

from . import _proto
from .errors import Unavailable, error_from_reply, unreachable

__all__ = ["Client", "Lease"]


class Lease(_proto.LeaseState):
    """An admitted acquire. Use it as a context manager (released on exit,
    with ``lease.tokens`` and ``lease.outcome`` if set) or call
    ``release(tokens=..., outcome=...)``."""

    def __init__(self, client, reply, scope, key=None, url=None, targets=None):
        super().__init__(reply, scope, key, url, targets)
        self._client = client

    def release(self, tokens=None, outcome=None):
        """Release the lease, charging ``tokens`` (default: ``self.tokens``)
        to the scope's token meters and reporting ``outcome`` (default:
        ``self.outcome``): "ok", "limited" (the upstream refused for rate:
        429, or 503 with Retry-After) or "error"; anything else is a
        ValueError, raised before anything is sent. Returns whether the
        daemon still held it (False once released, expired, or dropped with
        its connection). A second call after a reply sends nothing and
        returns False; after a lost reply it sends again, which is safe: the
        daemon settles a lease exactly once, and a repeat changes nothing."""
        if self.released:
            return False
        return self._client.release(self, tokens if tokens is not None else self.tokens,
                                    outcome if outcome is not None else self.outcome)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if self.released:
            return False
        try:
            self.release()
        except Unavailable:
            # The lease went with the connection (or expires at lease_ttl):
            # do not hide the with block's own exception behind this one.
            if exc_type is None:
                raise
        return False


class _Waiter(object):
    __slots__ = ("event", "reply")

    def __init__(self):
        self.event = threading.Event()
        self.reply = None


def _connect_once(path, timeout):
    """One connect attempt: a connected socket, or OSError."""
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
        sock.settimeout(None)
    except BaseException:
        sock.close()
        raise
    return sock


class _Conn(object):
    """One connected socket, its reader thread and its pending requests.
    Once dead it stays dead; the Client replaces it."""

    def __init__(self, path, sock):
        self.path = path
        self.pid = os.getpid()
        self.sock = sock
        self.lock = threading.Lock()  # pending, dead
        self.wlock = threading.Lock()  # one writer at a time, in queue order
        self.pending = _proto.Pending()
        self.dead = None  # the reason, once the connection is gone
        self.refused = None  # the daemon's forbidden line, when it refused us
        self.ids = itertools.count(1)
        self.reader = threading.Thread(
            target=self._read_loop, name="admit-reader:%s" % path, daemon=True
        )
        self.reader.start()

    def send(self, line, rid, waiter):
        """File waiter for the reply to line, then write the line. Both
        under wlock, so id-less lines queue in the order they are sent.
        Raises Unavailable only when the line was not filed; once filed,
        waiter always gets an answer (a write error included)."""
        with self.wlock:
            with self.lock:
                if self.refused is not None:
                    raise error_from_reply(self.refused)
                if self.dead is not None:
                    raise Unavailable("unavailable", self.dead)
                self.pending.add(rid, waiter, len(line))
            try:
                self.sock.sendall(line)
            except (BrokenPipeError, ConnectionResetError):
                # The daemon closed (it may have said why first, as for a
                # line too long): the reader reads what is left, then dies.
                pass
            except OSError as e:
                self._die("connection to admitd lost: %s" % e)

    def abandon(self, rid, waiter, orphan, release=False):
        """Stop waiting for rid (orphan: release its lease if admitted
        later). Returns the reply already handed to waiter, or None; with
        release, a lease that reply carries is released (nobody will see
        it). The reply is handed over under lock, so it is either here or
        filed as an orphan, never lost between."""
        with self.lock:
            self.pending.forget(rid, waiter, orphan)
            reply = waiter.reply
        lease = _proto.lease_of(reply) if release else None
        if lease is not None:
            self._release_in_background(lease)
        return reply

    def cancel(self, rid):
        """Ask the daemon to end the acquire sent with id rid, if it still
        waits: it answers that acquire "canceled" (spending nothing), which
        nobody reads. Call it after abandon(..., orphan=True), so that a
        lease admitted before the cancel arrives is released. A daemon
        without the op answers unknown_op, and the orphan's lease (when it
        is admitted later) is released all the same. Never raises: a
        connection that is gone took the acquire with it."""
        if rid is None:
            return
        try:
            self.send(*_proto.frame(_proto.cancel_request(rid), None, self.next_id()),
                      waiter=_Waiter())
        except Unavailable:
            pass

    def next_id(self):
        with self.lock:
            return next(self.ids)

    def hung_up(self):
        """Whether the daemon closed its end: the connection can take no
        new request. Its reader may still be handing out replies that came
        before the end."""
        try:
            fd = self.sock.fileno()
        except OSError:
            return True
        return fd < 0 or _proto.hung_up(fd)

    def retire(self):
        """Close a connection the daemon closed: let the reader hand out
        the replies that came before the end (it stops at the end), then
        fail what is still pending with Unavailable."""
        if self.reader is not threading.current_thread():
            self.reader.join(0.05)
        self.close()

    def _dispatch(self, reply):
        if _proto.refusal(reply):
            with self.lock:
                self.refused = reply
            self._die("admitd refused the connection: %s" % reply.get("message", ""))
            return
        with self.lock:
            waiter, orphan_lease = self.pending.take(reply)
            if waiter is not None:
                waiter.reply = reply
        if waiter is not None:
            waiter.event.set()
        elif orphan_lease is not None:
            self._release_in_background(orphan_lease)
        if _proto.closes_connection(reply):
            self._die("admitd closed the connection: a request line was too long")

    def _release_in_background(self, lease):
        # Not from the reader: a writer blocked on a full socket would wait
        # for the reader, and the reader for its write lock.
        threading.Thread(target=self._release_orphan, args=(lease,), daemon=True).start()

    def _release_orphan(self, lease):
        req = _proto.release_request(lease)
        try:
            self.send(*_proto.frame(req, None, self.next_id()), waiter=_Waiter())
        except Unavailable:
            pass  # the connection is gone, and the lease with it

    def _read_loop(self):
        reason = "connection to admitd closed"
        try:
            with self.sock.makefile("rb") as f:
                for line in f:
                    if line.strip():
                        self._dispatch(_proto.decode(line))
        except (OSError, ValueError) as e:
            reason = "connection to admitd lost: %s" % e
        self._die(reason)

    def _die(self, reason):
        with self.lock:
            if self.dead is not None:
                return
            self.dead = reason
            waiters = self.pending.clear()
        for w in waiters:
            w.reply = self.refused if self.refused is not None else _proto.lost(reason)
            w.event.set()
        try:
            self.sock.shutdown(_socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self):
        self._die("client closed")
        if self.reader is not threading.current_thread():
            self.reader.join(5)
        self.sock.close()

    def drop_inherited(self):
        """In a forked child: close this process's descriptor of the
        parent's socket, nothing more. No shutdown (it would end the
        parent's connection too), no lock (a parent thread may have held
        it at the fork), no reader to stop (threads do not survive fork).
        The parent's leases then go when the parent closes or exits."""
        self.dead = "connection inherited over fork"
        try:
            fd = self.sock.detach()  # regardless of the reader's makefile
        except OSError:
            return
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass


def _close_box(box):
    """Close the connection in box (one inherited over fork only in this
    process: that socket is the parent's) and empty the box."""
    c, box[0] = box[0], None
    if c is None:
        return
    if c.pid == os.getpid():
        c.close()
    else:
        c.drop_inherited()


# Every live Client, for the fork handler.
_clients = weakref.WeakSet()


def _after_fork_in_child():
    for client in list(_clients):
        client._lock = threading.Lock()  # a parent thread may have held it
        _close_box(client._box)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Client(object):
    """A connection to admitd, safe to share between threads.

    socket: the socket path (default: $ADMITD_SOCKET, else
    /run/admitd/admitd.sock). connect_timeout: seconds a connect keeps
    retrying a socket that is missing, refused or not accepting (the
    daemon is starting), within the request's own budget; 0 tries once.
    request_timeout: seconds to wait for a reply beyond the
    request's own wait budget (an acquire with timeout=None waits as long
    as the daemon takes); past it the call raises Unavailable. max_line:
    the longest request line sent, in bytes with its newline (keep it at
    most the daemon's max_line); a longer one raises BadRequest
    (line_too_long) without being sent."""

    def __init__(
        self,
        socket=None,
        connect_timeout=5.0,
        request_timeout=30.0,
        max_line=_proto.DEFAULT_MAX_LINE,
    ):
        self.socket = _proto.socket_path(socket)
        self.connect_timeout = _proto.check_connect_timeout(connect_timeout)
        self.request_timeout = request_timeout
        self.max_line = _proto.check_max_line(max_line)
        self._lock = threading.Lock()
        # The connection lives in a box a finalizer can reach without
        # keeping the Client alive: a Client dropped without close() still
        # closes its socket (and so releases its leases) when collected.
        self._box = [None]
        self._closed = False
        weakref.finalize(self, _close_box, self._box)
        _clients.add(self)

    # connection --------------------------------------------------------

    def _live(self):
        """The connection a request may use now, or None. One that died, was
        inherited over fork or that the daemon closed is dropped here."""
        with self._lock:
            if self._closed:
                raise Unavailable("unavailable", "client closed")
            c = self._box[0]
            if c is None:
                return None
            if c.dead is None and c.pid == os.getpid() and not c.hung_up():
                return c
            self._box[0] = None
        if c.pid != os.getpid():
            c.drop_inherited()
        else:
            c.retire()
        return None

    def _connection(self, budget=None):
        """(connection, seconds spent connecting). Connects when there is no
        live connection, retrying a daemon that is not up yet for
        connect_timeout, or budget seconds when that is shorter. Threads
        that connect at once each try; the first connection made is kept
        and the others closed (they carried nothing yet)."""
        t0 = time.monotonic()
        c = self._live()
        if c is not None:
            return c, 0.0
        window = self.connect_timeout if budget is None else min(self.connect_timeout, budget)
        deadline = t0 + max(window, 0.0)
        pauses = _proto.backoff()
        while True:
            try:
                sock = _connect_once(self.socket, max(deadline - time.monotonic(), 0.05))
            except OSError as e:
                left = deadline - time.monotonic()
                if not _proto.retryable(e) or left <= 0 or self._closed:
                    raise unreachable(self.socket, e) from None
                time.sleep(min(next(pauses), left))
                continue
            with self._lock:
                if self._closed:
                    sock.close()
                    raise Unavailable("unavailable", "client closed")
                c = self._box[0]
                if c is not None and c.dead is None and c.pid == os.getpid():
                    sock.close()  # another thread connected first
                else:
                    c = self._box[0] = _Conn(self.socket, sock)
            return c, time.monotonic() - t0

    def close(self):
        """Close the connection; admitd releases its non-detached leases.
        Requests still waiting raise Unavailable."""
        with self._lock:
            self._closed = True
            _close_box(self._box)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _roundtrip(self, req=None, line=None, wait=None, orphan=False):
        """Send one request (a dict, given an id here, or a raw line) and
        return its reply dict unchecked. wait: seconds the daemon may take
        before request_timeout starts counting (None: no limit). Time spent
        connecting is taken from an acquire's budget."""
        c, spent = self._connection(_proto.connect_budget(req))
        if spent > 0 and req is not None:
            req = _proto.spend(req, spent)
            if wait is not None:
                wait = max(0.0, wait - spent)
        line, rid = _proto.frame(req, line, c.next_id())
        _proto.check_line(line, self.max_line)
        w = _Waiter()
        c.send(line, rid, w)
        limit = None
        if wait is not None and self.request_timeout is not None:
            limit = wait + self.request_timeout
        try:
            done = w.event.wait(limit)
        except BaseException:
            # KeyboardInterrupt and the like: nobody will read the reply,
            # so a lease it already brought is released like an orphan's,
            # and a waiting acquire is canceled.
            if c.abandon(rid, w, orphan, release=True) is None and orphan:
                c.cancel(rid)
            raise
        if not done:
            reply = c.abandon(rid, w, orphan)
            if reply is None:
                if orphan:
                    c.cancel(rid)
                raise Unavailable("unavailable", "no reply from admitd within %.3gs" % limit)
            return reply
        return w.reply

    def request_line(self, line):
        """Raw transport: send one protocol line as is (str or bytes, the
        newline optional) and return the reply dict, error or not. A line
        with an "id" is matched by id; one without gets the next id-less
        reply. For tests, debugging and ops this version has no method for."""
        return self._roundtrip(line=line, wait=0.0)

    def request(self, req, wait=0.0):
        """Send a request dict (an "id" is added) and return the checked
        reply dict; raises the AdmitError for a failed reply."""
        return _proto.check(self._roundtrip(req, wait=wait))

    # API ---------------------------------------------------------------

    def acquire(self, scope=None, key=None, url=None, timeout=None, cls=None, cost=1,
                detach=False, targets=None, reserve=None, *, tenant=None):
        """Wait (up to timeout seconds; None: the scope's timeout) for a
        lease on key (or the host of url) in scope. Returns a Lease, a
        context manager that releases on exit. cost may be 0. targets
        (instead of scope/key/url/cls/cost): [{"scope", "key" or "url",
        "class", "cost"}, ...], admitted all together or not at all, one
        lease for all. reserve: {"output": 500} charges the token meters
        now; the release settles them with the real counts. tenant: whose
        request (1 to 64 of [A-Za-z0-9_.-]): a key's waiters are served among
        tenants by the scope's `weight` lines. Raises Timeout,
        BudgetExceeded (with retry_after), Limited (timeout=0),
        ExceedsLimit (never admissible: do not retry), UnknownScope,
        TooManyWaiters, ShuttingDown, Unavailable."""
        req = _proto.acquire_request(scope, key, url, timeout, cls, cost, detach, targets,
                                     reserve, tenant=tenant)
        reply = _proto.check(self._roundtrip(req, wait=timeout, orphan=True))
        return Lease(self, reply, scope, key, url, req.get("targets"))

    def try_acquire(self, scope=None, key=None, url=None, timeout=None, cls=None, cost=1,
                    detach=False, targets=None, reserve=None, *, tenant=None):
        """acquire that never waits: the Lease, or Limited (with retry_after).
        timeout is accepted for symmetry with acquire and ignored; the
        connect is tried once (a budget of 0 has no time to wait for it)."""
        return self.acquire(scope, key, url, 0, cls, cost, detach, targets, reserve,
                            tenant=tenant)

    def admit(self, scope=None, key=None, url=None, timeout=None, cls=None, cost=1,
              targets=None, *, tenant=None):
        """acquire for an admission with nothing to release ("lease":
        false): one round trip, for a scope that only limits rates. Waits
        as acquire does and returns an Admission (waited, remaining,
        reset_ms, backend, reply); raises as acquire does, and BadRequest
        when a scope's release would book something (max_concurrent,
        cluster_concurrency, a concurrency rule, min_delay, a tokens rule,
        adaptive)."""
        req = _proto.acquire_request(scope, key, url, timeout, cls, cost, targets=targets,
                                     lease=False, tenant=tenant)
        # an orphan when abandoned: canceled in the daemon, so it spends nothing
        reply = _proto.check(self._roundtrip(req, wait=timeout, orphan=True))
        return _proto.Admission(reply, scope, key, url, req.get("targets"))

    def try_admit(self, scope=None, key=None, url=None, timeout=None, cls=None, cost=1,
                  targets=None, *, tenant=None):
        """admit that never waits: the Admission, or Limited (with
        retry_after). timeout is accepted for symmetry and ignored."""
        return self.admit(scope, key, url, 0, cls, cost, targets, tenant=tenant)

    def release(self, lease, tokens=None, outcome=None):
        """Release a lease (a Lease or its string), charging tokens
        ({"input": 300, "output": 200}) to the token meters. outcome
        reports how the upstream call went: "ok", "limited" (429, or 503
        with Retry-After) or "error" (ValueError for anything else, before
        anything is sent); None sends none. Returns whether the daemon held
        it; releasing twice is harmless (False)."""
        reply = self.request(_proto.release_request(lease, tokens, outcome))
        held = reply.get("held") is True
        if isinstance(lease, _proto.LeaseState):
            lease.released = True
            lease.held = held
        return held

    def penalize(self, scope, key=None, url=None, retry_after=None):
        """Hold key (or url's host) in scope for retry_after: seconds (a
        number) or an upstream Retry-After header value (a string, delta
        seconds or HTTP-date). Only ever extends a hold. Neither key nor
        url: the scope's default key. Returns the reply."""
        return self.request(_proto.penalize_request(scope, key, url, retry_after))

    def reset(self, scope, key=None, url=None):
        """Clear the penalty and pacing of key (or url's host) in scope, on
        every daemon; neither key nor url: the scope's default key (its
        conf's ``key =``). Returns the reply ({"ok": True})."""
        return self.request(_proto.key_request("reset", scope, key, url))

    def override(self, scope, key=None, url=None, *, ttl, min_delay=None, rules=None):
        """For ttl seconds, replace key's (or url's host's; neither: the
        scope's default key) min_delay (seconds) and rule amounts (rules:
        {"0": 1} or {"burst": 20}, a rule by its conf name or its 0-based
        index in the scope), on every daemon; give min_delay or rules or
        both. A new override replaces the key's last one whole, and reset
        lifts it. The scope's override_max bounds loosening (BadRequest
        past it, or when the scope takes no overrides); Unavailable when
        Redis could not be told (the override holds on this daemon only).
        Returns the reply ({"ok": True, "backend": ..., "ttl_ms": ...})."""
        return self.request(_proto.override_request(scope, key, url, ttl, min_delay, rules))

    def inspect(self, scope, key=None, url=None, cls=None):
        """Where key (or url's host; neither: the scope's default key)
        stands in scope: the reply dict with
        backend, scope, key, penalty_ms, next_in_ms, leases, quota (when the
        scope has one: used, limit, frees_in_ms) and rules (rule, remaining,
        capacity, full_in_ms), and while an override is in force override
        (ttl_ms, min_delay_ms, rules), for class cls (None: the default
        class)."""
        return self.request(_proto.key_request("inspect", scope, key, url, cls))

    def status(self):
        """The daemon's status reply: version, uptime_s, backend, scopes."""
        return self.request({"op": "status"})

    def ping(self):
        """True when the daemon answers; Unavailable when it cannot be reached."""
        self.request({"op": "ping"})
        return True

"""admit.aio - the asyncio client for admitd, with the blocking Client's API.

Owns: one Unix-socket connection per AsyncClient (opened on first use with
asyncio.open_unix_connection), a reader task that hands each reply line to
the future waiting on its "id", and the async lease. Any number of tasks
may share an AsyncClient: a long acquire never delays another task's
request. An AsyncClient belongs to the event loop it first connects on.
A cancelled request never loses a lease: one its reply already brought, or
brings later, is released at once. Request lines longer than max_line are
refused with BadRequest without being sent (see admit.client). Connecting
and reconnecting follow admit.client's rules exactly: a daemon that is not
up yet is waited for (connect_timeout, within the request's budget); a
request in flight when the connection dies fails with Unavailable, and the
next request connects again, also when the daemon closed the connection
since the last one.

    async with AsyncClient() as client:
        async with client.acquire("api", "k", timeout=2) as lease:
            lease.tokens = {"input": 300, "output": 200}
"""

import asyncio
import collections.abc
import itertools
import time

from . import _proto
from .errors import Unavailable, unreachable

__all__ = ["AsyncClient", "AsyncLease"]

# Replies (status above all) may be long; asyncio's readline stops at 64 KiB.
_READ_LIMIT = 16 * 1024 * 1024


class AsyncLease(_proto.LeaseState):
    """An admitted acquire: ``async with`` it (released on exit, with
    ``lease.tokens`` and ``lease.outcome`` if set) or ``await
    lease.release(tokens=..., outcome=...)``."""

    def __init__(self, client, reply, scope, key=None, url=None, targets=None):
        super().__init__(reply, scope, key, url, targets)
        self._client = client

    async def release(self, tokens=None, outcome=None):
        """Release the lease; see Lease.release. Returns held (bool). A
        second call after a reply sends nothing and returns False (after a
        lost reply it sends again: the daemon settles a lease only once)."""
        if self.released:
            return False
        return await self._client.release(self, tokens if tokens is not None else self.tokens,
                                          outcome if outcome is not None else self.outcome)

    async def __aenter__(self):
        return self

    async def __aexit__(self, exc_type, exc, tb):
        if self.released:
            return False
        try:
            await self.release()
        except Unavailable:
            if exc_type is None:
                raise
        return False


class _AcquireCall(collections.abc.Coroutine):
    """What AsyncClient.acquire returns: a coroutine (await it, or hand it
    to asyncio.create_task, ensure_future, gather or wait_for) that gives
    the lease, and also an async context manager,
    ``async with client.acquire(...) as lease``, that releases it on exit.
    The acquire starts when it is first awaited, run or entered, and runs
    once: a second await raises RuntimeError, as a spent coroutine does."""

    def __init__(self, start):
        self._start = start
        self._inner = None
        self._lease = None

    def _coro(self):
        if self._inner is None:
            start, self._start = self._start, None
            if start is None:
                raise RuntimeError("this acquire was already awaited")
            self._inner = start()
        return self._inner

    def send(self, value):
        return self._coro().send(value)

    def throw(self, typ, val=None, tb=None):
        if val is None and tb is None:
            return self._coro().throw(typ)
        return self._coro().throw(typ, val, tb)

    def close(self):
        self._start = None
        if self._inner is not None:
            self._inner.close()

    def __await__(self):
        # One call, one acquire: awaiting it twice must not take two leases.
        if self._inner is not None:
            raise RuntimeError("this acquire was already awaited")
        return self._coro().__await__()

    async def __aenter__(self):
        self._lease = await self._coro()
        return self._lease

    async def __aexit__(self, exc_type, exc, tb):
        return await self._lease.__aexit__(exc_type, exc, tb)


class _AsyncConn(object):
    """One connected stream pair, its reader task and pending futures."""

    def __init__(self, path, reader, writer):
        self.path = path
        self.reader = reader
        self.writer = writer
        self.loop = asyncio.get_running_loop()
        self.wlock = asyncio.Lock()
        self.pending = _proto.Pending()
        self.dead = None
        self.ids = itertools.count(1)
        self.chores = set()  # background releases of orphaned leases
        self.task = self.loop.create_task(self._read_loop())

    @classmethod
    async def open(cls, path, timeout):
        """One connect attempt: the connection, or OSError (a connect that
        does not complete within timeout seconds is ETIMEDOUT)."""
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_unix_connection(path, limit=_READ_LIMIT), timeout
            )
        except asyncio.TimeoutError:
            raise TimeoutError("connect timed out") from None
        return cls(path, reader, writer)

    def hung_up(self):
        """Whether the daemon closed its end (see admit.client)."""
        if self.reader.at_eof():
            return True
        sock = self.writer.get_extra_info("socket")
        if sock is None:
            return True
        try:
            fd = sock.fileno()
        except OSError:
            return True
        return fd < 0 or _proto.hung_up(fd)

    async def retire(self):
        """Close a connection the daemon closed, after its reader handed out
        the replies that came before the end."""
        if not self.task.done():
            await asyncio.wait({self.task}, timeout=0.05)
        await self.close()

    async def send(self, line, rid, fut):
        """File fut for the reply to line, then write it. Raises
        Unavailable only when the line was not filed; once filed, fut
        always gets an answer (a write error included)."""
        if self.dead is not None:
            raise Unavailable("unavailable", self.dead)
        # Filing and writing with no await between keeps the FIFO of
        # id-less lines in the order the daemon sees them.
        self.pending.add(rid, fut, len(line))
        try:
            self.writer.write(line)
            async with self.wlock:
                await self.writer.drain()
        except (OSError, RuntimeError) as e:
            # fut has the reply that came in first (line_too_long, say),
            # else the connection's death.
            self._die("connection to admitd lost: %s" % e)

    def abandon(self, rid, fut, orphan):
        """The caller of rid gives up (cancelled, timed out, failed): stop
        waiting (orphan: release its lease if admitted later), and release
        the lease of a reply fut already holds (taken in the same loop pass
        as the cancel: the caller will never see it). An orphan acquire
        still unanswered is canceled in the daemon: it answers "canceled"
        and spends nothing (a daemon without the op answers unknown_op, and
        the lease, if admitted later, is released as it arrives)."""
        self.pending.forget(rid, fut, orphan)
        if fut.done() and not fut.cancelled():
            self._release_soon(_proto.lease_of(fut.result()))
        elif orphan and rid is not None and self.dead is None:
            self._cancel_now(rid)

    def _cancel_now(self, rid):
        # Written at once, not in a task: the cancel must not wait for a
        # loop pass in which the daemon could admit the acquire.
        line, cid = _proto.frame(_proto.cancel_request(rid), None, next(self.ids))
        self.pending.add(cid, self.loop.create_future(), len(line))
        try:
            self.writer.write(line)
        except (OSError, RuntimeError) as e:
            self._die("connection to admitd lost: %s" % e)

    def _dispatch(self, reply):
        fut, lease = self.pending.take(reply)
        if fut is not None:
            if not fut.done():
                fut.set_result(reply)
                lease = None
            else:
                # Cancelled before its caller could forget it: nobody reads it.
                lease = _proto.lease_of(reply)
        self._release_soon(lease)
        if _proto.closes_connection(reply):
            self._die("admitd closed the connection: a request line was too long")

    def _release_soon(self, lease):
        if lease is None:
            return
        t = self.loop.create_task(self._release_orphan(lease))
        self.chores.add(t)
        t.add_done_callback(self.chores.discard)

    async def _release_orphan(self, lease):
        req = _proto.release_request(lease)
        try:
            await self.send(*_proto.frame(req, None, next(self.ids)), self.loop.create_future())
        except Unavailable:
            pass  # the connection is gone, and the lease with it

    async def _read_loop(self):
        reason = "connection to admitd closed"
        try:
            while True:
                line = await self.reader.readline()
                if not line:
                    break
                if line.strip():
                    self._dispatch(_proto.decode(line))
        except (OSError, ValueError, asyncio.IncompleteReadError) as e:
            reason = "connection to admitd lost: %s" % e
        except asyncio.CancelledError:
            reason = "client closed"
        self._die(reason)

    def _die(self, reason):
        if self.dead is not None:
            return
        self.dead = reason
        for f in self.pending.clear():
            if not f.done():
                f.set_result(_proto.lost(reason))
        self.writer.close()

    async def close(self):
        self._die("client closed")
        if not self.task.done():
            self.task.cancel()
        try:
            await self.task
        except asyncio.CancelledError:
            pass
        try:
            await self.writer.wait_closed()
        except OSError:
            pass


class AsyncClient(object):
    """The asyncio twin of admit.Client: same arguments, same methods, each
    a coroutine (acquire and try_acquire also work with ``async with``)."""

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
        self._conn = None
        self._connecting = set()  # futures of the connects in progress
        self._closed = False

    async def _live(self):
        """The connection a request may use now, or None; one that died or
        that the daemon closed is dropped (see Client._live)."""
        if self._closed:
            raise Unavailable("unavailable", "client closed")
        c = self._conn
        if c is None:
            return None
        if c.dead is None and not c.hung_up():
            return c
        self._conn = None
        await c.retire()
        return None

    async def _connection(self, budget=None):
        """(connection, seconds spent connecting): see Client._connection.
        Tasks that connect at once each try; the first connection made is
        kept, the others closed."""
        t0 = time.monotonic()
        c = await self._live()
        if c is not None:
            return c, 0.0
        window = self.connect_timeout if budget is None else min(self.connect_timeout, budget)
        deadline = t0 + max(window, 0.0)
        done = asyncio.get_running_loop().create_future()
        self._connecting.add(done)
        try:
            c = await self._connect(deadline)
        finally:
            self._connecting.discard(done)
            done.set_result(None)
        return c, time.monotonic() - t0

    async def _connect(self, deadline):
        pauses = _proto.backoff()
        while True:
            try:
                conn = await _AsyncConn.open(
                    self.socket, max(deadline - time.monotonic(), 0.05)
                )
            except OSError as e:
                left = deadline - time.monotonic()
                if not _proto.retryable(e) or left <= 0 or self._closed:
                    raise unreachable(self.socket, e) from None
                await asyncio.sleep(min(next(pauses), left))
                continue
            if self._closed:  # close() ran while we connected
                await conn.close()
                raise Unavailable("unavailable", "client closed")
            if self._conn is not None and self._conn.dead is None:
                await conn.close()  # another task connected first
                return self._conn
            self._conn = conn
            return conn

    async def close(self):
        """Close the connection; admitd releases its non-detached leases.
        Connects in progress are waited for and their connections closed."""
        self._closed = True
        c, self._conn = self._conn, None
        if c is not None:
            await c.close()
        for fut in list(self._connecting):
            await asyncio.shield(fut)  # the connect saw _closed and gave up

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()
        return False

    async def _roundtrip(self, req=None, line=None, wait=None, orphan=False):
        c, spent = await self._connection(_proto.connect_budget(req))
        if spent > 0 and req is not None:
            req = _proto.spend(req, spent)
            if wait is not None:
                wait = max(0.0, wait - spent)
        line, rid = _proto.frame(req, line, next(c.ids))
        _proto.check_line(line, self.max_line)
        fut = c.loop.create_future()
        limit = None
        if wait is not None and self.request_timeout is not None:
            limit = wait + self.request_timeout
        try:
            # send is inside: a cancel while it waits for the write lock or
            # drain leaves the line filed (and maybe sent) all the same.
            await c.send(line, rid, fut)
            return await asyncio.wait_for(fut, limit)
        except asyncio.TimeoutError:
            c.abandon(rid, fut, orphan)
            raise Unavailable("unavailable", "no reply from admitd within %.3gs" % limit) from None
        except BaseException:
            c.abandon(rid, fut, orphan)
            raise

    async def request_line(self, line):
        """Raw transport; see Client.request_line."""
        return await self._roundtrip(line=line, wait=0.0)

    async def request(self, req, wait=0.0):
        """Send a request dict; the checked reply dict (see Client.request)."""
        return _proto.check(await self._roundtrip(req, wait=wait))

    async def _acquire(self, scope, key, url, timeout, cls, cost, detach, targets, reserve,
                       tenant=None):
        req = _proto.acquire_request(scope, key, url, timeout, cls, cost, detach, targets,
                                     reserve, tenant=tenant)
        reply = _proto.check(await self._roundtrip(req, wait=timeout, orphan=True))
        return AsyncLease(self, reply, scope, key, url, req.get("targets"))

    def acquire(self, scope=None, key=None, url=None, timeout=None, cls=None, cost=1,
                detach=False, targets=None, reserve=None, *, tenant=None):
        """See Client.acquire. A coroutine: ``await`` it for an AsyncLease
        (or run it as a task), or ``async with client.acquire(...) as
        lease``. Cancelling the task that awaits it sends the daemon a
        cancel, so the acquire spends nothing; a lease admitted before the
        cancel arrived is released at once."""
        return _AcquireCall(
            lambda: self._acquire(scope, key, url, timeout, cls, cost, detach, targets, reserve,
                                  tenant)
        )

    def try_acquire(self, scope=None, key=None, url=None, timeout=None, cls=None, cost=1,
                    detach=False, targets=None, reserve=None, *, tenant=None):
        """See Client.try_acquire (never waits; raises Limited)."""
        return self.acquire(scope, key, url, 0, cls, cost, detach, targets, reserve,
                            tenant=tenant)

    async def admit(self, scope=None, key=None, url=None, timeout=None, cls=None, cost=1,
                    targets=None, *, tenant=None):
        """See Client.admit: an Admission, nothing to release."""
        req = _proto.acquire_request(scope, key, url, timeout, cls, cost, targets=targets,
                                     lease=False, tenant=tenant)
        # an orphan when abandoned: canceled in the daemon, so it spends nothing
        reply = _proto.check(await self._roundtrip(req, wait=timeout, orphan=True))
        return _proto.Admission(reply, scope, key, url, req.get("targets"))

    async def try_admit(self, scope=None, key=None, url=None, timeout=None, cls=None, cost=1,
                        targets=None, *, tenant=None):
        """See Client.try_admit (never waits; raises Limited)."""
        return await self.admit(scope, key, url, 0, cls, cost, targets, tenant=tenant)

    async def release(self, lease, tokens=None, outcome=None):
        """See Client.release."""
        reply = await self.request(_proto.release_request(lease, tokens, outcome))
        held = reply.get("held") is True
        if isinstance(lease, _proto.LeaseState):
            lease.released = True
            lease.held = held
        return held

    async def penalize(self, scope, key=None, url=None, retry_after=None):
        """See Client.penalize."""
        return await self.request(_proto.penalize_request(scope, key, url, retry_after))

    async def reset(self, scope, key=None, url=None):
        """See Client.reset."""
        return await self.request(_proto.key_request("reset", scope, key, url))

    async def override(self, scope, key=None, url=None, *, ttl, min_delay=None, rules=None):
        """See Client.override."""
        return await self.request(
            _proto.override_request(scope, key, url, ttl, min_delay, rules))

    async def inspect(self, scope, key=None, url=None, cls=None):
        """See Client.inspect."""
        return await self.request(_proto.key_request("inspect", scope, key, url, cls))

    async def status(self):
        """See Client.status."""
        return await self.request({"op": "status"})

    async def ping(self):
        """See Client.ping."""
        await self.request({"op": "ping"})
        return True

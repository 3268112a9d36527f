"""admit.aio - the asyncio client for admitd, with the blocking Client's API.

Owns: one Unix-socket connection per AsyncClient (opened on first use with
asyncio.open_unix_connection), a reader task that hands each reply line to
the future waiting on its "id", and the async lease. Any number of tasks
may share an AsyncClient: a long acquire never delays another task's
request. An AsyncClient belongs to the event loop it first connects on.
A cancelled request never loses a lease: one its reply already brought, or
brings later, is released at once. Request lines longer than max_line are
refused with BadRequest without being sent (see admit.client).

    async with AsyncClient() as client:
        async with client.acquire("api", "k", timeout=2) as lease:
            lease.tokens = {"input": 300, "output": 200}
"""

import asyncio
import itertools

from . import _proto
from .errors import Unavailable, unreachable

__all__ = ["AsyncClient", "AsyncLease"]

# Replies (status above all) may be long; asyncio's readline stops at 64 KiB.
_READ_LIMIT = 16 * 1024 * 1024


class AsyncLease(_proto.LeaseState):
    """An admitted acquire: ``async with`` it (released on exit, with
    ``lease.tokens`` if set) or ``await lease.release(tokens=...)``."""

    def __init__(self, client, reply, scope, key=None, url=None):
        super().__init__(reply, scope, key, url)
        self._client = client

    async def release(self, tokens=None):
        """Release the lease; see Client.release. Returns held (bool)."""
        return await self._client.release(self, tokens if tokens is not None else self.tokens)

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


class _AcquireCall(object):
    """What AsyncClient.acquire returns: await it for the lease, or use it
    directly as ``async with client.acquire(...) as lease``."""

    def __init__(self, start):
        self._start = start
        self._lease = None

    def _coro(self):
        # One call, one acquire: awaiting it twice must not take two leases.
        start, self._start = self._start, None
        if start is None:
            raise RuntimeError("this acquire was already awaited")
        return start()

    def __await__(self):
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
    async def open(cls, path, connect_timeout):
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_unix_connection(path, limit=_READ_LIMIT), connect_timeout
            )
        except (OSError, asyncio.TimeoutError) as e:
            raise unreachable(path, str(e) or "connect timed out") from None
        return cls(path, reader, writer)

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
        as the cancel: the caller will never see it)."""
        self.pending.forget(rid, fut, orphan)
        if fut.done() and not fut.cancelled():
            self._release_soon(_proto.lease_of(fut.result()))

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
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.max_line = _proto.check_max_line(max_line)
        self._conn = None
        self._connecting = None
        self._closed = False

    async def _connection(self):
        if self._closed:
            raise Unavailable("unavailable", "client closed")
        if self._conn is not None and self._conn.dead is None:
            return self._conn
        # One connect at a time; tasks arriving meanwhile share its result.
        if self._connecting is None:
            self._connecting = asyncio.ensure_future(self._connect())
        fut = self._connecting
        try:
            return await asyncio.shield(fut)
        finally:
            if fut.done() and self._connecting is fut:
                self._connecting = None

    async def _connect(self):
        if self._conn is not None:
            await self._conn.close()
        conn = await _AsyncConn.open(self.socket, self.connect_timeout)
        if self._closed:  # close() ran while we connected
            await conn.close()
            raise Unavailable("unavailable", "client closed")
        self._conn = conn
        return conn

    async def close(self):
        """Close the connection; admitd releases its non-detached leases.
        A connect in progress is waited for and its connection closed."""
        self._closed = True
        c, self._conn = self._conn, None
        if c is not None:
            await c.close()
        connecting = self._connecting
        if connecting is not None and not connecting.done():
            try:
                await asyncio.shield(connecting)
            except Exception:
                pass  # the connect failed, or saw _closed and gave up

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()
        return False

    async def _roundtrip(self, req=None, line=None, wait=None, orphan=False):
        c = await self._connection()
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

    async def _acquire(self, scope, key, url, timeout, cls, cost, detach):
        req = _proto.acquire_request(scope, key, url, timeout, cls, cost, detach)
        reply = _proto.check(await self._roundtrip(req, wait=timeout, orphan=True))
        return AsyncLease(self, reply, scope, key, url)

    def acquire(self, scope, key=None, url=None, timeout=None, cls=None, cost=1, detach=False):
        """See Client.acquire. ``await`` it for an AsyncLease, or
        ``async with client.acquire(...) as lease``. A cancelled acquire
        that the daemon admits later has its lease released at once."""
        return _AcquireCall(
            lambda: self._acquire(scope, key, url, timeout, cls, cost, detach)
        )

    def try_acquire(self, scope, key=None, url=None, timeout=None, cls=None, cost=1, detach=False):
        """See Client.try_acquire (never waits; raises Limited)."""
        return _AcquireCall(lambda: self._acquire(scope, key, url, 0, cls, cost, detach))

    async def release(self, lease, tokens=None):
        """See Client.release."""
        reply = await self.request(_proto.release_request(lease, tokens))
        held = reply.get("held") is True
        if isinstance(lease, _proto.LeaseState):
            lease.released = True
            lease.held = held
        return held

    async def penalize(self, scope, key=None, url=None, retry_after=None):
        """See Client.penalize."""
        return await self.request(_proto.penalize_request(scope, key, url, retry_after))

    async def status(self):
        """See Client.status."""
        return await self.request({"op": "status"})

    async def ping(self):
        """See Client.ping."""
        await self.request({"op": "ping"})
        return True

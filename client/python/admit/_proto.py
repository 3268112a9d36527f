"""admit._proto - the wire codec both clients share; it never touches a socket.

Owns: the default socket path resolution, turning API arguments into
request dicts (acquire with its targets and reservation, release,
penalize, reset, override, inspect), the key the daemon derives from a
URL, encoding a request as one JSON line, checking a reply (raise the
matching AdmitError or hand back the dict), the state a lease carries, and
the connect rules both clients follow: which connect errors mean "the
daemon is not up yet" (retried with a jittered backoff within the connect
timeout and the request's budget), and how a connection the daemon closed
is recognised before a request is sent on it. The blocking client
(client.py) and the asyncio client (aio.py) differ only in how lines move.
"""

import collections
import errno
import json
import math
import os
import random
import select

from .errors import BadRequest, error_from_reply, reply_int, reply_limits

DEFAULT_SOCKET = "/run/admitd/admitd.sock"
SOCKET_ENV = "ADMITD_SOCKET"

# The daemon's default max_line: the longest line (here: with its newline)
# a client sends. A longer one would get an id-less line_too_long and the
# connection closed, taking its non-detached leases with it.
DEFAULT_MAX_LINE = 64 * 1024
LINE_TOO_LONG = "line_too_long"
# The one line a peer outside allow_uids/allow_gids gets, at connect.
FORBIDDEN = "forbidden"

# What the wire says for a reply that is not a JSON object.
BAD_REPLY = "bad_reply"


def check_max_line(max_line):
    """max_line as given to a client: a whole number of bytes >= 2."""
    if isinstance(max_line, bool) or not isinstance(max_line, int):
        raise TypeError("max_line must be a whole number of bytes, not %r" % (max_line,))
    if max_line < 2:
        raise ValueError("max_line must be >= 2, not %r" % (max_line,))
    return max_line


def check_line(line, max_line):
    """Raise BadRequest (line_too_long) for a wire line (bytes, newline
    included) longer than max_line, before it is sent."""
    if len(line) > max_line:
        raise BadRequest(
            LINE_TOO_LONG,
            "request line of %d bytes is longer than max_line (%d); not sent"
            % (len(line), max_line),
        )


def socket_path(socket=None):
    """The socket to use: the argument, else $ADMITD_SOCKET, else the default."""
    if socket:
        return os.fspath(socket)
    env = os.environ.get(SOCKET_ENV)
    if env:
        return env
    return DEFAULT_SOCKET


def seconds_to_ms(seconds, what, max_ms=None, max_text="24h"):
    """A non-negative duration in seconds (int or float) as whole
    milliseconds, rounded up so that a tiny positive wait never becomes 0
    ("do not wait"). Past max_ms (max_text says it for people) it is
    refused here, in seconds, the unit it was given in (the daemon would
    word it in ms)."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError("%s must be a number of seconds, not %r" % (what, seconds))
    if seconds < 0 or math.isnan(seconds) or math.isinf(seconds):
        raise ValueError("%s must be a finite number >= 0, not %r" % (what, seconds))
    ms = int(math.ceil(seconds * 1000.0 - 1e-9))
    if max_ms is not None and ms > max_ms:
        raise ValueError("%s must be at most %d seconds (%s), not %r"
                         % (what, max_ms // 1000, max_text, seconds))
    return ms


def check_connect_timeout(seconds):
    """connect_timeout as given to a client: seconds >= 0 (0: try once)."""
    seconds_to_ms(seconds, "connect_timeout")
    return float(seconds)


def url_host(url):
    """The key the daemon derives from a URL: its host, ASCII-lowercased,
    without scheme, user info, port or IPv6 brackets ("https://u@[::1]:8/x"
    is "::1"); None when the URL has no host (the daemon refuses it). The
    same rules as the daemon's, byte for byte."""
    if not isinstance(url, str):
        return None
    b = url.encode("utf-8", "surrogatepass").split(b"\0", 1)[0]
    i = b.find(b"://")
    if i >= 0:
        p = b[i + 3:]
    elif b.startswith(b"//"):
        p = b[2:]
    else:
        return None
    end = len(p)
    for c in b"/?#":
        j = p.find(bytes([c]))
        if 0 <= j < end:
            end = j
    auth = p[:end]
    auth = auth[auth.rfind(b"@") + 1:]  # the host follows the last '@'
    if auth.startswith(b"["):
        rb = auth.find(b"]")
        if rb < 0:
            return None
        host = auth[1:rb]
    else:
        host = auth.split(b":", 1)[0]
    if not host or len(host) > MAX_KEY:
        return None
    return host.lower().decode("utf-8", "replace")


# Limits of the protocol a client checks before sending.
MAX_TARGETS = 8
MAX_TOKENS = 16
MAX_KEY = 512
MAX_COST = 1000000000  # cost, and each token count
MAX_WAIT_MS = 86400000  # timeout_ms and retry_after_ms: 24h
MAX_OVERRIDE_TTL_MS = 2592000000  # an override's ttl_ms: 30 days
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1

# The fields of one target of a multi-target acquire.
TARGET_FIELDS = ("scope", "key", "url", "class", "cost")


def _target(req, key, url):
    if key is not None and url is not None:
        raise ValueError("give key or url, not both")
    if key is not None:
        req["key"] = str(key)
    elif url is not None:
        req["url"] = str(url)


def _cost(cost):
    if isinstance(cost, bool) or not isinstance(cost, int) or cost < 0:
        raise ValueError("cost must be a whole number >= 0, not %r" % (cost,))
    if cost > MAX_COST:
        raise ValueError("cost must be at most %d, not %r" % (MAX_COST, cost))
    return cost


def token_counts(counts, what):
    """A {name: count} dict as sent (release's tokens, acquire's reserve):
    at most MAX_TOKENS names, each a non-empty string, counts whole numbers
    >= 0."""
    if not isinstance(counts, dict):
        raise TypeError("%s must be a dict of meter name to count, not %r" % (what, counts))
    if len(counts) > MAX_TOKENS:
        raise ValueError("%s: at most %d names, not %d" % (what, MAX_TOKENS, len(counts)))
    out = {}
    for name, n in counts.items():
        if not isinstance(name, str) or not name:
            raise ValueError("%s: meter names are non-empty strings, not %r" % (what, name))
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError("%s: %r must be a whole number >= 0, not %r" % (what, name, n))
        if n > MAX_COST:
            raise ValueError("%s: %r must be at most %d, not %r" % (what, name, MAX_COST, n))
        out[name] = n
    return out


def _targets(targets):
    """The "targets" array of a multi-target acquire, checked."""
    if isinstance(targets, (str, bytes, dict)) or not hasattr(targets, "__iter__"):
        raise TypeError("targets must be a list of target dicts, not %r" % (targets,))
    out = []
    for t in targets:
        if not isinstance(t, dict):
            raise TypeError("each target must be a dict, not %r" % (t,))
        unknown = sorted(set(t) - set(TARGET_FIELDS))
        if unknown:
            raise ValueError("unknown target field(s) %s; a target has %s"
                             % (", ".join(map(repr, unknown)), ", ".join(TARGET_FIELDS)))
        if t.get("scope") is None:
            raise ValueError("each target needs a scope: %r" % (t,))
        w = {"scope": str(t["scope"])}
        _target(w, t.get("key"), t.get("url"))
        if t.get("class") is not None:
            w["class"] = str(t["class"])
        if t.get("cost") is not None:
            w["cost"] = _cost(t["cost"])
        out.append(w)
    if not out or len(out) > MAX_TARGETS:
        raise ValueError("targets: 1 to %d targets, not %d" % (MAX_TARGETS, len(out)))
    return out


def acquire_request(scope=None, key=None, url=None, timeout=None, cls=None, cost=1,
                    detach=False, targets=None, reserve=None, lease=True, tenant=None):
    """The acquire request dict (without "id"). timeout is seconds, None for
    the scope's default, 0 for "do not wait". targets (instead of scope,
    key, url, cls and cost): a list of {"scope", "key" or "url", "class",
    "cost"} dicts, all admitted or none. reserve: {meter: count} charged to
    the token meters now and settled by the release. lease=False: an
    admission with nothing to release ("lease": false). tenant: whose
    request ("tenant", 1 to 64 of [A-Za-z0-9_.-]; the daemon checks it),
    which orders a key's waiters among tenants by the scope's weights."""
    if not lease and (detach or reserve is not None):
        raise ValueError("an admission without a lease has nothing to detach or reserve")
    if targets is not None:
        if scope is not None or key is not None or url is not None or cls is not None \
                or cost != 1:
            raise ValueError("give targets, or scope/key/url/cls/cost, not both")
        req = {"op": "acquire", "targets": _targets(targets)}
    else:
        if scope is None:
            raise ValueError("acquire needs a scope (or targets)")
        req = {"op": "acquire", "scope": str(scope)}
        _target(req, key, url)
        if cls is not None:
            req["class"] = str(cls)
        if _cost(cost) != 1:
            req["cost"] = cost
    if timeout is not None:
        req["timeout_ms"] = seconds_to_ms(timeout, "timeout", MAX_WAIT_MS)
    if detach:
        req["detach"] = True
    if reserve is not None:
        req["reserve"] = token_counts(reserve, "reserve")
    if not lease:
        req["lease"] = False
    if tenant is not None:
        if not isinstance(tenant, str):
            raise ValueError("tenant must be a string")
        req["tenant"] = tenant
    return req


def key_request(op, scope, key=None, url=None, cls=None):
    """reset and inspect: {"op", "scope"[, "key" or "url"][, "class"]}.
    Neither key nor url names the scope's default key (its conf's `key =`;
    the daemon refuses the request with BadRequest when there is none)."""
    req = {"op": op, "scope": str(scope)}
    _target(req, key, url)
    if cls is not None:
        req["class"] = str(cls)
    return req


def connect_budget(req):
    """Seconds a request's own budget allows for connecting: an acquire's
    timeout (0 for try_acquire), None for other requests (only the connect
    timeout bounds them)."""
    if isinstance(req, dict) and req.get("op") == "acquire":
        ms = req.get("timeout_ms")
        if isinstance(ms, int) and not isinstance(ms, bool):
            return ms / 1000.0
    return None


def spend(req, seconds):
    """req with `seconds` (spent connecting) taken from its timeout_ms, so
    the connect and the wait together stay within the budget; a budget
    stays a wait (at least 1 ms)."""
    ms = req.get("timeout_ms") if isinstance(req, dict) else None
    if not isinstance(ms, int) or isinstance(ms, bool) or ms <= 0 or seconds <= 0:
        return req
    return dict(req, timeout_ms=max(1, ms - int(math.ceil(seconds * 1000.0))))


# A connect that fails with these finds no daemon yet (the socket is not
# created, or nobody listens on it: a stale file or a daemon starting), or
# one not accepting for now (its listen backlog is full): worth retrying.
RETRY_ERRNOS = frozenset((errno.ENOENT, errno.ECONNREFUSED, errno.EAGAIN))
BACKOFF_MIN = 0.02
BACKOFF_MAX = 0.2


def retryable(exc):
    return isinstance(exc, OSError) and exc.errno in RETRY_ERRNOS


def backoff():
    """Pauses between connect attempts: 20 ms doubling to 200 ms, each
    shortened by a random 0 to 50% so clients started together spread."""
    d = BACKOFF_MIN
    while True:
        yield d * (1.0 - random.random() * 0.5)
        d = min(d * 2, BACKOFF_MAX)


_HUP = select.POLLHUP | select.POLLERR | select.POLLNVAL | getattr(select, "POLLRDHUP", 0)


def hung_up(fd):
    """Whether the daemon has closed its end of the connection on fd (it
    stopped or restarted): no reply to a new request can come on it. True
    as well when fd cannot be polled."""
    try:
        p = select.poll()
        p.register(fd, select.POLLIN | getattr(select, "POLLRDHUP", 0))
        events = p.poll(0)
    except (OSError, ValueError):
        return True
    return any(ev & _HUP for _, ev in events)


# What a release may report of the upstream call the lease covered: "ok",
# "limited" (the upstream refused for rate: a 429, or a 503 with
# Retry-After) or "error" (anything else that went wrong).
OUTCOMES = ("ok", "limited", "error")


def check_outcome(outcome):
    """outcome as given to a release: None (not sent) or one of OUTCOMES."""
    if outcome is None or (isinstance(outcome, str) and outcome in OUTCOMES):
        return outcome
    raise ValueError("outcome must be one of %s (or None), not %r"
                     % (", ".join(map(repr, OUTCOMES)), outcome))


def release_request(lease, tokens=None, outcome=None):
    """The release request dict for a lease (a Lease or its string)."""
    lease_id = lease.lease if isinstance(lease, LeaseState) else lease
    if not isinstance(lease_id, str):
        raise TypeError("lease must be a Lease or a lease string, not %r" % (lease,))
    req = {"op": "release", "lease": lease_id}
    if tokens:
        req["tokens"] = token_counts(tokens, "tokens")
    if check_outcome(outcome) is not None:
        req["outcome"] = outcome
    return req


def cancel_request(of):
    """The cancel of the still-waiting acquire sent with id `of` on the
    same connection."""
    return {"op": "cancel", "of": of}


def penalize_request(scope, key=None, url=None, retry_after=None):
    """The penalize request dict. retry_after is seconds (a number), sent
    as retry_after_ms, or a Retry-After header value (a string: delta
    seconds or an HTTP-date), sent as is."""
    req = {"op": "penalize", "scope": str(scope)}
    _target(req, key, url)
    if isinstance(retry_after, str):
        req["retry_after"] = retry_after.strip()
    elif retry_after is None:
        raise TypeError("penalize needs retry_after (seconds or a Retry-After value)")
    else:
        req["retry_after_ms"] = seconds_to_ms(retry_after, "retry_after", MAX_WAIT_MS)
    return req


def override_request(scope, key=None, url=None, ttl=None, min_delay=None, rules=None):
    """The override request dict. ttl (required) and min_delay are seconds,
    sent as ttl_ms (at least 1 ms, at most 30 days) and min_delay_ms; rules
    is {rule: amount}, a rule named as in the conf or by its 0-based index
    in the scope (an int or its decimal string), each amount a whole number
    >= 1. At least one of min_delay (at most 24h) and rules. Neither key
    nor url: the scope's default key."""
    req = {"op": "override", "scope": str(scope)}
    _target(req, key, url)
    if ttl is None:
        raise TypeError("override needs ttl (seconds the override holds)")
    req["ttl_ms"] = seconds_to_ms(ttl, "ttl", MAX_OVERRIDE_TTL_MS, "30 days")
    if req["ttl_ms"] == 0:
        raise ValueError("ttl must be more than 0 seconds, not %r" % (ttl,))
    if min_delay is None and rules is None:
        raise TypeError("override needs min_delay or rules (what it sets)")
    if min_delay is not None:
        req["min_delay_ms"] = seconds_to_ms(min_delay, "min_delay", MAX_WAIT_MS)
    if rules is not None:
        req["rules"] = rule_amounts(rules)
    return req


def rule_amounts(rules):
    """An override's {rule: amount} as sent: names are non-empty strings,
    or ints (a rule's index, sent as its decimal string); amounts whole
    numbers 1..MAX_COST."""
    if not isinstance(rules, dict):
        raise TypeError("rules must be a dict of rule name or index to amount, not %r"
                        % (rules,))
    if not rules or len(rules) > MAX_TOKENS:
        raise ValueError("rules: 1 to %d rules, not %d" % (MAX_TOKENS, len(rules)))
    out = {}
    for rule, n in rules.items():
        if isinstance(rule, int) and not isinstance(rule, bool) and rule >= 0:
            rule = str(rule)
        if not isinstance(rule, str) or not rule:
            raise ValueError("rules: a rule is a name or a 0-based index, not %r" % (rule,))
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError("rules: %r must be a whole number >= 1, not %r" % (rule, n))
        if n > MAX_COST:
            raise ValueError("rules: %r must be at most %d, not %r" % (rule, MAX_COST, n))
        if rule in out:
            raise ValueError("rules: %r is given twice" % (rule,))
        out[rule] = n
    return out


def _check_ints(v, path):
    """ValueError for an integer the daemon's JSON parser cannot hold (beyond
    64 bits) anywhere in v: raised here at once, not sent."""
    if isinstance(v, int) and not isinstance(v, bool):
        if not INT64_MIN <= v <= INT64_MAX:
            raise ValueError("%s: %d is out of range (beyond 64 bits)" % (path, v))
    elif isinstance(v, dict):
        for k, x in v.items():
            _check_ints(x, "%s.%s" % (path, k) if path else str(k))
    elif isinstance(v, (list, tuple)):
        for i, x in enumerate(v):
            _check_ints(x, "%s[%d]" % (path, i))


def encode(req):
    """One request dict as a wire line (bytes, newline-terminated). What
    the daemon could not decode whole is a ValueError here: an integer
    beyond 64 bits, NaN or an infinity (it would answer without the id)."""
    _check_ints(req, "")
    try:
        text = json.dumps(req, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except ValueError as e:
        raise ValueError("request not sendable: %s" % e) from None
    return (text + "\n").encode("utf-8")


def decode(line):
    """One reply line (bytes) as a dict; a line that is not a JSON object
    becomes a failed reply so the waiter sees an error, not a hang."""
    try:
        reply = json.loads(line.decode("utf-8"))
    except ValueError as e:
        return {"ok": False, "error": BAD_REPLY, "message": "undecodable reply: %s" % e}
    if not isinstance(reply, dict):
        return {"ok": False, "error": BAD_REPLY, "message": "reply is not an object"}
    return reply


class _NotEchoed(ValueError):
    """A raw line the daemon answers without its id."""


def _strict_pairs(pairs):
    seen = set()
    for k, _ in pairs:
        if k in seen:
            raise _NotEchoed("duplicate key %r" % (k,))
        seen.add(k)
    return dict(pairs)


def _strict_float(text):
    v = float(text)
    if math.isinf(v):
        raise _NotEchoed("real number overflow")
    return v


def _strict_constant(name):
    raise _NotEchoed("%s is not JSON" % name)


def _parsable(v):
    """Whether the daemon's parser takes v's strings: no NUL, no lone
    surrogate (it refuses a line with one whole)."""
    if isinstance(v, str):
        if "\0" in v:
            return False
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True
    if isinstance(v, dict):
        return all(_parsable(k) and _parsable(x) for k, x in v.items())
    if isinstance(v, list):
        return all(_parsable(x) for x in v)
    return True


def _echoed_id(obj):
    """The id of a decoded raw line if the daemon echoes it, else None: not
    when it refuses the line whole, nor an id holding an integer beyond 64
    bits (it cannot echo that one unchanged)."""
    rid = obj.get("id")
    if not _parsable(obj):
        return None
    try:
        _check_ints(rid, "id")
    except ValueError:
        return None
    return rid


def reply_id(line_or_req):
    """The id of a request dict or raw request line, None when it has none
    or when the daemon would answer it without one: a line that is not a
    JSON object, or one its parser refuses whole (a duplicate key, NaN, a
    real that overflows), or whose id it could not echo. Such a line is
    matched as an id-less one, in order, never waited for by an id the
    reply will not carry."""
    if isinstance(line_or_req, dict):
        return line_or_req.get("id")
    try:
        obj = json.loads(line_or_req, object_pairs_hook=_strict_pairs,
                         parse_float=_strict_float, parse_constant=_strict_constant)
    except (ValueError, UnicodeDecodeError):
        return None
    return _echoed_id(obj) if isinstance(obj, dict) else None


def check(reply):
    """The reply (without the client's own "id") when "ok" is true; raise
    its AdmitError otherwise."""
    if reply.get("ok") is True:
        reply = dict(reply)
        reply.pop("id", None)
        return reply
    raise error_from_reply(reply)


class Admission(object):
    """What an admission returned (admit, or an acquire's lease).
    ``waited`` is the seconds the daemon made it wait; ``reply`` the whole
    reply dict; ``backend`` which limiter decided ("local", "redis",
    "fallback").

    ``remaining`` is what the tightest rule or cap of the targets still
    allows after this admission, in its meter's units, and ``reset_ms`` the
    milliseconds until that rule is full again (0: full now); both None
    when nothing limits the targets (or the daemon does not say).
    ``limits`` is the same per meter, a dict of Limit by meter name
    ("requests", "tokens", "tokens.NAME", "concurrency"; empty when the
    daemon does not say): what a gateway's x-ratelimit-{limit,remaining,
    reset}-{requests,tokens} headers are filled from.

    ``scope`` and ``key`` say what was admitted: the key sent, or for
    ``url=`` the host the daemon keyed on (see url_host); None when neither
    was given (the scope's default key). A multi-target lease has
    ``targets``, one dict per target with its "scope" and "key" (and
    "url", "class", "cost" as sent), and scope/key None; a single-target
    lease has targets None."""

    def __init__(self, reply, scope, key=None, url=None, targets=None):
        self.reply = reply
        self.scope = scope
        self.url = url
        self.key = key if key is not None else (url_host(url) if url is not None else None)
        self.targets = None
        if targets is not None:
            self.targets = []
            for t in targets:
                t = dict(t)
                t["key"] = t.get("key") if "url" not in t else url_host(t["url"])
                self.targets.append(t)
        ms = reply.get("waited_ms", 0)
        self.waited = ms / 1000.0 if isinstance(ms, (int, float)) else 0.0
        self.backend = reply.get("backend")
        self.shadow_limited = bool(reply.get("shadow_limited", False))
        self.remaining = reply_int(reply, "remaining")
        self.reset_ms = reply_int(reply, "reset_ms")
        self.limits = reply_limits(reply)

    def __repr__(self):
        what = "scope=%r key=%r" % (self.scope, self.key)
        if self.targets is not None:
            what = "targets=%r" % ([(t["scope"], t["key"]) for t in self.targets],)
        return "<%s %s remaining=%r>" % (type(self).__name__, what, self.remaining)


class LeaseState(Admission):
    """What an admitted acquire returned: an Admission with its lease.
    ``lease`` is the opaque lease string; ``tokens`` the meter counts and
    ``outcome`` ("ok", "limited" or "error") sent when the lease is released
    by its context manager (set them inside the with block)."""

    def __init__(self, reply, scope, key=None, url=None, targets=None):
        Admission.__init__(self, reply, scope, key, url, targets)
        self.lease = reply.get("lease")
        self.tokens = None
        self.outcome = None
        self.released = False
        self.held = None  # what the release reply said, once released

    def __repr__(self):
        what = "scope=%r key=%r" % (self.scope, self.key)
        if self.targets is not None:
            what = "targets=%r" % ([(t["scope"], t["key"]) for t in self.targets],)
        return "<%s %s %s%s>" % (
            type(self).__name__,
            self.lease,
            what,
            " released" if self.released else "",
        )

    def __str__(self):
        return str(self.lease)


class Pending(object):
    """Who waits for which reply on one connection: waiters by request id,
    a FIFO of waiters for id-less lines (their replies come back without an
    id, in order), and the ids of acquires nobody waits for any more (their
    lease, if admitted, must be released at once). Each entry also keeps
    its line's length, to find the line an id-less line_too_long refused.
    A waiter is anything the caller hands in; this class only files and
    finds them. Not locked: the blocking client holds its lock around every
    call, the asyncio client runs them on its loop."""

    def __init__(self):
        self.by_id = {}  # key -> [waiter, line length]
        self.anon = collections.deque()  # [waiter, line length]
        self.orphans = set()

    @staticmethod
    def _key(rid):
        # Any JSON value may be an id (raw lines send objects); the daemon
        # echoes it, so its canonical JSON text identifies it.
        return json.dumps(rid, sort_keys=True, separators=(",", ":"))

    def add(self, rid, waiter, size=0):
        """File waiter for the reply to a line of size bytes with id rid."""
        if rid is None:
            self.anon.append([waiter, size])
        else:
            self.by_id[self._key(rid)] = [waiter, size]

    def forget(self, rid, waiter, orphan):
        """Stop waiting for rid (orphan: release its lease if admitted).
        An id-less waiter stays queued: its reply must still be matched to
        its line, and nobody reads it."""
        key = self._key(rid)
        entry = self.by_id.get(key) if rid is not None else None
        if entry is not None and entry[0] is waiter:
            del self.by_id[key]
            if orphan:
                self.orphans.add(key)

    def _take_longest(self):
        """The waiter of the longest line still waiting, removed. The daemon answers a line longer than its max_line with an
        id-less line_too_long: every line before it was short enough, so
        the longest one waiting is that line or a later one also too long."""
        best = None
        for entry in list(self.by_id.values()) + list(self.anon):
            if best is None or entry[1] > best[1]:
                best = entry
        if best is None:
            return None
        for key, entry in self.by_id.items():
            if entry is best:
                del self.by_id[key]
                return best[0]
        for i, entry in enumerate(self.anon):
            if entry is best:
                del self.anon[i]
                break
        return best[0]

    def take(self, reply):
        """(waiter or None, lease string to release or None) for a reply."""
        rid = reply.get("id")
        if rid is None:
            if reply.get("error") == LINE_TOO_LONG:
                return self._take_longest(), None
            return (self.anon.popleft()[0] if self.anon else None), None
        key = self._key(rid)
        entry = self.by_id.pop(key, None)
        if entry is None and key in self.orphans:
            self.orphans.discard(key)
            return None, lease_of(reply)
        return (entry[0] if entry is not None else None), None

    def clear(self):
        """Every waiter still queued, emptying the table."""
        waiters = [e[0] for e in list(self.by_id.values()) + list(self.anon)]
        self.by_id.clear()
        self.anon.clear()
        self.orphans.clear()
        return waiters


def closes_connection(reply):
    """Whether the daemon closes the connection after this reply: an
    id-less line_too_long or forbidden. The connection is then dead for new
    requests (and its non-detached leases gone) even before its EOF is read."""
    return reply.get("id") is None and reply.get("error") in (LINE_TOO_LONG, FORBIDDEN)


def refusal(reply):
    """Whether this is the daemon refusing the connection itself (forbidden):
    every request on it, sent or not, fails with it."""
    return reply.get("id") is None and reply.get("error") == FORBIDDEN


def lease_of(reply):
    """The lease string an admitted acquire's reply carries, else None."""
    if isinstance(reply, dict) and reply.get("ok") is True:
        lease = reply.get("lease")
        if isinstance(lease, str):
            return lease
    return None


def lost(reason):
    """The reply a waiter gets when its connection dies first."""
    return {"ok": False, "error": "unavailable", "message": reason}


def frame(req, line, rid):
    """(wire bytes, id) for one request: a dict, sent with id rid, or else a
    raw line (str or bytes, sent as is with one newline; its own id, None
    when it has none)."""
    if req is not None:
        return encode(dict(req, id=rid)), rid
    if isinstance(line, str):
        line = line.encode("utf-8")
    if not line.endswith(b"\n"):
        line += b"\n"
    return line, reply_id(line)

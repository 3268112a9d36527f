"""admit.errors - the exceptions a refused or failed request raises.

Owns: one exception class per protocol error code (proto/PROTOCOL.md,
"Replies"), and the mapping from a reply's "error" string to that class.
Every class carries the wire code, the daemon's message, ``retry_after`` in
seconds (None when the reply had no retry_after_ms), ``rule`` (the conf
text of the rule that decided a refusal, when given), ``remaining`` and
``reset_ms`` (what the tightest rule still allows, and the milliseconds
until it is full again; None when the reply had none), ``limits`` (the
same per meter: see Limit), ``target`` (which
target of the request refused: {"index", "scope", "key"}, None when the
reply did not say) and the raw ``reply`` dict. Limited, BudgetExceeded and
Timeout are worth retrying later; ExceedsLimit never is (no wait can admit
that request), nor Canceled (the client itself ended the wait).
"""

from typing import Dict, NamedTuple

__all__ = [
    "Limit",
    "AdmitError",
    "Limited",
    "BudgetExceeded",
    "Timeout",
    "Unavailable",
    "UnknownScope",
    "BadRequest",
    "ShuttingDown",
    "TooManyWaiters",
    "ExceedsLimit",
    "Canceled",
    "error_from_reply",
]


class Limit(NamedTuple):
    """One meter's tightest limit among a request's targets after a decision
    (a reply's "limits"): the limit with the fewest units left. ``rule`` is
    its name (a named rule's name, an unnamed rule's index in its scope, or
    "quota", "cluster_concurrency", "max_concurrent"), ``limit`` its
    capacity, ``remaining`` the units left, ``reset_ms`` the milliseconds
    until it would admit ``limit`` again if nothing more were taken (0: now).
    Units are the meter's: requests, tokens, or leases for concurrency."""

    rule: str
    limit: int
    remaining: int
    reset_ms: int


def reply_limits(reply) -> Dict[str, Limit]:
    """A reply's "limits" by meter ("requests", "tokens", "tokens.NAME",
    "concurrency"); empty when it has none. A member of the wrong shape is
    left out (a server's bytes are input)."""
    raw = reply.get("limits") if isinstance(reply, dict) else None
    out = {}  # type: Dict[str, Limit]
    if not isinstance(raw, dict):
        return out
    for meter, v in raw.items():
        if not isinstance(v, dict) or not isinstance(v.get("rule"), str):
            continue
        nums = [reply_int(v, f) for f in ("limit", "remaining", "reset_ms")]
        if None not in nums:
            out[meter] = Limit(v["rule"], nums[0], nums[1], nums[2])
    return out


class AdmitError(Exception):
    """Base of every error this package raises for a request admitd refused
    or could not answer. ``code`` is the wire error string."""

    def __init__(self, code, message="", retry_after=None, rule=None, reply=None):
        super().__init__(code, message)
        self.code = code
        self.message = message
        self.retry_after = retry_after
        self.rule = rule
        self.reply = reply
        self.remaining = reply_int(reply, "remaining")
        self.reset_ms = reply_int(reply, "reset_ms")
        self.limits = reply_limits(reply)
        self.target = _target(reply)

    def __str__(self):
        s = "%s: %s" % (self.code, self.message) if self.message else str(self.code)
        if self.rule:
            s += " (rule %r)" % (self.rule,)
        if self.retry_after is not None:
            s += " (retry after %.3fs)" % (self.retry_after,)
        if self.target is not None and self.target["scope"] is not None:
            s += " (target %d: scope %r key %r)" % (
                self.target["index"], self.target["scope"], self.target["key"])
        return s


def reply_int(reply, name):
    """The integer field name of a reply dict, None when absent or not an
    integer (a server's bytes are input)."""
    v = reply.get(name) if isinstance(reply, dict) else None
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _target(reply):
    """A refusal's "target" as {"index", "scope", "key"} (a member the reply
    lacks or gives with the wrong type is None), or None without an index."""
    t = reply.get("target") if isinstance(reply, dict) else None
    if not isinstance(t, dict) or reply_int(t, "index") is None:
        return None
    scope, key = t.get("scope"), t.get("key")
    return {
        "index": t["index"],
        "scope": scope if isinstance(scope, str) else None,
        "key": key if isinstance(key, str) else None,
    }


class Limited(AdmitError):
    """Not admitted now (a non-waiting acquire); retry after ``retry_after``."""


class BudgetExceeded(AdmitError):
    """The wait needed is longer than what is left of the wait budget."""


class Timeout(AdmitError):
    """The acquire waited its whole budget without being admitted."""


class Unavailable(AdmitError):
    """The limiter cannot decide: the daemon said so, or it is unreachable
    (socket missing, connection refused, connection lost mid-request)."""


class UnknownScope(AdmitError):
    """The scope is not in the daemon's conf."""


class BadRequest(AdmitError):
    """The daemon rejected the request itself (bad_request, unknown_op,
    line_too_long)."""


class ShuttingDown(AdmitError):
    """The daemon is stopping; waiting acquires are answered with this."""


class TooManyWaiters(AdmitError):
    """The scope's wait queue is full."""


class Forbidden(AdmitError):
    """The daemon does not serve this process's user or groups (allow_uids,
    allow_gids): it said so in one line and closed the connection."""


class Canceled(AdmitError):
    """The acquire was ended by a cancel from this client before it was
    decided; it spent nothing. Not worth retrying as such: the caller
    asked for it to stop."""


class ExceedsLimit(AdmitError):
    """No wait can admit the request: it asks more than a rule holds (its
    cost is larger than the rule's capacity). Do not retry it. ``rule`` is
    the rule, ``limit`` its capacity (None when the reply had none);
    ``retry_after`` is None. Not a subclass of Limited, BudgetExceeded or
    Timeout, so code that retries those does not retry this."""

    def __init__(self, code, message="", retry_after=None, rule=None, reply=None):
        super().__init__(code, message, retry_after, rule, reply)
        self.limit = reply_int(reply, "limit")

    def __str__(self):
        s = super().__str__()
        if self.limit is not None:
            s += " (limit %d)" % (self.limit,)
        return s


_BY_CODE = {
    "limited": Limited,
    "budget_exceeded": BudgetExceeded,
    "timeout": Timeout,
    "unavailable": Unavailable,
    "unknown_scope": UnknownScope,
    "bad_request": BadRequest,
    "unknown_op": BadRequest,
    "line_too_long": BadRequest,
    "shutting_down": ShuttingDown,
    "too_many_waiters": TooManyWaiters,
    "exceeds_limit": ExceedsLimit,
    "forbidden": Forbidden,
    "canceled": Canceled,
}


def error_from_reply(reply):
    """Build the exception for a failed reply dict (one with "ok": false).
    An error code this version does not know becomes a plain AdmitError."""
    code = reply.get("error")
    if not isinstance(code, str):
        code = "bad_reply"
    cls = _BY_CODE.get(code, AdmitError)
    ms = reply.get("retry_after_ms")
    retry_after = ms / 1000.0 if isinstance(ms, (int, float)) and not isinstance(ms, bool) else None
    message = reply.get("message")
    return cls(
        code,
        message if isinstance(message, str) else "",
        retry_after=retry_after,
        rule=reply.get("rule"),
        reply=reply,
    )


def unreachable(path, exc):
    """The Unavailable raised when the daemon's socket cannot be used."""
    return Unavailable("unavailable", "admitd unreachable at %s: %s" % (path, exc))

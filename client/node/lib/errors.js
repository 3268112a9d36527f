'use strict';
/*
 * errors.js - what a refused or failed request rejects with.
 *
 * Owns: one class per protocol error code (proto/PROTOCOL.md, "Replies"),
 * the mapping from a reply's "error" string to its class, whether each is
 * worth retrying (`retryable`), and AbortError, the rejection of an acquire
 * whose AbortSignal fired. Every AdmitError carries the wire `code`, the
 * daemon's `message`, `retryAfterMs`, `rule`, `remaining`, `resetMs` and
 * `target` when the reply had them (null otherwise), `limits` (per meter,
 * see limitsOf; {} when none), and the whole `reply`.
 */

/* Base of every error for a request admitd refused or could not answer. */
class AdmitError extends Error {
  constructor(code, message, reply) {
    super(message || code);
    this.code = code;
    this.reply = reply || null;
    const r = reply || {};
    this.retryAfterMs = isInt(r.retry_after_ms) ? r.retry_after_ms : null;
    this.rule = typeof r.rule === 'string' ? r.rule : null;
    this.remaining = isInt(r.remaining) ? r.remaining : null;
    this.resetMs = isInt(r.reset_ms) ? r.reset_ms : null;
    this.target = isTarget(r.target) ? r.target : null;
    this.limits = limitsOf(r);
  }

  get name() {
    return this.constructor.name;
  }

  /* Whether the same request may succeed later (after retryAfterMs when
   * given). Unknown codes are not: nobody knows what they mean. */
  get retryable() {
    return false;
  }
}

class Limited extends AdmitError {
  get retryable() { return true; }
}
class BudgetExceeded extends AdmitError {
  get retryable() { return true; }
}
class Timeout extends AdmitError {
  get retryable() { return true; }
}
/* The limiter cannot decide, or the daemon is unreachable, or the
 * connection died while the request was in flight. */
class Unavailable extends AdmitError {
  get retryable() { return true; }
}
class TooManyWaiters extends AdmitError {
  get retryable() { return true; }
}
/* The daemon is stopping; the next request connects again (to its
 * successor). */
class ShuttingDown extends AdmitError {
  get retryable() { return true; }
}
class UnknownScope extends AdmitError {}
/* bad_request, unknown_op, line_too_long: the request itself is wrong. */
class BadRequest extends AdmitError {}
/* This process's user and groups are not served (allow_uids/allow_gids). */
class Forbidden extends AdmitError {}
/* The acquire was ended by a cancel: it spent nothing. */
class Canceled extends AdmitError {}
/* No wait can admit the request: it asks more than a rule holds. `limit` is
 * that rule's capacity. Not a subclass of Limited, BudgetExceeded or
 * Timeout, so a loop retrying those stops on it. */
class ExceedsLimit extends AdmitError {
  constructor(code, message, reply) {
    super(code, message, reply);
    this.limit = reply && isInt(reply.limit) ? reply.limit : null;
  }
}

/* The rejection of an acquire whose AbortSignal fired while it waited.
 * `cause` is the signal's reason; `reply` the acquire's own last reply when
 * one came (a "canceled" refusal, or a lease that raced the cancel and was
 * released at once), else null. */
class AbortError extends Error {
  constructor(message, cause, reply) {
    super(message || 'the acquire was aborted');
    this.name = 'AbortError';
    this.code = 'ABORT_ERR';
    if (cause !== undefined) this.cause = cause;
    this.reply = reply || null;
  }

  get retryable() {
    return false;
  }
}

const BY_CODE = {
  limited: Limited,
  budget_exceeded: BudgetExceeded,
  timeout: Timeout,
  unavailable: Unavailable,
  unknown_scope: UnknownScope,
  bad_request: BadRequest,
  unknown_op: BadRequest,
  line_too_long: BadRequest,
  shutting_down: ShuttingDown,
  too_many_waiters: TooManyWaiters,
  exceeds_limit: ExceedsLimit,
  forbidden: Forbidden,
  canceled: Canceled,
};

function isInt(v) {
  return typeof v === 'number' && Number.isInteger(v);
}

function isTarget(t) {
  return t !== null && typeof t === 'object' && !Array.isArray(t);
}

/*
 * A reply's "limits": by meter ("requests", "tokens", "tokens.NAME",
 * "concurrency"), that meter's tightest limit among the request's targets
 * as { rule, limit, remaining, resetMs }; {} when the reply has none. A
 * member of the wrong shape is left out (a server's bytes are input).
 */
function limitsOf(reply) {
  const out = {};
  const raw = reply ? reply.limits : undefined;
  if (!isTarget(raw))
    return out;
  for (const [meter, v] of Object.entries(raw)) {
    if (isTarget(v) && typeof v.rule === 'string' && isInt(v.limit) && isInt(v.remaining) &&
        isInt(v.reset_ms))
      out[meter] = { rule: v.rule, limit: v.limit, remaining: v.remaining, resetMs: v.reset_ms };
  }
  return out;
}

/* The error for a failed reply (one with "ok" not true). */
function errorFromReply(reply) {
  const code = typeof reply.error === 'string' ? reply.error : 'bad_reply';
  const Cls = Object.prototype.hasOwnProperty.call(BY_CODE, code) ? BY_CODE[code] : AdmitError;
  const message = typeof reply.message === 'string' ? reply.message : '';
  return new Cls(code, message, reply);
}

function unreachable(path, err) {
  return new Unavailable('unavailable', `admitd unreachable at ${path}: ${err.message}`);
}

module.exports = {
  AdmitError,
  Limited,
  BudgetExceeded,
  Timeout,
  Unavailable,
  UnknownScope,
  BadRequest,
  ShuttingDown,
  TooManyWaiters,
  ExceedsLimit,
  Forbidden,
  Canceled,
  AbortError,
  errorFromReply,
  unreachable,
  limitsOf,
};

// Types of admitd-client, the Node.js client for admitd.

/// <reference types="node" />

export declare const VERSION: string;
export declare const DEFAULT_SOCKET: string;
export declare const SOCKET_ENV: string;
/** Symbol.asyncDispose where Node defines it, else Symbol.for('nodejs.asyncDispose'). */
export declare const asyncDispose: unique symbol;

export interface ClientOptions {
  /** Socket path; default $ADMITD_SOCKET, else /run/admitd/admitd.sock. */
  socket?: string;
  /** How long a connect keeps trying a daemon not up yet (default 5000; 0: once). */
  connectTimeoutMs?: number;
  /** How long to wait for a reply beyond the request's own wait (default 30000; null: for ever). */
  requestTimeoutMs?: number | null;
  /** Longest request line sent, newline included (default 65536). */
  maxLine?: number;
}

export interface Target {
  scope: string;
  key?: string;
  url?: string;
  class?: string;
  cost?: number;
}

export interface LeaseTarget extends Target {
  /** The key sent, or the host the daemon keyed a url on. */
  key: string | null;
}

export interface AcquireOptions {
  scope?: string;
  key?: string;
  /** Key by the URL's host instead of key. */
  url?: string;
  /** Wait budget in ms; absent: the scope's timeout; 0: do not wait. */
  timeoutMs?: number;
  class?: string;
  /** Whose request: 1 to 64 of [A-Za-z0-9_.-]; a key's waiters are served among tenants by the scope's `weight` lines. */
  tenant?: string;
  /** Units of requests meters (default 1; 0 allowed). */
  cost?: number;
  /** The lease outlives this connection. */
  detach?: boolean;
  /** Token meters charged at acquire, settled by the release's tokens. */
  reserve?: Record<string, number>;
  /** Several targets, all admitted or none (instead of scope/key/url/class/cost). */
  targets?: Target[];
  /** Aborting while the acquire waits cancels it and rejects with AbortError. */
  signal?: AbortSignal;
}

/** admit()'s options: acquire's, without what only a lease can have. */
export type AdmitOptions = Omit<AcquireOptions, 'detach' | 'reserve'>;

export type Outcome = 'ok' | 'limited' | 'error';

export interface ReleaseOptions {
  /** Token counts charged to the scope's token meters. */
  tokens?: Record<string, number> | null;
  /** What the upstream said: see outcomeFor. */
  outcome?: Outcome | null;
}

export interface KeyOptions {
  scope?: string;
  key?: string;
  url?: string;
  class?: string;
}

export interface PenalizeOptions extends KeyOptions {
  /** An upstream's Retry-After value as is (string), or seconds (number). */
  retryAfter?: string | number;
  retryAfterMs?: number;
}

export interface OverrideOptions {
  scope?: string;
  key?: string;
  url?: string;
  /** How long the override holds, in ms (1 to 30 days). */
  ttlMs: number;
  /** The key's min_delay while it holds, in ms (at least one of minDelayMs and rules). */
  minDelayMs?: number;
  /** Rule amounts by rule name or 0-based index in the scope ("0"), each >= 1. */
  rules?: Record<string, number>;
}

/** A reply object as the daemon sent it (without the client's id). */
export type Reply = { ok: boolean; [field: string]: unknown };

export interface InspectReply extends Reply {
  backend: string;
  scope: string;
  key: string;
  penalty_ms: number;
  next_in_ms: number;
  leases: number;
  quota?: { used: number; limit: number; frees_in_ms: number };
  rules: { rule: string; capacity: number; remaining: number; full_in_ms?: number }[];
  /** While an override holds: the ms it has left and what it sets. */
  override?: { ttl_ms: number; min_delay_ms?: number; rules?: Record<string, number> };
}

export interface OverrideReply extends Reply {
  backend: 'local' | 'redis' | 'fallback';
  ttl_ms: number;
}

export interface StatusReply extends Reply {
  version: string;
  uptime_s: number;
  backend: 'local' | 'redis' | 'fallback';
  scopes: Record<string, { leases: number; waiting: number; [counter: string]: unknown }>;
}

/**
 * One meter's tightest limit among a request's targets after a decision:
 * the limit with the fewest units left. rule: a named rule's name, an
 * unnamed rule's index in its scope, or "quota", "cluster_concurrency",
 * "max_concurrent"; limit: its capacity; resetMs: until it would admit
 * `limit` again if nothing more were taken (0: now).
 */
export interface Limit {
  rule: string;
  limit: number;
  remaining: number;
  resetMs: number;
}

/** A reply's "limits": by meter ("requests", "tokens", "tokens.NAME", "concurrency"). */
export type Limits = { [meter: string]: Limit };

/** An admission: what admit() resolves to; a Lease is one with its lease. */
export declare class Admission {
  readonly scope: string | null;
  /** The key sent, the host of the url, or null (the scope's default key). */
  readonly key: string | null;
  readonly url: string | null;
  readonly targets: LeaseTarget[] | null;
  readonly waitedMs: number;
  readonly backend: string | null;
  readonly shadowLimited: boolean;
  /** The shadow rule that would have refused, when shadowLimited. */
  readonly rule: string | null;
  /** What the tightest rule still allows after this admission; null when nothing limits. */
  readonly remaining: number | null;
  /** Ms until that rule is full again; null when nothing limits. */
  readonly resetMs: number | null;
  /** The same per meter: x-ratelimit-{limit,remaining,reset}-* ({} when none). */
  readonly limits: Limits;
  readonly reply: Reply;
}

export declare class Lease extends Admission {
  /** The opaque lease string. */
  readonly lease: string;
  /** Sent by release() and dispose when not given there. */
  tokens: Record<string, number> | null;
  outcome: Outcome | null;
  released: boolean;
  held: boolean | null;
  /** Whether the daemon still held it; a second call sends nothing and resolves false. */
  release(options?: ReleaseOptions): Promise<boolean>;
  [asyncDispose](): Promise<void>;
  toString(): string;
}

export declare class Client {
  constructor(options?: ClientOptions);
  readonly socket: string;
  readonly connectTimeoutMs: number;
  readonly requestTimeoutMs: number | null;
  readonly maxLine: number;
  acquire(scope: string, key?: string | null, options?: AcquireOptions): Promise<Lease>;
  acquire(scope: string, options: AcquireOptions): Promise<Lease>;
  acquire(options: AcquireOptions): Promise<Lease>;
  tryAcquire(scope: string, key?: string | null, options?: AcquireOptions): Promise<Lease>;
  tryAcquire(scope: string, options: AcquireOptions): Promise<Lease>;
  tryAcquire(options: AcquireOptions): Promise<Lease>;
  /** An admission with nothing to release ("lease": false): one round trip. */
  admit(scope: string, key?: string | null, options?: AdmitOptions): Promise<Admission>;
  admit(scope: string, options: AdmitOptions): Promise<Admission>;
  admit(options: AdmitOptions): Promise<Admission>;
  tryAdmit(scope: string, key?: string | null, options?: AdmitOptions): Promise<Admission>;
  tryAdmit(scope: string, options: AdmitOptions): Promise<Admission>;
  tryAdmit(options: AdmitOptions): Promise<Admission>;
  release(lease: Lease | string, options?: ReleaseOptions): Promise<boolean>;
  penalize(scope: string, key: string | null, options: PenalizeOptions): Promise<Reply>;
  penalize(scope: string, options: PenalizeOptions): Promise<Reply>;
  penalize(options: PenalizeOptions): Promise<Reply>;
  reset(scope: string, key?: string | null, options?: KeyOptions): Promise<Reply>;
  reset(scope: string, options: KeyOptions): Promise<Reply>;
  reset(options: KeyOptions): Promise<Reply>;
  override(scope: string, key: string | null, options: OverrideOptions): Promise<OverrideReply>;
  override(scope: string, options: OverrideOptions): Promise<OverrideReply>;
  override(options: OverrideOptions & { scope: string }): Promise<OverrideReply>;
  inspect(scope: string, key?: string | null, options?: KeyOptions): Promise<InspectReply>;
  inspect(scope: string, options: KeyOptions): Promise<InspectReply>;
  inspect(options: KeyOptions): Promise<InspectReply>;
  status(): Promise<StatusReply>;
  ping(): Promise<true>;
  /** End the waiting acquire whose id is `of` on this connection. */
  cancel(of: unknown): Promise<Reply & { found: boolean }>;
  /** Send a request object (an id is added); the reply, or its AdmitError. */
  request(req: Record<string, unknown>, options?: { waitMs?: number | null }): Promise<Reply>;
  /** Send one raw protocol line; the reply object, error or not. */
  requestLine(line: string | Buffer): Promise<Reply>;
  close(): Promise<void>;
  [asyncDispose](): Promise<void>;
}

export interface RefusingTarget {
  index: number;
  scope: string;
  key: string;
}

export declare class AdmitError extends Error {
  constructor(code: string, message?: string, reply?: Reply | null);
  /** The wire error code. */
  readonly code: string;
  readonly reply: Reply | null;
  readonly retryAfterMs: number | null;
  readonly rule: string | null;
  readonly remaining: number | null;
  readonly resetMs: number | null;
  /** Per meter, as Admission's ({} when the reply had none). */
  readonly limits: Limits;
  readonly target: RefusingTarget | null;
  /** Whether the same request may succeed later. */
  readonly retryable: boolean;
}
export declare class Limited extends AdmitError {}
export declare class BudgetExceeded extends AdmitError {}
export declare class Timeout extends AdmitError {}
export declare class Unavailable extends AdmitError {}
export declare class UnknownScope extends AdmitError {}
export declare class BadRequest extends AdmitError {}
export declare class ShuttingDown extends AdmitError {}
export declare class TooManyWaiters extends AdmitError {}
export declare class Forbidden extends AdmitError {}
export declare class Canceled extends AdmitError {}
export declare class ExceedsLimit extends AdmitError {
  /** The capacity of the rule the request asks more than. */
  readonly limit: number | null;
}

export declare class AbortError extends Error {
  readonly name: 'AbortError';
  readonly code: 'ABORT_ERR';
  /** The acquire's last reply: "canceled", or a lease that raced the abort (released). */
  readonly reply: Reply | null;
  readonly retryable: false;
}

export declare function errorFromReply(reply: Reply): AdmitError;
/** The key the daemon derives from a URL (its host, lowercased), or null. */
export declare function urlHost(url: string): string | null;
/** "limited" for 429 and for 503 with a Retry-After, "ok" below 400, else "error". */
export declare function outcomeFor(status: number, retryAfter?: string | number | null): Outcome;

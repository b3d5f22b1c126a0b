// The client: endpoints, failover, retries, typed errors. It follows the
// rules of the Go package client.

import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient, type Client as ServiceClient, type Transport } from "@connectrpc/connect";
import { clusterIdHeader, withClusterCheck } from "./clusterid.js";
import {
  ClusterService,
  KVService,
  LeaseService,
  type Lease as PbLease,
  LeaseRefSchema,
  type Member as PbMember,
  type Term as PbTerm,
  Term_Ending,
  type WatchEvent as PbWatchEvent,
  WatchEvent_Type,
  type WatchResponse,
} from "./gen/tenure/v1/tenure_pb.js";
import { type Clock, sleep, systemClock } from "./clock.js";
import { type Observation, type RunOptions, observe, runElection } from "./election.js";
import { type Lease as ElectionLease, Session, type SessionConfig } from "./session.js";
import { durationToMs, msToDuration } from "./duration.js";
import { RequestIds, type RequestIdInit } from "./requestid.js";
import { type UpdateFn, updateKV } from "./kvupdate.js";
import {
  IndeterminateError,
  LeaseHeldError,
  NotAppliedError,
  OtherClusterError,
  TLSError,
  TenureError,
  UnavailableError,
  fromConnectError,
  isTLSError,
  isIndeterminateWire,
  messageOf,
  reasonError,
} from "./errors.js";

/** ClientConfig configures a Client. Durations are in milliseconds. */
export interface ClientConfig {
  /** API addresses of cluster members, as host:port (an http:// prefix is
   * accepted; https:// means TLS). Any member serves any request:
   * followers forward to the leader. Required. */
  endpoints: string[];
  /** Makes the transport for one endpoint's base URL (http://host:port,
   * or https://host:port for TLS). createClient from "@tenure-io/client"
   * fills it in for Node.js or the browser. */
  transport: (baseUrl: string) => Transport;
  /** Makes every endpoint https, also those written host:port. The Node.js
   * createClient sets it when its tls option is given. Default false:
   * only endpoints written https://host:port use TLS. */
  https?: boolean;
  /** A bearer token (tenure auth token prints one), sent as
   * "Authorization: Bearer TOKEN" with every request; the server's auth
   * file names its principal. A server that refuses it answers
   * unauthenticated (UnauthenticatedError); a principal without the role
   * for a name gets permission_denied (PermissionDeniedError). Neither is
   * retried. Over plain HTTP the token travels in clear text: use https
   * endpoints beyond loopback. */
  token?: string;
  /** Bounds one attempt of a request at one endpoint; the caller's signal
   * bounds the whole call with its retries. An acquire that waits gets its
   * wait timeout on top. Default 5000. */
  requestTimeoutMs?: number;
  /** Pause after every endpoint failed once; it doubles after each round
   * up to maxRetryBackoffMs. Default 50. */
  retryBackoffMs?: number;
  /** Cap of the pause between rounds of retries. Default 1000. */
  maxRetryBackoffMs?: number;
  /** The ID of the cluster the client talks to (tenure status shows it).
   * Every member sends its cluster's ID with each answer; the client
   * refuses answers that carry another ID: the endpoint counts as failed
   * for that call, the call goes on to the other endpoints, and it throws
   * an OtherClusterError if none of the right cluster answers. A refused
   * request may have taken effect on the other cluster; its answer is
   * discarded. Default unset: the client pins the ID of the first answer
   * that carries one (client.clusterId), so it never mixes answers of two
   * clusters; setting it also refuses a wrong cluster on first contact. */
  clusterId?: string;
  /** The clock of send times and timers. Default systemClock. */
  clock?: Clock;
  /** Called by Client.close to close the transports' connections. */
  onClose?: () => void;
}

/** CallOptions bound one call. */
export interface CallOptions {
  /** Ends the call, with its retries. */
  signal?: AbortSignal;
}

/** Lease is one grant of a named lease, as the server reported it. */
export interface Lease {
  name: string;
  holder: string;
  /** The fencing token of the grant: larger than every token granted
   * before it, the same across renewals. Pass it with every write the
   * lease protects. */
  token: bigint;
  /** How much every renewal extends the lease, in milliseconds. */
  ttlMs: number;
  /** Time the lease had left when the server applied the request. */
  remainingMs: number;
  /** When the request that returned the lease was sent, on the client's
   * clock (0 for leases reported by watch). The lease expires no earlier
   * than sentAt + remainingMs at the cluster's clock rate. */
  sentAt: number;
  /** The grant's lock-delay in milliseconds (AcquireOptions.lockDelayMs),
   * 0 for none. */
  lockDelayMs: number;
  /** True for a shared (read) grant (AcquireOptions.shared). */
  shared: boolean;
  /** The grant's priority (AcquireOptions.priority), 0 for none. */
  priority: number;
}

/** TermEnding is how a term of a lease ended: "held" while it lasts. */
export type TermEnding = "held" | "released" | "expired" | "revoked" | "handed_off";

/** Term is one grant of a name in its history (Client.history): who held
 * it, with which token, from when to when, and how it ended. */
export interface Term {
  name: string;
  holder: string;
  token: bigint;
  /** The authenticated principal that acquired it ("" without auth). */
  principal: string;
  /** For a semaphore slot, its limit; 0 for a plain lease. */
  limit: number;
  /** The leader's wall clock at the start and the end, for display;
   * undefined when unknown (end: also while held). */
  start?: Date;
  end?: Date;
  ending: TermEnding;
  /** A revocation's reason. */
  reason: string;
  /** Fenced writes of the built-in store under the term's token. */
  writesAccepted: bigint;
  writesRefused: bigint;
  /** Start and end in cluster time, in milliseconds (end 0 while held):
   * the time the cluster decides by. */
  clusterStartMs: number;
  clusterEndMs: number;
  /** True for the term of a shared (read) grant. */
  shared: boolean;
}

/** HistoryOptions narrow what Client.history returns. */
export interface HistoryOptions extends CallOptions {
  /** Leave out the terms that ended before since. */
  since?: Date;
  /** At most this many terms, the newest. */
  limit?: number;
}

/** LeaseRef names one grant. */
export interface LeaseRef {
  name: string;
  token: bigint;
}

/** RenewResult is the outcome of renewing one lease. */
export interface RenewResult {
  ref: LeaseRef;
  /** The renewed grant when err is undefined. */
  lease?: Lease;
  /** A StaleTokenError when the lease was released, expired or granted
   * again since ref.token was issued; a RevokedError (a StaleTokenError
   * with the operator's reason) when an operator revoked it. */
  err?: Error;
  /** The waiter that asks the holder to hand over (its priority is
   * higher than the grant's; AcquireOptions.priority), or "" when none
   * asks. */
  handoffRequested: string;
}

/** AcquireOptions change how acquire behaves. */
export interface AcquireOptions extends CallOptions {
  /** Queue on the server (first come, first served) while the lease is
   * held, until it is granted or waitTimeoutMs passes; then acquire fails
   * with a LeaseHeldError. */
  wait?: boolean;
  /** How long to wait; 0 or unset waits as long as the server allows (5
   * minutes by default). A retry on another endpoint waits only for what
   * is left (and queues again at the back). */
  waitTimeoutMs?: number;
  /** A lock-delay for the grant, in milliseconds (at most 60000 by
   * default; more is an InvalidArgumentError): if the grant expires or an
   * operator revokes it (not if it is released), the server grants the
   * name to nobody until this much cluster time has passed since the
   * expiry (or the revocation); waiters stay queued. An acquire during
   * the delay fails with a LeaseHeldError whose lockDelay is set. A
   * mitigation for storage that cannot check fencing tokens, not a
   * guarantee: the token is. */
  lockDelayMs?: number;
  /** Ask for a shared (read) grant: shared grants of a name are held at
   * once, each with its own token, and exclude an exclusive grant (an
   * acquire without shared). Waiters are served in order, so a shared
   * acquire queued behind a waiting exclusive one waits for it: readers
   * never starve a writer. A shared token may not write the fenced store
   * (InvalidArgumentError); a holder cannot switch modes (release first).
   * See docs/locks.md. */
  shared?: boolean;
  /** The caller's priority, 0 (default) to 1000000, kept in its place in
   * the queue and in its grant. The queue stays first come, first
   * served; a waiter with a higher priority than the holder's asks the
   * holder to hand over: the holder's renewals report it
   * (RenewResult.handoffRequested), and it may then call handoff. */
  priority?: number;
}

/** KV is one value of the fenced key-value store. */
export interface KV {
  key: string;
  value: Uint8Array;
  /** The lease and token of the grant that wrote the value. */
  lease: string;
  token: bigint;
  /** The store revision at which the value was written. */
  revision: bigint;
}

/** WatchEventType is the kind of a WatchEvent. */
export type WatchEventType = "current" | "synced" | "granted" | "released" | "expired" | "revoked" | "reset";

/** WatchEvent is one event of a watch. */
export interface WatchEvent {
  /** current: a lease live when the watch (re)started; synced: the current
   * leases have been sent, events follow in commit order; granted,
   * released, expired, revoked (by an operator): a change; reset: the stream broke and the client
   * watched again, maybe on another member: events may have been missed,
   * and the current state follows again (current events and synced). */
  type: WatchEventType;
  /** The grant the event is about (current, granted, released, expired). */
  lease?: Lease;
  /** The raft index of the entry that produced the event (0n for
   * current, synced and reset). */
  index: bigint;
  /** For revoked: the operator's reason. */
  reason?: string;
}

/** Status is one member's view of the cluster. */
export interface Status {
  endpoint: string;
  nodeId: string;
  /** leader, follower, candidate or shutdown. */
  state: string;
  leaderId: string;
  leaderAddress: string;
  term: bigint;
  appliedIndex: bigint;
  members: Member[];
  clusterTimeMs: number;
  minTtlMs: number;
  leases: bigint;
  lastToken: bigint;
  clusterId: string;
}

export interface Member {
  id: string;
  raftAddress: string;
  apiAddress: string;
  /** voter or nonvoter. */
  suffrage: string;
  leader: boolean;
}

/** The defaults of ClientConfig. */
export const clientDefaults = {
  requestTimeoutMs: 5000,
  retryBackoffMs: 50,
  maxRetryBackoffMs: 1000,
} as const;

interface Endpoint {
  addr: string;
  lease: ServiceClient<typeof LeaseService>;
  kv: ServiceClient<typeof KVService>;
  cluster: ServiceClient<typeof ClusterService>;
}

/** RetryPolicy says when a failed attempt may be repeated. */
export enum RetryPolicy {
  /** Repeating is harmless: every attempt that got no answer is retried
   * (reads, acquire, renew). */
  Always,
  /** Retried only when the request certainly was not applied: the
   * connection could not be opened, or the server answered unavailable. */
  Unsent,
}

/** Outcome is what to do after a failed attempt. */
export enum Outcome {
  GiveUp,
  TryNext,
  Indeterminate,
}

const dialCodes = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH", "EADDRNOTAVAIL"]);

/** isDialError reports whether err is a failure to open a connection, so
 * the request never left. */
export function isDialError(err: unknown): boolean {
  const seen = new Set<unknown>();
  while (typeof err === "object" && err !== null && !seen.has(err)) {
    seen.add(err);
    const code = (err as { code?: unknown }).code;
    if (typeof code === "string" && dialCodes.has(code)) return true;
    err = (err as { cause?: unknown }).cause;
  }
  return false;
}

/** isWireError reports whether err is an error the server sent, rather
 * than one the client made from a network failure. */
export function isWireError(err: unknown): err is ConnectError {
  return err instanceof ConnectError && err.cause === undefined;
}

/**
 * classify decides what to do after a failed attempt: err is its error,
 * parentAborted whether the caller's signal ended the call, timedOut
 * whether the attempt's own timeout passed.
 */
export function classify(err: unknown, parentAborted: boolean, timedOut: boolean, p: RetryPolicy): Outcome {
  if (parentAborted) return Outcome.GiveUp;
  // An answer from another cluster: the request did not reach the
  // client's cluster (whatever it did on the other one), and another
  // endpoint may be of the right cluster.
  if (err instanceof OtherClusterError) return Outcome.TryNext;
  // Another endpoint of the same cluster would refuse the same
  // certificate: retrying only hides the reason.
  if (isTLSError(err)) return Outcome.GiveUp;
  const maybeApplied = p === RetryPolicy.Always ? Outcome.TryNext : Outcome.Indeterminate;
  if (timedOut) return maybeApplied;
  if (isWireError(err)) {
    if (err.code === Code.Unavailable && !isIndeterminateWire(err)) {
      // The server itself refused: not the leader, no leader, forwarding
      // failed before the leader took the request.
      return Outcome.TryNext;
    }
    if (err.code === Code.Unavailable || err.code === Code.DeadlineExceeded || err.code === Code.Canceled) {
      return maybeApplied;
    }
    return Outcome.GiveUp;
  }
  if (isDialError(err)) return Outcome.TryNext;
  // The connection broke, or the request failed on the way: it may have
  // been applied.
  return maybeApplied;
}

/** parseEndpoint returns e as host:port, and whether it was written
 * https://host:port. */
export function parseEndpoint(e: string): { addr: string; https: boolean } {
  let addr = e.trim();
  let https = false;
  if (addr.startsWith("https://")) {
    addr = addr.slice("https://".length);
    https = true;
  } else if (addr.startsWith("http://")) {
    addr = addr.slice("http://".length);
  }
  while (addr.endsWith("/")) addr = addr.slice(0, -1);
  if (addr === "") throw new TenureError("client: empty endpoint");
  const m = /^(\[[^\]]+\]|[^:/\s]+):(\d+)$/.exec(addr);
  if (m === null) throw new TenureError(`client: endpoint "${e}" is not host:port`);
  return { addr, https };
}

/** normalizeEndpoint returns e as host:port. */
export function normalizeEndpoint(e: string): string {
  return parseEndpoint(e).addr;
}

/** checkToken throws if token cannot be sent in a header. */
function checkToken(token: string): void {
  if (token === "") return;
  if (token !== token.trim() || /[\s\x00-\x1f\x7f]/.test(token) || /[^\x21-\x7e]/.test(token)) {
    throw new TenureError("client: token has spaces, control or non-ASCII characters");
  }
}

/** withHeaders returns t with the headers of set added to every request. */
function withHeaders(t: Transport, set: Record<string, string>): Transport {
  const add = (header: HeadersInit | undefined): Headers => {
    const h = new Headers(header);
    for (const [k, v] of Object.entries(set)) h.set(k, v);
    return h;
  };
  return {
    unary: (method, signal, timeoutMs, header, input, contextValues) => t.unary(method, signal, timeoutMs, add(header), input, contextValues),
    stream: (method, signal, timeoutMs, header, input, contextValues) => t.stream(method, signal, timeoutMs, add(header), input, contextValues),
  };
}

function leaseFromProto(p: PbLease | undefined, sentAt: number): Lease {
  return {
    name: p?.name ?? "",
    holder: p?.holder ?? "",
    token: p?.token ?? 0n,
    ttlMs: durationToMs(p?.ttl),
    remainingMs: durationToMs(p?.remaining),
    sentAt,
    lockDelayMs: durationToMs(p?.lockDelay),
    shared: p?.shared ?? false,
    priority: p?.priority ?? 0,
  };
}

const endings: Partial<Record<Term_Ending, TermEnding>> = {
  [Term_Ending.RELEASED]: "released",
  [Term_Ending.EXPIRED]: "expired",
  [Term_Ending.REVOKED]: "revoked",
  [Term_Ending.HANDED_OFF]: "handed_off",
};

/** floorDate is ts to the millisecond, rounded down: never after ts, so
 * that a term's end passed back as since keeps the term (timestampDate
 * rounds to the nearest millisecond, which can be after the end, and the
 * server would then leave the term out as ended before since). */
function floorDate(ts: { seconds: bigint; nanos: number }): Date {
  return new Date(Number(ts.seconds) * 1000 + Math.floor(ts.nanos / 1_000_000));
}

function termFromProto(p: PbTerm): Term {
  return {
    name: p.name,
    holder: p.holder,
    token: p.token,
    principal: p.principal,
    limit: p.limit,
    start: p.startTime ? floorDate(p.startTime) : undefined,
    end: p.endTime ? floorDate(p.endTime) : undefined,
    ending: endings[p.ending] ?? "held",
    reason: p.reason,
    writesAccepted: p.writesAccepted,
    writesRefused: p.writesRefused,
    clusterStartMs: durationToMs(p.clusterStart),
    clusterEndMs: durationToMs(p.clusterEnd),
    shared: p.shared,
  };
}

const eventTypes: Partial<Record<WatchEvent_Type, WatchEventType>> = {
  [WatchEvent_Type.CURRENT]: "current",
  [WatchEvent_Type.SYNCED]: "synced",
  [WatchEvent_Type.GRANTED]: "granted",
  [WatchEvent_Type.RELEASED]: "released",
  [WatchEvent_Type.EXPIRED]: "expired",
  [WatchEvent_Type.REVOKED]: "revoked",
};

function eventFromProto(ev: PbWatchEvent | undefined): WatchEvent {
  const out: WatchEvent = { type: eventTypes[ev?.type ?? WatchEvent_Type.UNSPECIFIED] ?? "synced", index: ev?.index ?? 0n };
  if (ev?.lease !== undefined) out.lease = leaseFromProto(ev.lease, 0);
  if (ev?.reason) out.reason = ev.reason;
  return out;
}

function membersFromProto(ms: PbMember[]): Member[] {
  return ms.map((m) => ({ id: m.id, raftAddress: m.raftAddress, apiAddress: m.apiAddress, suffrage: m.suffrage, leader: m.leader }));
}

/** Attempt is the signal of one attempt: the caller's, plus a timeout. */
class Attempt {
  readonly controller = new AbortController();
  timedOut = false;
  private timer: unknown;
  private readonly onParentAbort: () => void;
  constructor(
    private readonly clock: Clock,
    private readonly parent: AbortSignal | undefined,
    timeoutMs: number,
  ) {
    this.onParentAbort = () => this.controller.abort(parent?.reason);
    if (parent?.aborted) this.controller.abort(parent.reason);
    parent?.addEventListener("abort", this.onParentAbort, { once: true });
    if (timeoutMs > 0) {
      this.timer = clock.setTimeout(() => {
        this.timedOut = true;
        this.controller.abort(new ConnectError(`attempt timed out after ${timeoutMs}ms`, Code.DeadlineExceeded));
      }, timeoutMs);
    }
  }
  get signal(): AbortSignal {
    return this.controller.signal;
  }
  /** done stops the timer; the signal stays as it is. */
  done(): void {
    if (this.timer !== undefined) this.clock.clearTimeout(this.timer);
    this.parent?.removeEventListener("abort", this.onParentAbort);
  }
}

/** WatchStream is an open watch whose first event has arrived. */
interface WatchStream {
  iter: AsyncIterator<WatchResponse>;
  controller: AbortController;
  first: PbWatchEvent | undefined;
}

/** Watch is a running watch: iterate it with for await. */
export interface Watch extends AsyncIterable<WatchEvent> {
  /** close ends the watch; the iteration ends. */
  close(): void;
}

/**
 * Client talks to a tenure cluster over a list of endpoints. Each call
 * starts at the endpoint that last served a request and fails over to the
 * next while the cluster is unavailable, pausing after every endpoint
 * failed once. Errors are mapped to the classes of errors.ts.
 */
export class Client {
  readonly clock: Clock;
  private readonly cfg: Required<Omit<ClientConfig, "clock" | "transport" | "endpoints" | "onClose" | "clusterId" | "https" | "token">>;
  private readonly eps: Endpoint[];
  private cur = 0;
  /** The cluster the client is pinned to; undefined until known. */
  private pinned: string | undefined;
  private readonly onClose: (() => void) | undefined;
  /** Numbers the calls that change state (see requestid.ts). */
  private readonly ids = new RequestIds();

  constructor(cfg: ClientConfig) {
    if (cfg.endpoints === undefined || cfg.endpoints.length === 0) throw new TenureError("client: no endpoints");
    for (const [k, v] of Object.entries({ requestTimeoutMs: cfg.requestTimeoutMs, retryBackoffMs: cfg.retryBackoffMs, maxRetryBackoffMs: cfg.maxRetryBackoffMs })) {
      if (v !== undefined && !(v >= 0)) throw new TenureError(`client: ${k} is negative (${v})`);
    }
    if (cfg.clusterId !== undefined && cfg.clusterId !== cfg.clusterId.trim()) {
      throw new TenureError(`client: clusterId "${cfg.clusterId}" has leading or trailing space`);
    }
    if (cfg.token !== undefined) checkToken(cfg.token);
    this.pinned = cfg.clusterId || undefined;
    this.clock = cfg.clock ?? systemClock;
    this.onClose = cfg.onClose;
    this.cfg = {
      requestTimeoutMs: cfg.requestTimeoutMs || clientDefaults.requestTimeoutMs,
      retryBackoffMs: cfg.retryBackoffMs || clientDefaults.retryBackoffMs,
      maxRetryBackoffMs: cfg.maxRetryBackoffMs || clientDefaults.maxRetryBackoffMs,
    };
    this.eps = cfg.endpoints.map((e) => {
      const { addr, https } = parseEndpoint(e);
      let base = cfg.transport(`${https || cfg.https ? "https" : "http"}://${addr}`);
      if (cfg.token) base = withHeaders(base, { authorization: `Bearer ${cfg.token}` });
      // Every answer from addr has its cluster ID checked.
      const t = withClusterCheck(base, (h) => this.checkCluster(addr, h));
      return { addr, lease: createClient(LeaseService, t), kv: createClient(KVService, t), cluster: createClient(ClusterService, t) };
    });
  }

  /** close closes the client's connections. It does not end watches or
   * sessions: abort their signals, close them. */
  close(): void {
    this.onClose?.();
  }

  /** session starts a Session for this client: one holder whose leases
   * are renewed together. */
  session(cfg?: SessionConfig): Session {
    return new Session(this, cfg);
  }

  /** runElection is runElection with this client; see election.ts. */
  runElection<T>(
    name: string,
    fn: (signal: AbortSignal, lease: ElectionLease) => Promise<T> | T,
    opts?: Omit<RunOptions, "client">,
  ): Promise<T | undefined> {
    return runElection(name, fn, { ...opts, client: this });
  }

  /** observe reports the leaders of name; see election.ts. */
  observe(name: string, opts?: CallOptions): Observation {
    return observe(this, name, opts);
  }

  /** clusterId is the ID of the cluster the client is pinned to: the one
   * it was configured with, else the first one an answer carried; "" before
   * the first answer. */
  get clusterId(): string {
    return this.pinned ?? "";
  }

  /** checkCluster checks the cluster ID in h, the header of an answer from
   * addr: it pins the ID if none is pinned yet, and throws an
   * OtherClusterError if another one is. An answer without an ID (a server
   * older than the header, a node that has not joined a cluster) passes. */
  private checkCluster(addr: string, h: Headers | undefined): void {
    const seen = h?.get(clusterIdHeader);
    if (!seen) return;
    this.pinned ??= seen;
    if (this.pinned !== seen) throw new OtherClusterError(addr, this.pinned, seen);
  }

  /** requestSession is the ID of the client's session, as the request IDs
   * of its calls that change state carry it. */
  get requestSession(): string {
    return this.ids.session;
  }

  /** endpoints returns the endpoints as host:port, in the configured order. */
  get endpoints(): string[] {
    return this.eps.map((e) => e.addr);
  }

  /**
   * call runs attempt at one endpoint after another, starting with the
   * last one that worked, until an attempt succeeds, fails in a way
   * retrying cannot fix, or signal aborts. timeoutMs bounds each attempt
   * (0: no bound). The error it throws is mapped with fromConnectError.
   * An answer from another cluster fails the attempt whatever the retry
   * policy; once every endpoint has answered for another cluster, the
   * call throws that OtherClusterError.
   */
  private async call<T>(
    p: RetryPolicy,
    signal: AbortSignal | undefined,
    timeoutMs: () => number,
    attempt: (ep: Endpoint, signal: AbortSignal) => Promise<T>,
    onFailure?: (err: unknown, outcome: Outcome, unsentOutcome: Outcome) => void,
  ): Promise<T> {
    const n = this.eps.length;
    let i = this.cur;
    let backoff = this.cfg.retryBackoffMs;
    let failures = 0;
    let last: unknown;
    const refused = new Set<number>();
    let other: OtherClusterError | undefined;
    for (;;) {
      if (signal?.aborted) throw this.gaveUp(signal, failures, last, other);
      const ep = this.eps[i]!;
      const a = new Attempt(this.clock, signal, timeoutMs());
      try {
        const res = await attempt(ep, a.signal);
        this.cur = i;
        return res;
      } catch (err) {
        if (err instanceof OtherClusterError) {
          other = err;
          refused.add(i);
          if (refused.size === n) throw err;
        }
        const parentAborted = signal?.aborted ?? false;
        const outcome = classify(err, parentAborted, a.timedOut, p);
        onFailure?.(err, outcome, classify(err, parentAborted, a.timedOut, RetryPolicy.Unsent));
        if (outcome === Outcome.GiveUp) {
          if (parentAborted) throw this.gaveUp(signal!, failures, last, other);
          if (!isWireError(err) && isTLSError(err)) throw new TLSError(ep.addr, err);
          throw fromConnectError(err);
        }
        if (outcome === Outcome.Indeterminate) {
          throw new IndeterminateError(`${ep.addr}: ${messageOf(err)}`, fromConnectError(err));
        }
        last = new TenureError(`${ep.addr}: ${messageOf(err)}`, { cause: err });
      } finally {
        a.done();
      }
      failures++;
      i = (i + 1) % n;
      if (failures % n !== 0) continue;
      if (!(await sleep(this.clock, backoff, signal))) throw this.gaveUp(signal!, failures, last, other);
      backoff = Math.min(2 * backoff, this.cfg.maxRetryBackoffMs);
    }
  }

  /** gaveUp returns the error of a call whose signal aborted after
   * failures failed attempts, other the last of them refused as an answer
   * from another cluster. */
  private gaveUp(signal: AbortSignal, failures: number, last: unknown, other: OtherClusterError | undefined): Error {
    if (failures === 0) {
      return signal.reason instanceof Error ? signal.reason : new TenureError(`client: ${String(signal.reason)}`);
    }
    return new UnavailableError(failures, last, signal.reason, other);
  }

  private unary<T>(p: RetryPolicy, opts: CallOptions | undefined, fn: (ep: Endpoint, signal: AbortSignal) => Promise<T>): Promise<{ res: T; sentAt: number }> {
    let sentAt = 0;
    return this.call(p, opts?.signal, () => this.cfg.requestTimeoutMs, async (ep, signal) => {
      sentAt = this.clock.now();
      return fn(ep, signal);
    }).then((res) => ({ res, sentAt }));
  }

  /**
   * mutating runs a call that changes state as one call of the client's
   * session: every attempt carries the same request ID, so the cluster
   * applies it at most once, and sentAt is when the first attempt was sent
   * (the answer may be the outcome of an earlier attempt, which took
   * effect after it). A retry the cluster no longer remembers throws an
   * IndeterminateError whose cause is a NotAppliedError.
   */
  private async mutating<T>(
    p: RetryPolicy,
    opts: CallOptions | undefined,
    timeoutMs: () => number,
    fn: (ep: Endpoint, signal: AbortSignal, requestId: RequestIdInit) => Promise<T>,
  ): Promise<{ res: T; sentAt: number }> {
    const id = this.ids.begin();
    let sentAt: number | undefined;
    try {
      const res = await this.call(p, opts?.signal, timeoutMs, async (ep, signal) => {
        sentAt ??= this.clock.now();
        return fn(ep, signal, id);
      });
      return { res, sentAt: sentAt! };
    } catch (err) {
      if (err instanceof NotAppliedError) throw new IndeterminateError(err.message, err);
      throw err;
    } finally {
      this.ids.end(id);
    }
  }

  /**
   * acquire grants the lease name to holder for ttlMs, or renews it if
   * holder already holds it (same token). If another holder has it, it
   * throws a LeaseHeldError naming that holder. It retries on other
   * endpoints while the cluster is unavailable. Every attempt carries the
   * call's request ID, so the cluster applies the call at most once: a
   * retry of an attempt that took effect gets that attempt's outcome (its
   * grant, even if it expired since, or its "held"), never a second grant.
   * The lease's sentAt is when the first attempt was sent.
   */
  async acquire(name: string, holder: string, ttlMs: number, opts?: AcquireOptions): Promise<Lease> {
    const wait = opts?.wait ?? false;
    const waitUntil = wait && opts?.waitTimeoutMs ? this.clock.now() + opts.waitTimeoutMs : 0;
    const lockDelay = opts?.lockDelayMs ? msToDuration(opts.lockDelayMs) : undefined;
    const shared = opts?.shared ?? false;
    const priority = opts?.priority ?? 0;
    let req = { name, holder, ttl: msToDuration(ttlMs), wait, waitTimeout: undefined as ReturnType<typeof msToDuration> | undefined, lockDelay, shared, priority };
    const timeout = () => {
      req = { ...req, wait, waitTimeout: undefined };
      if (!wait) return this.cfg.requestTimeoutMs;
      if (waitUntil === 0) return 0; // bounded by the server's maximum wait and the signal
      const left = waitUntil - this.clock.now();
      if (left <= 0) {
        req.wait = false; // no time left: one plain try
        return this.cfg.requestTimeoutMs;
      }
      req.waitTimeout = msToDuration(left);
      return this.cfg.requestTimeoutMs + left;
    };
    try {
      const { res, sentAt } = await this.mutating(RetryPolicy.Always, opts, timeout, (ep, signal, requestId) =>
        ep.lease.acquire({ ...req, requestId }, { signal }),
      );
      return leaseFromProto(res.lease, sentAt);
    } catch (err) {
      if (err instanceof LeaseHeldError && err.lease === "") {
        throw new LeaseHeldError(err.message, name, err.holder, err.token, err.remainingMs, { cause: err.cause, code: err.code }, err.lockDelay, err.endedMs);
      }
      throw err;
    }
  }

  /**
   * renew extends the leases named by refs by their TTLs, in one request
   * (and one raft entry), and returns one result per ref, in order. A lease
   * that could not be renewed has its error in its result; the call
   * throws only for the request as a whole. Retried on other endpoints;
   * the cluster applies the call at most once (see acquire), and each
   * lease's sentAt is when the first attempt was sent.
   */
  async renew(refs: LeaseRef[], opts?: CallOptions): Promise<RenewResult[]> {
    const leases = refs.map((r) => create(LeaseRefSchema, { name: r.name, token: r.token }));
    const { res, sentAt } = await this.mutating(RetryPolicy.Always, opts, () => this.cfg.requestTimeoutMs, (ep, signal, requestId) =>
      ep.lease.renew({ leases, requestId }, { signal }),
    );
    if (res.results.length !== refs.length) {
      throw new TenureError(`client: renew of ${refs.length} leases returned ${res.results.length} results`);
    }
    return res.results.map((r) => {
      const err = reasonError(r.reason, r.message, { name: r.name, token: r.token, reason: r.revokeReason });
      const out: RenewResult = { ref: { name: r.name, token: r.token }, handoffRequested: "" };
      if (err === undefined) {
        out.lease = leaseFromProto(r.lease, sentAt);
        out.handoffRequested = r.handoffRequested;
      }
      else out.err = err;
      return out;
    });
  }

  /** renewOne renews one lease and throws its error; see renew. */
  async renewOne(name: string, token: bigint, opts?: CallOptions): Promise<Lease> {
    const [r] = await this.renew([{ name, token }], opts);
    if (r!.err !== undefined) throw r!.err;
    return r!.lease!;
  }

  /** release ends the grant of name with token, so the lease is free (or
   * goes to the first waiter) at once. A token that is no longer the
   * current grant gives a StaleTokenError. Retried like acquire: every
   * attempt carries the call's request ID, and a retry of a release that
   * took effect gets that release's outcome. */
  async release(name: string, token: bigint, opts?: CallOptions): Promise<void> {
    await this.mutating(RetryPolicy.Always, opts, () => this.cfg.requestTimeoutMs, (ep, signal, requestId) =>
      ep.lease.release({ name, token, requestId }, { signal }),
    );
  }

  /**
   * handoff ends the grant of name with token and, at the same cluster
   * time, grants name to the waiter `to`, or to the first waiter still
   * waiting if `to` is "" or unset: the new grant has a new, larger token
   * and starts the moment the old one ends (no gap, no overlap, no
   * lock-delay). It returns the new grant; the waiter's own acquire
   * returns it too. Stop acting under the old token first. No such waiter
   * throws a NotFoundError and changes nothing; a stale token a
   * StaleTokenError; a semaphore slot an InvalidArgumentError. Retried
   * like release.
   */
  async handoff(name: string, token: bigint, to?: string, opts?: CallOptions): Promise<Lease> {
    const { res, sentAt } = await this.mutating(RetryPolicy.Always, opts, () => this.cfg.requestTimeoutMs, (ep, signal, requestId) =>
      ep.lease.release({ name, token, requestId, handoff: true, handoffTo: to ?? "" }, { signal }),
    );
    return leaseFromProto(res.handedTo, sentAt);
  }

  /**
   * revoke ends the live grant of name with token now, or every live
   * grant of name (every slot of a semaphore) if token is 0n, as an
   * operator: the caller needs the admin role. reason (1-256 bytes of
   * printable text) is kept with the revoked grant until its old expiry:
   * its holder's next renewal, release or write fails with a RevokedError
   * that carries it, and a session's lease ends (lost). The grant's
   * lock-delay, if any, starts now; otherwise the first waiter is granted
   * at once, with a larger token. It returns the grants it ended; a name
   * with no such live grant throws a NotFoundError and changes nothing.
   * Retried like acquire: a retry gets the first attempt's outcome.
   */
  async revoke(name: string, token: bigint, reason: string, opts?: CallOptions): Promise<Lease[]> {
    const { res, sentAt } = await this.mutating(RetryPolicy.Always, opts, () => this.cfg.requestTimeoutMs, (ep, signal, requestId) =>
      ep.lease.revoke({ name, token, reason, requestId }, { signal }),
    );
    return res.revoked.map((l) => leaseFromProto(l, sentAt));
  }

  /**
   * history returns the kept terms of name, newest first: every term
   * still held and, of the ended ones, as many and as recent as the
   * cluster keeps (tenured --history-terms, --history-age). opts.since
   * leaves out the terms that ended before it; opts.limit keeps the
   * newest. The history is replicated: it survives restarts and
   * failovers. A name with no kept term gives [].
   */
  async history(name: string, opts?: HistoryOptions): Promise<Term[]> {
    const since = opts?.since ? timestampFromDate(opts.since) : undefined;
    const limit = opts?.limit && opts.limit > 0 ? opts.limit : 0;
    const { res } = await this.unary(RetryPolicy.Always, opts, (ep, signal) => ep.lease.history({ name, since, limit }, { signal }));
    return res.terms.map(termFromProto);
  }

  /** get returns the live grant of name, or throws a NotFoundError. */
  async get(name: string, opts?: CallOptions): Promise<Lease> {
    const { res, sentAt } = await this.unary(RetryPolicy.Always, opts, (ep, signal) => ep.lease.get({ name }, { signal }));
    return leaseFromProto(res.lease, sentAt);
  }

  /** list returns the live leases whose names start with prefix, sorted by
   * name. */
  async list(prefix: string, opts?: CallOptions): Promise<Lease[]> {
    const { res, sentAt } = await this.unary(RetryPolicy.Always, opts, (ep, signal) => ep.lease.list({ prefix }, { signal }));
    return res.leases.map((l) => leaseFromProto(l, sentAt));
  }

  /**
   * put writes value under key, fenced by the grant (lease, token): the
   * server accepts it only while token is the current, unexpired grant of
   * lease and no higher token wrote key; otherwise StaleTokenError. It
   * returns the store revision. A put whose answer was lost is retried,
   * like acquire: every attempt carries the call's request ID, and a retry
   * of a write that took effect gets its revision, never a second write
   * and never "stale" because a newer grant wrote the key since. A retry
   * the cluster no longer remembers is an IndeterminateError (read the key
   * to find out).
   */
  async put(key: string, value: Uint8Array | string, lease: string, token: bigint, opts?: CallOptions): Promise<bigint> {
    const v = typeof value === "string" ? new TextEncoder().encode(value) : value;
    const { res } = await this.mutating(RetryPolicy.Always, opts, () => this.cfg.requestTimeoutMs, (ep, signal, requestId) =>
      ep.kv.put({ key, value: v, lease, token, requestId }, { signal }),
    );
    return res.revision;
  }

  /** kvGet returns the value of key, or throws a NotFoundError. */
  async kvGet(key: string, opts?: CallOptions): Promise<KV> {
    const { res } = await this.unary(RetryPolicy.Always, opts, (ep, signal) => ep.kv.get({ key }, { signal }));
    return { key: res.key, value: res.value, lease: res.lease, token: res.token, revision: res.revision };
  }

  /**
   * update is a fenced read-modify-write of key with the grant (lease,
   * token): it reads key, refuses (StaleTokenError, without calling fn)
   * if the value was written by a newer token than token, calls fn with
   * the value (undefined if key holds none), and writes what fn returns
   * with put, fenced by the same grant; fn returning undefined writes
   * nothing. It resolves to what was written, or undefined.
   *
   * The read is fenced as well as the write: fn never computes on a value
   * a newer holder wrote, and the store refuses the write if the grant is
   * no longer current or a newer token wrote key in between. The store's
   * reads and writes go through the cluster's log, so a read made while
   * the grant is current has every write of the holders before it. For a
   * semaphore, whose slots hold live grants at once, give each slot its
   * own keys: two live grants can interleave their reads and writes.
   */
  async update(
    key: string,
    lease: string,
    token: bigint,
    fn: UpdateFn,
    opts?: CallOptions,
  ): Promise<KV | undefined> {
    return updateKV({ kvGet: (k, o) => this.kvGet(k, o), put: (k, v, o) => this.put(k, v, lease, token, o) }, key, lease, token, fn, opts);
  }

  /** delete removes key, fenced like put, and returns the store revision
   * of the deletion. Retried like put, at most once in effect. */
  async delete(key: string, lease: string, token: bigint, opts?: CallOptions): Promise<bigint> {
    const { res } = await this.mutating(RetryPolicy.Always, opts, () => this.cfg.requestTimeoutMs, (ep, signal, requestId) =>
      ep.kv.delete({ key, lease, token, requestId }, { signal }),
    );
    return res.revision;
  }

  /** status returns the view of the first endpoint that answers. */
  async status(opts?: CallOptions): Promise<Status> {
    let answered = "";
    const { res } = await this.unary(RetryPolicy.Always, opts, (ep, signal) => {
      answered = ep.addr;
      return ep.cluster.status({}, { signal });
    });
    return {
      endpoint: answered,
      nodeId: res.nodeId,
      state: res.state,
      leaderId: res.leaderId,
      leaderAddress: res.leaderAddress,
      term: res.term,
      appliedIndex: res.appliedIndex,
      members: membersFromProto(res.members),
      clusterTimeMs: durationToMs(res.clusterTime),
      minTtlMs: durationToMs(res.minTtl),
      leases: res.leases,
      lastToken: res.lastToken,
      clusterId: res.clusterId,
    };
  }

  /** transferLeadership asks the leader to hand over to nodeId ("" lets
   * raft pick) and returns the new leader's ID. Not retried once possibly
   * delivered. */
  async transferLeadership(nodeId: string, opts?: CallOptions): Promise<string> {
    const { res } = await this.unary(RetryPolicy.Unsent, opts, (ep, signal) => ep.cluster.transferLeadership({ nodeId }, { signal }));
    return res.leaderId;
  }

  /** openWatch starts a watch on the first endpoint that sends its first
   * event within the request timeout. */
  private openWatch(prefix: string, signal: AbortSignal): Promise<WatchStream> {
    return this.call(RetryPolicy.Always, signal, () => this.cfg.requestTimeoutMs, async (ep, attemptSignal) => {
      // The stream outlives the attempt: it has its own controller, ended
      // by the attempt's until the first event arrived.
      const controller = new AbortController();
      const onAbort = () => controller.abort(attemptSignal.reason);
      if (attemptSignal.aborted) onAbort();
      attemptSignal.addEventListener("abort", onAbort, { once: true });
      const iter = ep.lease.watch({ prefix }, { signal: controller.signal })[Symbol.asyncIterator]();
      try {
        const r = await iter.next();
        if (r.done) throw new ConnectError("client: watch ended before its first event", Code.Unavailable);
        return { iter, controller, first: r.value.event };
      } catch (err) {
        controller.abort();
        throw err;
      } finally {
        attemptSignal.removeEventListener("abort", onAbort);
      }
    });
  }

  /**
   * watch streams the leases whose names start with prefix: first the live
   * ones ("current"), then "synced", then every grant, release and expiry
   * in commit order. It resolves once the first event arrived from some
   * endpoint, retrying like the other calls; a bad prefix fails here.
   *
   * If the stream breaks, the client watches again on the next endpoint
   * that answers, announced by a "reset" event followed by the current
   * state again. The iteration ends when signal aborts or close is
   * called, and throws if the watch fails for good.
   */
  async watch(prefix: string, opts?: CallOptions): Promise<Watch> {
    const stop = new AbortController();
    const parent = opts?.signal;
    const onParent = () => stop.abort(parent?.reason);
    if (parent?.aborted) onParent();
    parent?.addEventListener("abort", onParent, { once: true });
    let ws: WatchStream;
    try {
      ws = await this.openWatch(prefix, stop.signal);
    } catch (err) {
      parent?.removeEventListener("abort", onParent);
      throw err;
    }
    // Stopping ends the open stream even if nobody iterates.
    const onStop = () => ws.controller.abort(stop.signal.reason);
    stop.signal.addEventListener("abort", onStop);
    const self = this;
    async function* run(): AsyncGenerator<WatchEvent> {
      let backoff = self.cfg.retryBackoffMs;
      try {
        for (;;) {
          yield eventFromProto(ws.first);
          let events = 0;
          let err: unknown;
          try {
            for (;;) {
              const r = await ws.iter.next();
              if (r.done) break;
              events++;
              yield eventFromProto(r.value.event);
            }
          } catch (e) {
            err = e;
          }
          ws.controller.abort();
          if (stop.signal.aborted) return;
          err ??= new ConnectError("client: the server ended the watch", Code.Unavailable);
          if (isWireError(err) && classify(err, false, false, RetryPolicy.Always) === Outcome.GiveUp) {
            throw fromConnectError(err);
          }
          // A stream that broke at once is not retried in a tight loop.
          if (events > 0) {
            backoff = self.cfg.retryBackoffMs;
          } else {
            if (!(await sleep(self.clock, backoff, stop.signal))) return;
            backoff = Math.min(2 * backoff, self.cfg.maxRetryBackoffMs);
          }
          try {
            ws = await self.openWatch(prefix, stop.signal);
          } catch (e) {
            if (stop.signal.aborted) return;
            throw e;
          }
          if (stop.signal.aborted) {
            ws.controller.abort();
            return;
          }
          yield { type: "reset", index: 0n };
        }
      } finally {
        stop.signal.removeEventListener("abort", onStop);
        ws.controller.abort();
        parent?.removeEventListener("abort", onParent);
      }
    }
    const gen = run();
    return {
      [Symbol.asyncIterator]: () => gen,
      close: () => stop.abort(new TenureError("client: watch closed")),
    };
  }
}

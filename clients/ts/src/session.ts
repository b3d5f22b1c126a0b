// Sessions and leases: the rules of the Go package election. A session
// renews all of its leases together every TTL/3; a lease's signal fires at
// its local deadline at the latest, before the server could grant the lease
// to anyone else.

import type { AcquireOptions, CallOptions, KV, Lease as Grant, LeaseRef, RenewResult, Watch } from "./client.js";
import { type UpdateFn, updateKV } from "./kvupdate.js";
import { type Clock, sleep, systemClock } from "./clock.js";
import { LeaseHeldError, NotFoundError, RevokedError, StaleTokenError, TenureError, findError, isError, messageOf } from "./errors.js";

/** ElectionClient is what sessions need of a Client. Tests supply fakes. */
export interface ElectionClient {
  acquire(name: string, holder: string, ttlMs: number, opts?: AcquireOptions): Promise<Grant>;
  renew(refs: LeaseRef[], opts?: CallOptions): Promise<RenewResult[]>;
  release(name: string, token: bigint, opts?: CallOptions): Promise<void>;
  watch(prefix: string, opts?: CallOptions): Promise<Watch>;
  put(key: string, value: Uint8Array | string, lease: string, token: bigint, opts?: CallOptions): Promise<bigint>;
  delete(key: string, lease: string, token: bigint, opts?: CallOptions): Promise<bigint>;
  /** Hands a grant to a waiter (Lease.handoff needs it). */
  handoff?(name: string, token: bigint, to?: string, opts?: CallOptions): Promise<Grant>;
  /** Reads the fenced store (Lease.update needs it). */
  kvGet?(key: string, opts?: CallOptions): Promise<KV>;
  /** The clock the client measures send times with; the session uses it
   * too. */
  readonly clock?: Clock;
}

/** SessionConfig configures a Session. Unset fields take their defaults;
 * most derive from ttlMs. Durations are in milliseconds. */
export interface SessionConfig {
  /** The session's holder name on the server. Two sessions must not share
   * one: an acquire by the current holder is a renewal. Default
   * HOST-PID-RANDOM (browser-RANDOM in a browser), new for every session. */
  holder?: string;
  /** How long a grant or renewal keeps a lease on the server. The server
   * rejects TTLs below its minimum (2s by default) with
   * InvalidArgumentError. Default 10000. */
  ttlMs?: number;
  /** How long after the send time of the last successful renewal (or
   * grant) the next one is sent. Default ttlMs/3. */
  renewIntervalMs?: number;
  /** An attempt not confirmed within it has failed: the leases turn
   * at-risk and the renewal is tried again. Default renewIntervalMs/2. */
  renewTimeoutMs?: number;
  /** How much faster the server's clock may run than this machine's, as a
   * fraction. Default 0.01. */
  drift?: number;
  /** Kept between the local deadline and the earliest moment the server
   * could expire the lease. Default max(ttlMs/10, 100). */
  marginMs?: number;
  /** The clock of deadlines and timers. Default the client's clock, else
   * systemClock. */
  clock?: Clock;
  /** A lock-delay for every grant of the session (AcquireOptions
   * .lockDelayMs): if the session loses a lease without releasing it
   * (expired, or revoked by an operator), the server grants it to nobody
   * for this long. At most 60000 by default. lockDelayMs >= ttlMs also
   * keeps a revoked term from overlapping the next one. Default 0. */
  lockDelayMs?: number;
  /** The priority stated with every acquire of the session
   * (AcquireOptions.priority), 0 to 1000000. The queue stays first come,
   * first served; a waiting session whose priority is higher than the
   * holder's asks the holder to hand over, and a holder's session does
   * so (Lease.handoff) at the renewal that reports it, unless
   * keepOnHandoffRequest is set. Default 0. */
  priority?: number;
  /** Keep the session's leases when a waiter of a higher priority asks
   * for one. Default false: hand over. */
  keepOnHandoffRequest?: boolean;
}

/** ResolvedSessionConfig is a SessionConfig with every default filled in. */
export type ResolvedSessionConfig = Required<SessionConfig>;

/** withDefaults fills in the unset fields of cfg. */
export function withDefaults(cfg: SessionConfig = {}, clock?: Clock): ResolvedSessionConfig {
  const ttlMs = cfg.ttlMs || 10_000;
  const renewIntervalMs = cfg.renewIntervalMs || ttlMs / 3;
  return {
    holder: cfg.holder || defaultHolder(),
    ttlMs,
    renewIntervalMs,
    renewTimeoutMs: cfg.renewTimeoutMs || renewIntervalMs / 2,
    drift: cfg.drift || 0.01,
    marginMs: cfg.marginMs || Math.max(ttlMs / 10, 100),
    clock: cfg.clock ?? clock ?? systemClock,
    lockDelayMs: cfg.lockDelayMs ?? 0,
    priority: cfg.priority ?? 0,
    keepOnHandoffRequest: cfg.keepOnHandoffRequest ?? false,
  };
}

/** validate throws on the first problem with a resolved config. */
export function validate(c: ResolvedSessionConfig): void {
  if (!(c.ttlMs > 0)) throw new TenureError(`election: ttlMs must be positive, got ${c.ttlMs}`);
  if (c.renewIntervalMs < 0 || c.renewTimeoutMs < 0 || c.marginMs < 0) {
    throw new TenureError("election: renewIntervalMs, renewTimeoutMs and marginMs must not be negative");
  }
  if (c.drift < 0 || c.drift >= 0.5) throw new TenureError(`election: drift must be in [0, 0.5), got ${c.drift}`);
  if (!(c.lockDelayMs >= 0)) throw new TenureError(`election: lockDelayMs must not be negative, got ${c.lockDelayMs}`);
  if (!(c.priority >= 0 && c.priority <= 1_000_000)) throw new TenureError(`election: priority must be in [0, 1000000], got ${c.priority}`);
  const safe = safeFor(c, c.ttlMs);
  if (c.renewIntervalMs >= safe) {
    throw new TenureError(
      `election: renewIntervalMs ${c.renewIntervalMs} is not shorter than the ${safe}ms a lease stays safe without renewal (ttl*(1-drift)-margin)`,
    );
  }
}

/** lifetime returns how long a lease stays safe to act on after the send
 * time of its last successful grant or renewal: ttl*(1-drift) - margin. */
export function lifetime(cfg: SessionConfig = {}): number {
  const c = withDefaults(cfg);
  return safeFor(c, c.ttlMs);
}

function safeFor(c: ResolvedSessionConfig, d: number): number {
  return d * (1 - c.drift) - c.marginMs;
}

/** deadlineOf returns the local deadline of a grant or renewal: its send
 * time plus what is safe of the time it had left on the server (the TTL
 * for a fresh grant or renewal). */
export function deadlineOf(c: ResolvedSessionConfig, g: Grant): number {
  let d = g.ttlMs;
  if (g.remainingMs > 0 && (d <= 0 || g.remainingMs < d)) d = g.remainingMs;
  if (d <= 0) d = c.ttlMs;
  return g.sentAt + safeFor(c, d);
}

let hostName: string | undefined;

/** setHostName sets the host part of default holder names; the Node.js
 * entry point sets it to os.hostname(). */
export function setHostName(name: string): void {
  hostName = name;
}

/** defaultHolder returns a holder name unique to this call. */
export function defaultHolder(): string {
  const bytes = new Uint8Array(4);
  globalThis.crypto.getRandomValues(bytes);
  const rnd = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  const proc = (globalThis as { process?: { pid?: number; env?: Record<string, string | undefined> } }).process;
  if (proc?.pid !== undefined) return `${hostName || proc.env?.HOSTNAME || "node"}-${proc.pid}-${rnd}`;
  return `browser-${rnd}`;
}

/** LostError: the lease ended without release: no renewal was confirmed
 * before the local deadline, or the server reported the grant gone
 * (cause is then its StaleTokenError or NotFoundError). */
export class LostError extends TenureError {
  constructor(
    readonly lease: string,
    readonly token: bigint,
    /** What happened, in words. */
    readonly reason: string,
    cause?: unknown,
  ) {
    super(`election: lease "${lease}" (token ${token}) lost: ${reason}${cause === undefined ? "" : ": " + messageOf(cause)}`, { cause });
  }
}

/** ReleasedError is the abort reason of a lease's signal after release,
 * resign or Session.close. */
export class ReleasedError extends TenureError {
  constructor(readonly lease: string) {
    super(`election: lease "${lease}" released`);
  }
}

/** HandedOffError is the abort reason of a lease's signal after
 * handoff: a clean end, so it is a ReleasedError too. */
export class HandedOffError extends ReleasedError {
  constructor(lease: string) {
    super(lease);
    this.message = `election: lease "${lease}" handed off`;
  }
}

/** SessionClosedError: acquire, tryAcquire and campaign once the session
 * was closed or orphaned, also when that happens while they wait. */
export class SessionClosedError extends TenureError {
  constructor() {
    super("election: session closed");
  }
}

/** DuplicateError: the session already holds (or is acquiring) the name. */
export class DuplicateError extends TenureError {
  constructor(name: string) {
    super(`election: the session already holds or is acquiring this lease: "${name}"`);
  }
}

/** LeaseState is where a Lease stands. held and at-risk are live; lost and
 * released are final. */
export type LeaseState = "held" | "at-risk" | "lost" | "released";

const ended = (s: LeaseState) => s === "lost" || s === "released";

const tooLate = new TenureError("election: the grant's deadline passed before it could be handed over");

/**
 * Lease is one lease held by a Session: its grant, a signal that fires as
 * soon as it may no longer be acted on, and its renewal state.
 *
 * The local deadline is the send time of the last successful grant or
 * renewal plus ttl*(1-drift) - margin, on the session's monotonic clock.
 * The signal fires at the deadline at the latest, which is margin (plus the
 * drift allowance) before the server could expire the lease and grant it to
 * someone else.
 */
export class Lease {
  readonly name: string;
  readonly holder: string;
  /** The fencing token of the grant. Pass it with every write the lease
   * protects. */
  readonly token: bigint;
  readonly ttlMs: number;
  private readonly controller = new AbortController();
  private _state: LeaseState = "held";
  private _sentAt: number;
  private _deadline: number;
  private _err: Error | undefined;
  private timer: unknown;
  private changedPromise!: Promise<void>;
  private resolveChanged!: () => void;
  /** Set when the session stopped renewing. */
  orphaned = false;

  /** @internal */
  constructor(
    private readonly s: Session,
    g: Grant,
    deadline: number,
  ) {
    this.name = g.name;
    this.holder = s.holder;
    this.token = g.token;
    this.ttlMs = g.ttlMs || s.config.ttlMs;
    this._sentAt = g.sentAt;
    this._deadline = deadline;
    this.newChanged();
    this.arm();
  }

  private get clock(): Clock {
    return this.s.config.clock;
  }

  private arm(): void {
    if (this.timer !== undefined) this.clock.clearTimeout(this.timer);
    this.timer = this.clock.setTimeout(() => this.expire(), this._deadline - this.clock.now());
  }

  private newChanged(): void {
    this.changedPromise = new Promise((r) => (this.resolveChanged = r));
  }

  private notify(): void {
    this.resolveChanged();
    this.newChanged();
  }

  /** signal aborts when the lease ends: at the local deadline at the
   * latest if renewals fail, at once if the server reports the grant
   * gone, or on release. Its reason is a LostError or a ReleasedError. */
  get signal(): AbortSignal {
    return this.controller.signal;
  }

  get state(): LeaseState {
    return this._state;
  }

  /** The local deadline on the session's clock: the signal fires then
   * unless a renewal succeeds before. */
  get deadline(): number {
    return this._deadline;
  }

  /** The send time of the last successful grant or renewal. */
  get lastRenewal(): number {
    return this._sentAt;
  }

  /** undefined while held, the last renewal error while at risk, and why it
   * ended once lost (a LostError) or released (a ReleasedError). */
  get err(): Error | undefined {
    return this._err;
  }

  /** changed resolves at the lease's next change of state or deadline. */
  changed(): Promise<void> {
    return this.changedPromise;
  }

  /** @internal end moves the lease to a final state and fires its signal. */
  end(state: LeaseState, cause: Error): void {
    this._state = state;
    this._err = cause;
    if (this.timer !== undefined) this.clock.clearTimeout(this.timer);
    this.timer = undefined;
    this.controller.abort(cause);
    this.notify();
  }

  /** expire runs at the deadline: unless a renewal moved it, the lease is
   * lost. */
  private expire(): void {
    if (ended(this._state)) return;
    const now = this.clock.now();
    if (now < this._deadline) {
      this.arm();
      return;
    }
    let reason = `no renewal confirmed within ${Math.round(this._deadline - this._sentAt)}ms of the last successful one being sent`;
    if (this.orphaned) reason += " (the session stopped renewing)";
    else if (this._err !== undefined) reason += ` (last error: ${this._err.message})`;
    this.end("lost", new LostError(this.name, this.token, reason));
    this.s.forget(this);
  }

  /** @internal renewed records a successful renewal. */
  renewed(g: Grant): void {
    if (ended(this._state)) return;
    if (this.clock.now() >= this._deadline) {
      // The deadline passed while the renewal was under way: the holder
      // must already have stopped, so the lease stays lost even though
      // the server renewed it.
      this.expire();
      return;
    }
    let changed = this._state !== "held";
    const d = deadlineOf(this.s.config, g);
    if (d > this._deadline) {
      this._sentAt = g.sentAt;
      this._deadline = d;
      this.arm();
      changed = true;
    }
    this._state = "held";
    this._err = undefined;
    if (changed) this.notify();
  }

  /** @internal atRisk records a failed renewal attempt. */
  atRisk(err: Error): void {
    if (ended(this._state)) return;
    this._err = err;
    if (this._state === "held") {
      this._state = "at-risk";
      this.notify();
    }
  }

  /** @internal lose ends the lease because the server reported it gone. */
  lose(err: Error): void {
    if (ended(this._state)) return;
    const revoked = findError(err, RevokedError);
    const reason = revoked ? `revoked by an operator (${revoked.reason})` : "the server no longer has this grant";
    this.end("lost", new LostError(this.name, this.token, reason, err));
    this.s.forget(this);
  }

  /**
   * release ends the lease: its signal fires (reason ReleasedError),
   * renewals stop, and the server frees the lease so the next holder gets
   * it at once. The signal fires before the request is sent, so the holder
   * has stepped down before anyone else can be granted the lease.
   * Releasing a lease the server no longer has resolves; an
   * IndeterminateError means the release may have applied.
   */
  async release(opts?: CallOptions): Promise<void> {
    if (this._state === "released") return;
    if (this._state !== "lost") this.end("released", new ReleasedError(this.name));
    this.s.forget(this);
    try {
      await this.s.client.release(this.name, this.token, opts);
    } catch (err) {
      if (err instanceof StaleTokenError) return;
      throw err;
    }
  }

  /**
   * handoff ends this term and hands the lease to the waiting candidate
   * `to`, or to the first in line: the signal fires first (reason
   * HandedOffError, a ReleasedError) and renewals stop, then the handoff
   * is sent; the server ends the grant and grants the candidate, with a
   * larger token, at the same cluster time (no gap, no overlap), and
   * only then does the candidate's campaign resolve. It returns the new
   * grant. If the server refuses (no such candidate: NotFoundError) the
   * term has ended all the same: the grant is released and the error
   * thrown. A lease that already ended throws why it ended.
   */
  async handoff(to?: string, opts?: CallOptions): Promise<Grant> {
    if (this.s.client.handoff === undefined) throw new TenureError("election: the session's client cannot hand off");
    if (ended(this._state)) throw this._err ?? new ReleasedError(this.name);
    this.end("released", new HandedOffError(this.name));
    this.s.forget(this);
    try {
      return await this.s.client.handoff(this.name, this.token, to ?? "", opts);
    } catch (err) {
      if (!(err instanceof StaleTokenError)) {
        await this.s.client.release(this.name, this.token, opts).catch(() => undefined);
      }
      throw err;
    }
  }

  /** resign is release, named for elections. */
  resign(opts?: CallOptions): Promise<void> {
    return this.release(opts);
  }

  /** endedErr returns why the lease ended, or undefined while it is live.
   * A lease whose deadline has passed ends here and now, even if its timer
   * has not fired yet (a blocked event loop, a throttled tab). */
  private endedErr(): Error | undefined {
    if (!ended(this._state) && this.clock.now() >= this._deadline) this.expire();
    return ended(this._state) ? this._err : undefined;
  }

  /**
   * put writes value under key in the cluster's fenced store with this
   * lease's token and returns the store revision. Once the lease ended
   * locally (its signal fired, or its deadline passed) it throws its err
   * without a request. The server refuses the write (StaleTokenError)
   * unless the token is the current, unexpired grant and no newer token
   * wrote key. Not retried once possibly delivered.
   */
  put(key: string, value: Uint8Array | string, opts?: CallOptions): Promise<bigint> {
    const err = this.endedErr();
    if (err !== undefined) return Promise.reject(err);
    return this.s.client.put(key, value, this.name, this.token, opts);
  }

  /**
   * update is a fenced read-modify-write of key with this lease's token
   * (see Client.update): it refuses without a request once the lease
   * ended locally, reads key, refuses (StaleTokenError) a value a newer
   * token wrote without calling fn, and writes fn's result with put, which
   * checks the local deadline again and is fenced by the store. fn
   * returning undefined writes nothing.
   */
  async update(key: string, fn: UpdateFn, opts?: CallOptions): Promise<KV | undefined> {
    const err = this.endedErr();
    if (err !== undefined) throw err;
    const c = this.s.client;
    if (c.kvGet === undefined) throw new TenureError("session: the client cannot read the store (no kvGet)");
    return updateKV({ kvGet: (k, o) => c.kvGet!(k, o), put: (k, v, o) => this.put(k, v, o) }, key, this.name, this.token, fn, opts);
  }

  /** delete removes key from the fenced store with this lease's token,
   * under the rules of put. */
  delete(key: string, opts?: CallOptions): Promise<bigint> {
    const err = this.endedErr();
    if (err !== undefined) return Promise.reject(err);
    return this.s.client.delete(key, this.name, this.token, opts);
  }
}

/** acquireWaitMs is how long one blocking acquire queues on the server
 * before it asks again (and goes to the back of the queue). */
const acquireWaitMs = 30_000;

/** gone reports whether err says the server no longer has a grant. */
function gone(err: unknown): boolean {
  return isError(err, StaleTokenError) || isError(err, NotFoundError);
}

/** anySignal returns a signal that aborts when any of signals does, and a
 * function that detaches it. */
export function anySignal(...signals: (AbortSignal | undefined)[]): { signal: AbortSignal; dispose: () => void } {
  const c = new AbortController();
  const live = signals.filter((s): s is AbortSignal => s !== undefined);
  const handlers: [AbortSignal, () => void][] = [];
  for (const s of live) {
    if (s.aborted) {
      c.abort(s.reason);
      break;
    }
    const h = () => c.abort(s.reason);
    s.addEventListener("abort", h, { once: true });
    handlers.push([s, h]);
  }
  return { signal: c.signal, dispose: () => handlers.forEach(([s, h]) => s.removeEventListener("abort", h)) };
}

/**
 * Session is one holder on one client: it acquires leases for that holder
 * and renews all of them together, one request for all, every
 * renewIntervalMs.
 *
 * close releases the session's leases and stops renewing; orphan only
 * stops renewing, so the leases run out at their deadlines.
 */
export class Session {
  readonly config: ResolvedSessionConfig;
  private readonly stop = new AbortController();
  private readonly leases = new Map<string, Lease>();
  private readonly pending = new Set<string>();
  /** The highest token of every grant handed out, by name: a new term
   * must start with a larger one. */
  private readonly used = new Map<string, bigint>();
  /** The token of a name's last term if it was lost (the server may still
   * hold it). */
  private readonly lostTokens = new Map<string, bigint>();
  private closed = false;
  private retryAt = 0;
  private timer: unknown;
  private renewing = false;

  constructor(
    /** @internal */ readonly client: ElectionClient,
    cfg: SessionConfig = {},
  ) {
    if (client === undefined || client === null) throw new TenureError("election: a client is required");
    this.config = withDefaults(cfg, client.clock);
    validate(this.config);
  }

  get holder(): string {
    return this.config.holder;
  }

  private get clock(): Clock {
    return this.config.clock;
  }

  /**
   * acquire resolves once the lease name is granted to the session's
   * holder, or rejects when signal aborts. It queues on the server (first
   * come, first served), so the grant follows the previous holder's
   * release or expiry without polling. Before it resolves it confirms the
   * grant with a renewal and bases the local deadline on that renewal's
   * send time, so however long it waited, the lease has close to its full
   * TTL ahead of it.
   */
  acquire(name: string, opts?: CallOptions): Promise<Lease> {
    return this.acquireLease(name, true, opts?.signal);
  }

  /** tryAcquire asks for the lease once; if another holder has it, it
   * throws a LeaseHeldError naming the holder. */
  tryAcquire(name: string, opts?: CallOptions): Promise<Lease> {
    return this.acquireLease(name, false, opts?.signal);
  }

  /** campaign is acquire, named for elections; resign gives the
   * leadership up. */
  campaign(name: string, opts?: CallOptions): Promise<Lease> {
    return this.acquireLease(name, true, opts?.signal);
  }

  private async acquireLease(name: string, wait: boolean, parent: AbortSignal | undefined): Promise<Lease> {
    if (this.closed) throw new SessionClosedError();
    if (this.pending.has(name) || this.leases.has(name)) throw new DuplicateError(name);
    this.pending.add(name);
    // Closing the session ends the acquire too.
    const { signal, dispose } = anySignal(parent, this.stop.signal);
    try {
      const old = this.lostTokens.get(name);
      if (old !== undefined) {
        // The last term was lost here, before the server's expiry: the
        // server may still hold it. Free it, so that the new term gets a
        // new token at once instead of a renewal of the old one.
        await this.releaseQuietly(name, old);
      }
      for (;;) {
        let g: Grant | undefined;
        let err: unknown;
        try {
          const lockDelayMs = this.config.lockDelayMs || undefined;
          const priority = this.config.priority || undefined;
          g = await this.client.acquire(
            name,
            this.holder,
            this.config.ttlMs,
            wait ? { wait: true, waitTimeoutMs: acquireWaitMs, signal, lockDelayMs, priority } : { signal, lockDelayMs, priority },
          );
        } catch (e) {
          err = e;
        }
        if (g !== undefined && g.token <= (this.used.get(name) ?? 0n)) {
          // The server renewed a grant of an earlier term (acquire by the
          // holder is a renewal). Every term has its own token: release
          // that grant and ask again.
          await this.releaseQuietly(name, g.token);
          if (await sleep(this.clock, this.retryPause(), signal)) continue;
          g = undefined;
          err = signal.reason;
        }
        if (g === undefined) {
          if (this.stop.signal.aborted) throw new SessionClosedError();
          if (signal.aborted && err !== signal.reason) {
            throw new TenureError(`election: acquire "${name}": ${messageOf(signal.reason)} (last error: ${messageOf(err)})`, { cause: signal.reason });
          }
          if (wait && !signal.aborted && isError(err, LeaseHeldError)) continue; // the server's wait timed out: queue again
          throw err;
        }
        try {
          // A grant after a wait was applied long after its request was
          // sent: confirm it with a renewal, whose send time is recent.
          return await this.establish(g, wait, signal);
        } catch (e) {
          if (this.stop.signal.aborted || e instanceof SessionClosedError) throw new SessionClosedError();
          if (gone(e) && wait && !signal.aborted) continue; // lost again before it was confirmed: queue again
          if (gone(e)) throw new TenureError(`election: the grant of "${name}" ended before it could be confirmed: ${messageOf(e)}`, { cause: e });
          throw e;
        }
      }
    } finally {
      dispose();
      this.pending.delete(name);
    }
  }

  /** establish turns a grant into a Lease, first confirming it with a
   * renewal if confirm is set or its deadline has passed already. A grant
   * it cannot hand over is released. */
  private async establish(g: Grant, confirm: boolean, signal: AbortSignal): Promise<Lease> {
    for (;;) {
      if (confirm) {
        try {
          g = await this.renewOne(g, signal);
        } catch (err) {
          if (!gone(err)) await this.releaseQuietly(g.name, g.token);
          throw err;
        }
      }
      try {
        return this.register(g);
      } catch (err) {
        if (err !== tooLate) {
          if (!(err instanceof SessionClosedError)) await this.releaseQuietly(g.name, g.token);
          throw err;
        }
      }
      confirm = true;
    }
  }

  private async renewOne(g: Grant, signal: AbortSignal): Promise<Grant> {
    const res = await this.client.renew([{ name: g.name, token: g.token }], { signal });
    if (res.length !== 1) throw new TenureError(`election: renewal of one lease returned ${res.length} results`);
    if (res[0]!.err !== undefined) throw res[0]!.err;
    return res[0]!.lease!;
  }

  /** releaseQuietly releases a grant that will not be handed to the
   * caller, so it need not run out its TTL. The caller's signal does not
   * end it; renewTimeoutMs does. */
  private async releaseQuietly(name: string, token: bigint): Promise<void> {
    const c = new AbortController();
    const t = this.clock.setTimeout(() => c.abort(new TenureError("election: release timed out")), this.config.renewTimeoutMs);
    try {
      await this.client.release(name, token, { signal: c.signal });
    } catch {
      // The grant runs out on the server.
    } finally {
      this.clock.clearTimeout(t);
    }
  }

  /** register makes a Lease of a grant and starts renewing it. It throws
   * tooLate if the grant's deadline has passed already. */
  private register(g: Grant): Lease {
    const deadline = deadlineOf(this.config, g);
    if (this.clock.now() >= deadline) throw tooLate;
    const l = new Lease(this, g, deadline);
    if (this.closed) {
      l.end("released", new ReleasedError(l.name));
      void this.releaseQuietly(g.name, g.token);
      throw new SessionClosedError();
    }
    this.leases.set(l.name, l);
    const used = this.used.get(l.name) ?? 0n;
    this.used.set(l.name, l.token > used ? l.token : used);
    this.lostTokens.delete(l.name);
    this.schedule();
    return l;
  }

  /** @internal forget stops renewing l, which has ended. */
  forget(l: Lease): void {
    if (this.leases.get(l.name) === l) this.leases.delete(l.name);
    if (l.state === "lost") this.lostTokens.set(l.name, l.token);
    else if (this.lostTokens.get(l.name) === l.token) this.lostTokens.delete(l.name);
    this.schedule();
  }

  /** close stops renewing and releases every lease of the session (their
   * signals fire first). Acquires under way reject with
   * SessionClosedError. A closed session cannot be reused. */
  async close(opts?: CallOptions): Promise<void> {
    const errs: Error[] = [];
    for (const l of this.shutdown()) {
      try {
        await l.release(opts);
      } catch (err) {
        errs.push(new TenureError(`release "${l.name}": ${messageOf(err)}`, { cause: err }));
      }
    }
    if (errs.length === 1) throw errs[0];
    if (errs.length > 1) throw new AggregateError(errs, errs.map((e) => e.message).join("; "));
  }

  /** orphan stops renewing without releasing: each lease stays live until
   * its local deadline (then it is lost), and on the server until its TTL
   * runs out. */
  orphan(): void {
    for (const l of this.shutdown()) l.orphaned = true;
  }

  private shutdown(): Lease[] {
    this.closed = true;
    const ls = this.snapshot();
    this.leases.clear();
    this.stop.abort(new SessionClosedError());
    if (this.timer !== undefined) this.clock.clearTimeout(this.timer);
    this.timer = undefined;
    return ls;
  }

  private snapshot(): Lease[] {
    return [...this.leases.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  /** retryPause is the pause after a renewal attempt that failed fast. */
  private retryPause(): number {
    return Math.min(Math.max(this.config.renewIntervalMs / 10, 10), 250);
  }

  /** schedule sets the timer of the next renewal: renewIntervalMs after
   * the earliest send time of a lease's last renewal, but not before the
   * pause after a failed attempt. */
  private schedule(): void {
    if (this.timer !== undefined) this.clock.clearTimeout(this.timer);
    this.timer = undefined;
    if (this.closed || this.renewing || this.leases.size === 0) return;
    let next = Infinity;
    for (const l of this.leases.values()) next = Math.min(next, l.lastRenewal + this.config.renewIntervalMs);
    next = Math.max(next, this.retryAt);
    this.timer = this.clock.setTimeout(() => {
      this.timer = undefined;
      void this.renewAll();
    }, next - this.clock.now());
  }

  /** renewAll renews every lease of the session in one request. */
  private async renewAll(): Promise<void> {
    const ls = this.snapshot();
    if (ls.length === 0 || this.closed) return;
    this.renewing = true;
    const c = new AbortController();
    let timedOut = false;
    const t = this.clock.setTimeout(() => {
      timedOut = true;
      c.abort(new TenureError(`renewal not confirmed within ${this.config.renewTimeoutMs}ms`));
    }, this.config.renewTimeoutMs);
    const { signal, dispose } = anySignal(c.signal, this.stop.signal);
    let res: RenewResult[] | undefined;
    let err: Error | undefined;
    try {
      res = await this.client.renew(
        ls.map((l) => ({ name: l.name, token: l.token })),
        { signal },
      );
    } catch (e) {
      err = e instanceof Error ? e : new TenureError(String(e));
    } finally {
      this.clock.clearTimeout(t);
      dispose();
      this.renewing = false;
    }
    if (this.closed) return; // stopping: the outcome no longer matters
    if (err !== undefined && timedOut) err = new TenureError(`renewal not confirmed within ${this.config.renewTimeoutMs}ms: ${err.message}`, { cause: err });
    if (err === undefined && res!.length !== ls.length) {
      err = new TenureError(`election: renewal of ${ls.length} leases returned ${res!.length} results`);
    }
    let failed = err !== undefined;
    ls.forEach((l, i) => {
      const r = res?.[i];
      if (err !== undefined) l.atRisk(err);
      else if (r!.err === undefined) {
        l.renewed(r!.lease!);
        const to = r!.handoffRequested;
        if (to && !this.config.keepOnHandoffRequest) {
          // A waiter of a higher priority asks for the lease: hand over.
          void l.handoff(to).catch(() => undefined);
        }
      } else if (gone(r!.err)) l.lose(r!.err);
      else {
        l.atRisk(r!.err);
        failed = true;
      }
    });
    this.retryAt = failed ? this.clock.now() + this.retryPause() : 0;
    this.schedule();
  }
}

// Leader election on sessions: runElection in the shape of the Go
// election.Run, and observe.

import type { CallOptions, Watch } from "./client.js";
import { TenureError } from "./errors.js";
import { type ElectionClient, type Lease, LostError, Session, type SessionConfig, anySignal } from "./session.js";

/** Leader is a holder of a lease, as observe reports it. */
export interface Leader {
  name: string;
  holder: string;
  /** The fencing token of the leader's grant. */
  token: bigint;
}

/** leadersOf turns a watch of name into its leaders: the current one, then
 * every new grant of name, each with a larger token than the one before. */
async function* leadersOf(w: Watch, name: string): AsyncGenerator<Leader> {
  let last = 0n;
  try {
    for await (const ev of w) {
      if (ev.type !== "current" && ev.type !== "granted") continue;
      // The watch is by prefix: skip longer names.
      if (ev.lease === undefined || ev.lease.name !== name || ev.lease.token <= last) continue;
      last = ev.lease.token;
      yield { name, holder: ev.lease.holder, token: ev.lease.token };
    }
  } finally {
    w.close();
  }
}

/** Observation is the async iterator of observe. */
export interface Observation extends AsyncIterableIterator<Leader> {
  /** Resolves once the watch is open (the current leader, if any, will be
   * the first value), or rejects if it cannot be opened. */
  ready: Promise<void>;
}

/**
 * observe reports the leaders of name: first the current one, if any, then
 * every new grant of name in commit order, each with its holder and token.
 * Renewals and re-acquires by the same holder are not new leaders. It
 * starts watching at once and follows the watch, which fails over and
 * reconnects by itself; leaders that came and went while it was
 * disconnected are skipped. The iteration ends when signal aborts (or the
 * consumer stops), and throws if the watch fails for good.
 */
export function observe(client: ElectionClient, name: string, opts?: CallOptions): Observation {
  const opened = client.watch(name, opts);
  const ready = opened.then(() => undefined);
  ready.catch(() => {}); // reported by the iteration too
  const gen = (async function* () {
    yield* leadersOf(await opened, name);
  })() as AsyncGenerator<Leader> & { ready?: Promise<void> };
  gen.ready = ready;
  return gen as Observation;
}

/** RunOptions configure runElection. */
export interface RunOptions {
  /** Reaches the cluster. Required. */
  client: ElectionClient;
  /** The session runElection leads with: holder, TTL and renewal timing. */
  session?: SessionConfig;
  /** Ends the election: runElection releases the lease (after fn
   * returned) and resolves with undefined. */
  signal?: AbortSignal;
  /** Called when this holder starts leading, before fn. */
  onStarted?: (lease: Lease) => void;
  /** Called when a term of leadership ended, after fn returned;
   * lease.err says why: a LostError, or a ReleasedError. */
  onStopped?: (lease: Lease) => void;
  /** Called for every new leader of the name, this holder included. */
  onNewLeader?: (leader: Leader) => void;
}

/**
 * runElection campaigns for name and, whenever it leads, calls fn with a
 * signal that fires when the leadership is lost or opts.signal aborts. The
 * signal fires at the lease's local deadline at the latest, before the
 * server could grant the lease to anyone else, so fn must stop acting on
 * the leadership when it fires; lease.token fences its writes in case it
 * does not stop in time.
 *
 * When the leadership is lost, runElection campaigns again and calls fn
 * again once it leads (with a larger token); fn's result of a lost term is
 * dropped. If fn returns while this holder still leads, runElection
 * releases the lease and returns fn's result (or throws its error): a job
 * run under a lock. When opts.signal aborts, it releases the lease and
 * resolves with undefined. It throws when it cannot campaign at all (an
 * invalid name or TTL).
 */
export async function runElection<T>(
  name: string,
  fn: (signal: AbortSignal, lease: Lease) => Promise<T> | T,
  opts: RunOptions,
): Promise<T | undefined> {
  if (opts?.client === undefined) throw new TenureError("election: runElection needs a client");
  if (!name) throw new TenureError("election: runElection needs a name");
  if (typeof fn !== "function") throw new TenureError("election: runElection needs a function to run");
  const s = new Session(opts.client, opts.session);
  const signal = opts.signal;
  let observer: Promise<void> | undefined;
  const stopObserver = new AbortController();
  try {
    if (opts.onNewLeader !== undefined) {
      const { signal: osignal } = anySignal(signal, stopObserver.signal);
      const w = await opts.client.watch(name, { signal: osignal });
      const onNewLeader = opts.onNewLeader;
      observer = (async () => {
        try {
          for await (const ld of leadersOf(w, name)) onNewLeader(ld);
        } catch {
          // The watch failed for good; the election goes on.
        }
      })();
    }
    for (;;) {
      let l: Lease;
      try {
        l = await s.campaign(name, { signal });
      } catch (err) {
        if (signal?.aborted) return undefined;
        throw err;
      }
      const out = await lead(s, l, fn, opts);
      if (signal?.aborted) return undefined;
      if (!(l.err instanceof LostError)) {
        if ("error" in out) throw out.error;
        return out.value;
      }
    }
  } finally {
    await closeQuietly(s);
    stopObserver.abort();
    await observer;
  }
}

async function closeQuietly(s: Session): Promise<void> {
  const c = new AbortController();
  const t = s.config.clock.setTimeout(() => c.abort(new TenureError("election: release timed out")), s.config.renewTimeoutMs);
  try {
    await s.close({ signal: c.signal });
  } catch {
    // The leases run out on the server.
  } finally {
    s.config.clock.clearTimeout(t);
  }
}

/** lead runs one term of leadership: fn until it returns, then a release
 * unless the lease was lost. */
async function lead<T>(
  s: Session,
  l: Lease,
  fn: (signal: AbortSignal, lease: Lease) => Promise<T> | T,
  opts: RunOptions,
): Promise<{ value: T } | { error: unknown }> {
  const { signal, dispose } = anySignal(l.signal, opts.signal);
  opts.onStarted?.(l);
  let out: { value: T } | { error: unknown };
  try {
    out = { value: await fn(signal, l) };
  } catch (error) {
    out = { error };
  }
  dispose();
  if (!(l.err instanceof LostError)) {
    const c = new AbortController();
    const t = s.config.clock.setTimeout(() => c.abort(new TenureError("election: release timed out")), s.config.renewTimeoutMs);
    await l.release({ signal: c.signal }).catch(() => {});
    s.config.clock.clearTimeout(t);
  }
  opts.onStopped?.(l);
  return out;
}

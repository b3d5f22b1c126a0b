// The fenced read-modify-write of the built-in store: Client.update and
// Lease.update.

import type { CallOptions, KV } from "./client.js";
import { NotFoundError, StaleTokenError } from "./errors.js";

/** UpdateFn computes the new value of an update from the current one
 * (undefined if the key holds none); undefined writes nothing. */
export type UpdateFn = (current: KV | undefined) => Uint8Array | string | undefined | Promise<Uint8Array | string | undefined>;

/**
 * updateKV is the read-modify-write of Client.update and Lease.update
 * over get and put (put carries the grant and checks it).
 */
export async function updateKV(
  kv: { kvGet(key: string, opts?: CallOptions): Promise<KV>; put(key: string, value: Uint8Array | string, opts?: CallOptions): Promise<bigint> },
  key: string,
  lease: string,
  token: bigint,
  fn: UpdateFn,
  opts?: CallOptions,
): Promise<KV | undefined> {
  let current: KV | undefined;
  try {
    current = await kv.kvGet(key, opts);
  } catch (err) {
    if (!(err instanceof NotFoundError)) throw err;
  }
  if (current !== undefined && current.token > token) {
    throw new StaleTokenError(
      `lease: stale token ${token} for "${key}": read a value written by token ${current.token} (lease ${current.lease}), newer than this grant`,
    );
  }
  const next = await fn(current);
  if (next === undefined) return undefined;
  const value = typeof next === "string" ? new TextEncoder().encode(next) : next;
  const revision = await kv.put(key, value, opts);
  return { key, value, lease, token, revision };
}

// Errors of the tenure client, mapped from the server's Connect errors with
// the same table the Go client uses (internal/wire): an error the server
// reports arrives as an instance of one of these classes and keeps the
// server's message.
//
//   invalid_argument                               InvalidArgumentError
//   failed_precondition, reason LEASE_HELD         LeaseHeldError (holder, token, remaining, lock-delay)
//   failed_precondition, reason STALE_TOKEN        StaleTokenError, or RevokedError (a StaleTokenError)
//                                                  when the detail has a revoke_reason
//   not_found (reason NOT_FOUND)                   NotFoundError
//   deadline_exceeded                              DeadlineExceededError
//   canceled                                       CanceledError
//   unauthenticated                                UnauthenticatedError
//   permission_denied, reason FORBIDDEN            ForbiddenError (a PermissionDeniedError)
//   permission_denied                              PermissionDeniedError
//   anything else                                  the ConnectError itself
//
// A TLS handshake that fails (a server certificate that does not verify,
// a client certificate the server refused) is a TLSError.
//
// A code shared by several rows (failed_precondition) needs its reason; a
// failed_precondition without a known reason stays a ConnectError.

import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { type ErrorDetail, ErrorDetailSchema } from "./gen/tenure/v1/tenure_pb.js";
import { durationToMs } from "./duration.js";

/** The ErrorDetail reasons the server sends. */
export const Reason = {
  LeaseHeld: "LEASE_HELD",
  StaleToken: "STALE_TOKEN",
  NotFound: "NOT_FOUND",
  NotApplied: "NOT_APPLIED",
  Indeterminate: "INDETERMINATE",
  Forbidden: "FORBIDDEN",
} as const;

/** TenureError is the base class of every error this package throws. */
export class TenureError extends Error {
  /** The Connect code of the server's answer, if the server answered. */
  readonly code: Code | undefined;
  constructor(message: string, options?: { cause?: unknown; code?: Code }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = options?.code;
  }
}

/** The server rejected the request as malformed: an empty or oversized
 * name, a TTL out of bounds, a value over the limit. */
export class InvalidArgumentError extends TenureError {}

/** Another holder has a live grant of the lease (also when a waiting
 * acquire timed out). */
export class LeaseHeldError extends TenureError {
  constructor(
    message: string,
    /** The lease's name. */
    readonly lease: string,
    /** The holder of the live grant. */
    readonly holder: string,
    /** Its fencing token. */
    readonly token: bigint,
    /** Its remaining time on the server, in milliseconds. */
    readonly remainingMs: number,
    options?: { cause?: unknown; code?: Code },
    /** Set when the name is in a lock-delay: holder and token are the
     * grant that expired or was revoked, remainingMs the time until the
     * delay ends, and endedMs how long ago the grant ended (endedMs +
     * remainingMs is its lock-delay). */
    readonly lockDelay: boolean = false,
    readonly endedMs: number = 0,
  ) {
    super(message, options);
  }
}

/** The token is not the current, unexpired grant of the lease (released,
 * expired, or granted again since), or a newer token already wrote the
 * key. */
export class StaleTokenError extends TenureError {}

/** An operator revoked the grant (Client.revoke), for `reason`. A
 * StaleTokenError too: the token fences nothing. A session's lease ends
 * with a LostError whose cause is this error. The Go client's
 * ErrRevoked. */
export class RevokedError extends StaleTokenError {
  constructor(
    message: string,
    /** The lease's name. */
    readonly lease: string,
    /** The revoked grant's token. */
    readonly token: bigint,
    /** The operator's reason. */
    readonly reason: string,
    options?: { cause?: unknown; code?: Code },
  ) {
    super(message, options);
  }
}

/** The name has no live lease, or the key holds no value. */
export class NotFoundError extends TenureError {}

/** NotAppliedError: the cluster refused a retry of a call whose outcome it
 * no longer remembers (its session was idle too long, or had too many
 * calls in flight). The retry had no effect; an earlier attempt may have.
 * The client throws it as the cause of an IndeterminateError. */
export class NotAppliedError extends TenureError {}

/** The server requires authentication and the request had none, or a
 * bearer token it does not know (unknown or revoked). Not retried: every
 * member of the cluster would refuse it alike. */
export class UnauthenticatedError extends TenureError {}

/** The request's principal may not do this: it lacks the role for the
 * name (the message names the role needed), or it is not admin for a
 * cluster call. Not retried. */
export class PermissionDeniedError extends TenureError {}

/** The grant (or the holder's place in the wait queue) belongs to another
 * principal: only the principal that acquired a grant renews, releases or
 * writes with it, whatever the token. The Go client's ErrForbidden. */
export class ForbiddenError extends PermissionDeniedError {}

/** The TLS handshake with an endpoint failed: its certificate does not
 * verify against the CA (or the system's roots), its name does not match,
 * the server refused the client certificate (none, another CA, expired),
 * or TLS was spoken to a plain-text port. Not retried on other endpoints:
 * they would fail alike. `cause` is the error of the connection. */
export class TLSError extends TenureError {
  constructor(
    /** The endpoint (host:port). */
    readonly endpoint: string,
    cause: unknown,
  ) {
    super(`client: TLS with ${endpoint} failed: ${messageOf(cause)}`, { cause });
  }
}

/** tlsCodes match the codes of Node.js's TLS and certificate errors. */
const tlsCodes = /CERT|SIGNATURE|^UNABLE_TO_|^ERR_SSL_|^ERR_TLS_|^EPROTO$|^INVALID_CA$|^PATH_LENGTH_EXCEEDED$|^INVALID_PURPOSE$|^HOSTNAME_MISMATCH$/;

/** isTLSError reports whether err, or an error in its cause chain, is a
 * failed TLS handshake (see TLSError). */
export function isTLSError(err: unknown): boolean {
  const seen = new Set<unknown>();
  while (typeof err === "object" && err !== null && !seen.has(err)) {
    if (err instanceof TLSError) return true;
    seen.add(err);
    const code = (err as { code?: unknown }).code;
    if (typeof code === "string" && tlsCodes.test(code)) return true;
    err = (err as { cause?: unknown }).cause;
  }
  return false;
}

/** The server reported that the request's deadline passed. */
export class DeadlineExceededError extends TenureError {}

/** The server reported that the request was cancelled. */
export class CanceledError extends TenureError {}

/** The caller's signal ended the call while the client was still retrying
 * because no endpoint could serve the request (unreachable, no leader, no
 * quorum). `cause` is the last endpoint's error, or, if an endpoint
 * answered for another cluster during the call, that OtherClusterError
 * (so isError(err, OtherClusterError) holds). */
export class UnavailableError extends TenureError {
  constructor(
    readonly attempts: number,
    readonly last: unknown,
    /** Why the call stopped: the caller's abort reason. */
    readonly reason: unknown,
    /** The last answer of the call refused as another cluster's, if any. */
    readonly otherCluster?: OtherClusterError,
  ) {
    const refused = otherCluster !== undefined && findError(last, OtherClusterError) === undefined ? `; refused: ${otherCluster.message}` : "";
    super(`client: no endpoint could serve the request (${attempts} attempts, last: ${messageOf(last)}${refused})`, {
      cause: otherCluster ?? last,
      code: Code.Unavailable,
    });
  }
}

/**
 * An endpoint answered for another cluster than the one the client is
 * pinned to (ClientConfig.clusterId, or the first cluster that answered).
 * Every member sends its cluster's ID with each answer (the
 * Tenure-Cluster-Id header); a node started on an empty data directory
 * without --join bootstraps a new cluster whose tokens start again from
 * 1, and its answers must not be taken for the client's cluster's. The
 * client tries its other endpoints and throws this error when every one
 * of them answered for another cluster. The refused request may have
 * taken effect on that other cluster; its answer was discarded.
 */
export class OtherClusterError extends TenureError {
  constructor(
    /** The endpoint that answered (host:port). */
    readonly endpoint: string,
    /** The cluster ID the client is pinned to. */
    readonly expected: string,
    /** The cluster ID the answer carried. */
    readonly seen: string,
  ) {
    super(`client: endpoint ${endpoint} answered for cluster ${seen}, but this client talks to cluster ${expected} (answer discarded)`);
  }
}

/** A release, put, delete or membership change was possibly delivered but
 * its outcome is unknown (the connection broke or the attempt timed out
 * after the request was sent), or the cluster refused a retry of a call
 * whose outcome it no longer remembers (cause: a NotAppliedError). Such
 * requests are not retried: read the state (get, kvGet) to find out.
 * `cause` is the error of the attempt. */
export class IndeterminateError extends TenureError {
  constructor(message: string, cause: unknown) {
    super(`client: the request may or may not have been applied: ${message}`, { cause, code: Code.Unavailable });
  }
}

type ErrorClass = abstract new (...args: never[]) => Error;

/**
 * isError reports whether err or any error in its cause chain is an
 * instance of cls: the counterpart of Go's errors.Is. An
 * IndeterminateError whose cause is a LeaseHeldError matches both.
 */
export function isError(err: unknown, cls: ErrorClass): boolean {
  return findError(err, cls) !== undefined;
}

/** findError returns the first error in err's cause chain that is an
 * instance of cls: the counterpart of Go's errors.As. */
export function findError<T extends ErrorClass>(err: unknown, cls: T): InstanceType<T> | undefined {
  const seen = new Set<unknown>();
  while (err instanceof Error && !seen.has(err)) {
    if (err instanceof cls) return err as InstanceType<T>;
    seen.add(err);
    err = (err as { cause?: unknown }).cause;
  }
  return undefined;
}

/** errorDetail returns the first tenure ErrorDetail attached to ce. */
export function errorDetail(ce: ConnectError): ErrorDetail | undefined {
  return ce.findDetails(ErrorDetailSchema)[0];
}

/** isIndeterminateWire reports whether ce is the server's "unavailable,
 * may have been applied" answer. */
export function isIndeterminateWire(ce: ConnectError): boolean {
  return ce.code === Code.Unavailable && errorDetail(ce)?.reason === Reason.Indeterminate;
}

type Row = { code: Code; reason: string; make: (msg: string, ce: ConnectError, d?: ErrorDetail) => TenureError };

const table: Row[] = [
  { code: Code.InvalidArgument, reason: "", make: (m, ce) => new InvalidArgumentError(m, { cause: ce, code: ce.code }) },
  {
    code: Code.FailedPrecondition,
    reason: Reason.LeaseHeld,
    make: (m, ce, d) =>
      new LeaseHeldError(
        m,
        d?.name ?? "",
        d?.holder ?? "",
        d?.token ?? 0n,
        durationToMs(d?.remaining),
        { cause: ce, code: ce.code },
        d?.lockDelay ?? false,
        durationToMs(d?.ended),
      ),
  },
  {
    code: Code.FailedPrecondition,
    reason: Reason.StaleToken,
    make: (m, ce, d) =>
      d?.revokeReason
        ? new RevokedError(m, d.name, d.token, d.revokeReason, { cause: ce, code: ce.code })
        : new StaleTokenError(m, { cause: ce, code: ce.code }),
  },
  { code: Code.NotFound, reason: Reason.NotFound, make: (m, ce) => new NotFoundError(m, { cause: ce, code: ce.code }) },
  { code: Code.FailedPrecondition, reason: Reason.NotApplied, make: (m, ce) => new NotAppliedError(m, { cause: ce, code: ce.code }) },
  { code: Code.DeadlineExceeded, reason: "", make: (m, ce) => new DeadlineExceededError(m, { cause: ce, code: ce.code }) },
  { code: Code.Canceled, reason: "", make: (m, ce) => new CanceledError(m, { cause: ce, code: ce.code }) },
  { code: Code.Unauthenticated, reason: "", make: (m, ce) => new UnauthenticatedError(m, { cause: ce, code: ce.code }) },
  { code: Code.PermissionDenied, reason: Reason.Forbidden, make: (m, ce) => new ForbiddenError(m, { cause: ce, code: ce.code }) },
  { code: Code.PermissionDenied, reason: "", make: (m, ce) => new PermissionDeniedError(m, { cause: ce, code: ce.code }) },
];

const defaultMessages: Record<string, string> = {
  [Code.InvalidArgument]: "lease: invalid argument",
  [Reason.LeaseHeld]: "lease: held by another holder",
  [Reason.StaleToken]: "lease: stale token",
  [Reason.NotFound]: "lease: not found",
  [Reason.NotApplied]: "lease: request below its session's floor, not applied",
  [Code.DeadlineExceeded]: "context deadline exceeded",
  [Code.Canceled]: "context canceled",
  [Code.Unauthenticated]: "unauthenticated",
  [Reason.Forbidden]: "lease: not permitted",
  [Code.PermissionDenied]: "permission denied",
};

/** rowFor returns the row with code and reason or, failing that, the only
 * row with code, or its row without a reason: a code shared by several
 * rows with reasons needs its reason. */
function rowFor(code: Code, reason: string): Row | undefined {
  const rows = table.filter((r) => r.code === code);
  return rows.find((r) => r.reason === reason) ?? (rows.length === 1 ? rows[0] : rows.find((r) => r.reason === ""));
}

/**
 * fromConnectError maps a server's Connect error to the error class of the
 * table above, with the server's message, the ConnectError as its cause
 * and, for a held lease, the holder, token and remaining time from the
 * detail. Any other value is returned unchanged.
 */
export function fromConnectError(err: unknown): unknown {
  if (!(err instanceof ConnectError)) return err;
  const d = errorDetail(err);
  const row = rowFor(err.code, d?.reason ?? "");
  if (row === undefined) return err;
  const msg = err.rawMessage || defaultMessages[row.reason || row.code] || err.message;
  return row.make(msg, err, d);
}

/**
 * reasonError returns the error of a per-item failure reported in a
 * message rather than as a Connect error (RenewResult.reason and
 * .message): undefined for the empty reason (success). revoked, if given,
 * names a revoked grant and its reason (RenewResult.revoke_reason): a
 * STALE_TOKEN is then a RevokedError.
 */
export function reasonError(
  reason: string,
  message: string,
  revoked?: { name: string; token: bigint; reason: string },
): Error | undefined {
  if (reason === "") return undefined;
  const row = table.find((r) => r.reason === reason);
  if (row === undefined) return new TenureError(message || `wire: unknown failure reason ${reason}`);
  const ce = new ConnectError(message, row.code);
  const d = revoked?.reason ? create(ErrorDetailSchema, { reason, name: revoked.name, token: revoked.token, revokeReason: revoked.reason }) : undefined;
  return row.make(message || defaultMessages[reason] || reason, ce, d);
}

export function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

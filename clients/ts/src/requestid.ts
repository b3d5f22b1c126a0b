// Request IDs: at most one effect per call.
//
// A client numbers its calls that change state (acquire, renew, release,
// put, delete) in a session of its own: every attempt of one call carries
// the same request ID (session, seq), so the cluster applies the call at
// most once and answers a retry with the outcome of the attempt that took
// effect. Each request also carries the floor, the lowest seq still in
// flight: the cluster forgets outcomes below it and refuses a late copy of
// a call below it, which the client has answered or given up on. The Go
// client does the same (client/session.go); lease/session.go is the
// server's side.

/** RequestIdInit is the request_id field of a request. */
export interface RequestIdInit {
  session: string;
  seq: bigint;
  floor: bigint;
}

/** RequestIds hands out the request IDs of one client. */
export class RequestIds {
  /** The session: 16 random bytes, hex. */
  readonly session: string;
  private next = 1n;
  private floor = 1n;
  /** ended[head + i] reports whether seq floor+i has ended. */
  private ended: boolean[] = [];
  private head = 0;

  constructor() {
    const b = new Uint8Array(16);
    globalThis.crypto.getRandomValues(b);
    this.session = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  }

  /** begin starts a call and returns its request ID, for every attempt
   * of the call. end must follow once the call settles. */
  begin(): RequestIdInit {
    const seq = this.next++;
    this.ended.push(false);
    return { session: this.session, seq, floor: this.floor };
  }

  /** end ends the call of id: answered, or given up on. The floor moves
   * past every call ended below the lowest one in flight (amortized O(1)). */
  end(id: RequestIdInit): void {
    this.ended[this.head + Number(id.seq - this.floor)] = true;
    while (this.head < this.ended.length && this.ended[this.head]) {
      this.head++;
      this.floor++;
    }
    if (this.head === this.ended.length) {
      this.ended = [];
      this.head = 0;
    } else if (this.head > 1024 && this.head * 2 > this.ended.length) {
      this.ended = this.ended.slice(this.head);
      this.head = 0;
    }
  }
}

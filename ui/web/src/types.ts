// The shapes /ui/api answers with. Times are milliseconds: cluster time
// (at, now, start, end, ...) for leases and events, Unix time for wall-clock
// times (wall, start_wall, end_wall: when the leader appended the entry; 0
// or absent if unknown) and metric samples.

export interface Lease {
  name: string;
  holder: string;
  token: number;
  ttl: number;
  granted_at: number;
  expires_at: number;
  limit?: number;
  waiters?: string[];
  shared?: boolean; // a shared (read) grant: docs/locks.md
}

export interface Activity {
  seq: number;
  index: number;
  at: number;
  wall?: number;
  kind: string;
  name?: string;
  holder?: string;
  token?: number;
  key?: string;
  delete?: boolean;
  error?: string;
  reason?: string; // an operator's reason, for "revoked"
}

export interface StatusShort {
  state: string;
  leader_id: string;
  term: number;
}

export interface Snapshot {
  node: string;
  now: number;
  wall: number;
  prefix: string;
  leases: Lease[];
  activities: Activity[];
  last: number;
  renewals: { second: number; count: number }[];
  reason?: string;
  status: StatusShort;
}

export interface LeaseEvent {
  type: "granted" | "released" | "expired";
  index: number;
  at: number;
  lease: Lease;
}

export interface Tick {
  now: number;
  wall: number;
  renewals: { second: number; count: number }[];
  renewed?: { name: string; token: number; expires_at: number }[];
  waiters?: Record<string, string[]>;
  status: StatusShort;
}

export interface Member {
  id: string;
  api_address: string;
  raft_address: string;
  voter: boolean;
  leader: boolean;
  self: boolean;
  reachable: boolean;
  error?: string;
  last_contact_ms_ago: number;
  state?: string;
  term?: number;
  applied_index?: number;
  commit_index?: number;
  cluster_time?: number;
  leader_id?: string;
}

export interface ClusterView {
  node: string;
  cluster_id: string;
  leader_id: string;
  term: number;
  cluster_time: number;
  last_token: number;
  leases: number;
  members: Member[];
}

export interface Term {
  holder: string;
  token: number;
  start: number;
  start_wall?: number;
  end?: number;
  end_wall?: number;
  ended?: string;
  reason?: string; // an operator's reason, when revoked
  writes: number;
}

export interface History {
  name: string;
  now: number;
  terms: Term[];
  stale: Stale[];
  waiters: string[] | null;
  reset?: boolean;
}

export interface Stale {
  at: number;
  wall?: number;
  token: number;
  key: string;
  current?: number;
  reason: string;
}

export interface Sample {
  t: number;
  ops: number;
  requests: number;
  commit_mean: number;
  commit_p99: number;
}

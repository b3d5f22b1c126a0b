package verify

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"time"
)

// Op kinds recorded in a history.
const (
	OpAcquire = "acquire" // Name, Holder; Wait says whether it queued
	OpRenew   = "renew"   // Name, Holder, Token
	OpRelease = "release" // Name, Holder, Token
	OpPut     = "put"     // Name (lease), Key, Value, Token
	OpGet     = "get"     // Key (tied to Name)
	// OpRevoke is an operator's revocation: Name, Token (0: every grant
	// of the name); on ok OutToken and OutHolder name the grant it ended.
	OpRevoke = "revoke"

	// Records of election workers (package election), checked by
	// CheckTerms, not by porcupine.
	OpTerm    = "term"     // Name, Holder, OutToken; Call: grant confirmed, Return: context end observed; Revoked if an operator ended it, HandedOff if handed off
	OpTermPut = "term-put" // a write under a term: Name, Holder, Term, Key, Value, Token; Late if sent after the end
	// OpTermRevoke is a lease worker's revocation of an election name
	// (as OpRevoke); the term it ends must end before the next begins.
	OpTermRevoke = "term-revoke"

	// Records of the read-write workload (see rw.go) on the names of
	// WorkerConfig.RW, held shared or exclusive: checked by the watch
	// streams (rw-exclusion) and CheckRW (shared-no-write), not by
	// porcupine, whose model has one holder per name.
	OpRWAcquire = "rw-acquire" // Name, Holder, Shared, Wait; OutToken on ok
	OpRWPut     = "rw-put"     // a write with the grant's token: Name, Key, Token, Shared
	OpRWRelease = "rw-release" // Name, Holder, Token
)

// Outcomes of an operation.
const (
	Ok   = "ok"
	Held = "held" // acquire refused: held by OutHolder with OutToken
	// HeldLockDelay counts, in a report, the held answers of a
	// lock-delay (Delayed records).
	HeldLockDelay = "held-lock-delay"
	Stale         = "stale"    // fenced: stale or foreign token, or lease expired
	NotFound      = "notfound" // get of a key never written
	Failed        = "fail"     // rejected before it could take effect (bad input)
	Indeterminate = "indeterminate"
	// Refused: an election lease refused a write without a request
	// because its context had ended.
	Refused = "refused"
	// Maybe is the outcome of a synthetic op the checker adds (see
	// RetriedAcquires): it may or may not have taken effect, and if it
	// did, between its call and its return.
	Maybe = "maybe"
)

// Record is one operation of a history: one JSON line a worker writes.
// Call and Return are wall-clock Unix nanoseconds read on this machine just
// before the request is sent and just after its answer is read.
type Record struct {
	Worker int    `json:"worker"`
	Seq    int    `json:"seq"`
	Op     string `json:"op"`
	Name   string `json:"name"`
	Holder string `json:"holder,omitempty"`
	Key    string `json:"key,omitempty"`
	Value  string `json:"value,omitempty"`
	Token  uint64 `json:"token,omitempty"`
	Wait   bool   `json:"wait,omitempty"`
	// LockDelay is an acquire's lock-delay (client.LockDelay).
	LockDelay time.Duration `json:"lock_delay_ns,omitempty"`
	Call      int64         `json:"call"`
	Return    int64         `json:"return"`

	Outcome   string `json:"outcome"`
	OutToken  uint64 `json:"out_token,omitempty"`  // granted token, or the holder's token on held, or the token that wrote a read value
	OutHolder string `json:"out_holder,omitempty"` // holder named by a held error, or the revoked grant's
	// Delayed marks a held answer of a lock-delay: OutHolder and OutToken
	// are the grant that ended without a release, and the name is in its
	// lock-delay.
	Delayed   bool   `json:"delayed,omitempty"`
	OutValue  string `json:"out_value,omitempty"` // value read by get
	Remaining int64  `json:"remaining_ns,omitempty"`
	Err       string `json:"err,omitempty"`
	// Attempts is how many HTTP requests the client made for the op (more
	// than one: it retried).
	Attempts int `json:"attempts,omitempty"`
	// Term numbers a worker's terms of leadership (OpTerm, OpTermPut).
	Term int `json:"term,omitempty"`
	// Late marks a write an election worker tried after its term's
	// context had ended.
	Late bool `json:"late,omitempty"`
	// Revoked marks a term an operator's revocation ended.
	Revoked bool `json:"revoked,omitempty"`
	// HandedOff marks a term its holder handed off to the next in line
	// (election.Lease.Handoff): the next term may begin at once, but
	// never before this one's context ended.
	HandedOff bool `json:"handed_off,omitempty"`
	// Synthetic marks an op the checker added (see RetriedAcquires).
	Synthetic bool `json:"synthetic,omitempty"`
	// Shared marks a shared (read) acquire of the read-write workload,
	// and the ops under its grant.
	Shared bool `json:"shared,omitempty"`
}

// RetriedAcquires returns, for every acquire the client answered after
// more than one attempt (Attempts > 1) with "held" or with a grant, a
// synthetic acquire by the same holder with the same call and return
// times whose outcome is Maybe: a grant, to a token the holder never
// learned, that may have happened before the answer.
//
// It models known bugs B1b and B1c: client.Acquire retries an attempt
// whose outcome it does not know. When the first attempt was granted and
// that grant expired (nobody renewed it) before the retry, the retry is
// not the renewal the client expects: it is answered "held" (B1b; since
// 6968733 the client reports that as indeterminate) or makes a second
// grant with a new token (B1c), and the first grant is never reported.
// Fencing holds (nobody can use a token they never learned), but the op
// took effect twice. Both are fixed: every attempt of a call carries the
// call's request ID and the cluster answers a retry with the first
// outcome, so a run tolerates neither. Only a re-check of a history
// recorded before the fix (Config.Legacy, --recheck DIR --strict=false)
// adds the synthetic ops. An answer after a single attempt stays
// definite.
func RetriedAcquires(h History) History {
	var out History
	for _, r := range h {
		if r.Op == OpAcquire && (r.Outcome == Held || r.Outcome == Ok) && r.Attempts > 1 {
			out = append(out, Record{Worker: r.Worker, Seq: r.Seq, Op: OpAcquire, Name: r.Name, Holder: r.Holder,
				Wait: r.Wait, Call: r.Call, Return: r.Return, Outcome: Maybe, Synthetic: true})
		}
	}
	return out
}

// KeyOf returns the fenced key tied to a lease name.
func KeyOf(name string) string { return "k/" + name }

// History is every operation of a run.
type History []Record

// Split returns the records checked by porcupine and the invariants
// (lease workers) and those of election workers. The read-write
// workload's records are in neither (see CheckRW).
func (h History) Split() (leases, terms History) {
	for _, r := range h {
		if isRW(r.Op) {
			continue
		}
		if r.Op == OpTerm || r.Op == OpTermPut || r.Op == OpTermRevoke {
			terms = append(terms, r)
		} else {
			leases = append(leases, r)
		}
	}
	return leases, terms
}

// ByName splits h per lease name, each sorted by call time.
func (h History) ByName() map[string]History {
	out := make(map[string]History)
	for _, r := range h {
		out[r.Name] = append(out[r.Name], r)
	}
	for _, rs := range out {
		sort.SliceStable(rs, func(i, j int) bool { return rs[i].Call < rs[j].Call })
	}
	return out
}

// WriteJSONL writes h as JSON lines to path.
func (h History) WriteJSONL(path string) error { return writeJSONL(path, h) }

// ReadJSONL reads records, one JSON object a line, until EOF.
func ReadJSONL(r io.Reader) (History, error) {
	var h History
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var rec Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return h, fmt.Errorf("history line %q: %w", sc.Text(), err)
		}
		h = append(h, rec)
	}
	return h, sc.Err()
}

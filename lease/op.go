package lease

import (
	"time"
	"unicode"
	"unicode/utf8"
)

// OpType names one kind of operation in a Batch.
type OpType uint8

// The operations. The numeric values are part of the log format: never
// renumber them.
const (
	OpAcquire    OpType = 1  // Name, Holder, TTL, Wait, WaitTimeout, Limit, LockDelay, Principal, Shared
	OpRenew      OpType = 2  // Refs
	OpRelease    OpType = 3  // Name, Token
	OpExpire     OpType = 4  // (uses the batch time)
	OpGet        OpType = 5  // Name
	OpList       OpType = 6  // Prefix
	OpPut        OpType = 7  // Key, Value, Name (lease), Token
	OpKVGet      OpType = 8  // Key
	OpDelete     OpType = 9  // Key, Name (lease), Token
	OpCancelWait OpType = 10 // Name, Holder, Principal
	OpKVList     OpType = 11 // Prefix
	OpRevoke     OpType = 12 // Name, Token (0: every grant of Name), Reason, Principal
	// OpHistory reads the kept terms of Name (see history.go).
	OpHistory OpType = 13 // Name
	// OpHistoryConfig sets the history's retention: Limit terms per
	// name, for TTL after each ended. The leader proposes it.
	OpHistoryConfig OpType = 14 // Limit (terms), TTL (age)
	// OpTrim ends the grant Name/Token at At, a time no earlier than
	// any the leader promised its holder, when its expiry in the state
	// is later (see memory.go). The leader proposes it.
	OpTrim OpType = 15 // Name, Token, At
)

var opNames = map[OpType]string{
	OpAcquire: "acquire", OpRenew: "renew", OpRelease: "release",
	OpExpire: "expire", OpGet: "get", OpList: "list", OpPut: "put",
	OpKVGet: "kv_get", OpDelete: "delete", OpCancelWait: "cancel_wait",
	OpKVList: "kv_list", OpRevoke: "revoke", OpHistory: "history",
	OpHistoryConfig: "history_config", OpTrim: "trim",
}

func (t OpType) String() string {
	if s, ok := opNames[t]; ok {
		return s
	}
	return "unknown"
}

// Ref names one grant: a lease name and its token. In an OpRenew, a
// non-zero TTL replaces the grant's TTL before the renewal (the new TTL is
// kept by later renewals); zero keeps the grant's TTL.
type Ref struct {
	Name  string
	Token uint64
	TTL   time.Duration
}

// Op is one operation. Only the fields listed next to its type are used.
type Op struct {
	Type        OpType
	Name        string
	Holder      string
	TTL         time.Duration
	Token       uint64
	Wait        bool
	WaitTimeout time.Duration
	Refs        []Ref
	Prefix      string
	Key         string
	Value       []byte
	// Limit makes an OpAcquire a semaphore acquire: up to Limit holders
	// of Name at once, each with its own slot and token. 0 and 1 mean a
	// plain lease (one holder).
	Limit int
	// Principal is the authenticated caller, set by the server ("" when
	// the server authenticates nobody). An OpAcquire records it in the
	// grant; an OpRenew, OpRelease, OpPut or OpDelete of a grant with a
	// principal is refused with ErrForbidden unless it comes from the
	// same one.
	Principal string
	// Session, Seq and Floor identify one call of a client session (see
	// session.go): every attempt of the call carries the same Session
	// and Seq, and Floor is the lowest Seq of the session still in
	// flight. An OpAcquire, OpRenew, OpRelease, OpPut or OpDelete with a
	// Session is applied at most once per Seq: a retry gets the first
	// outcome. Session "" is a request without a session (the other
	// fields are then unused).
	Session string
	Seq     uint64
	Floor   uint64
	// LockDelay is an OpAcquire's lock-delay: when the grant expires or
	// is revoked (not when it is released), no new grant of Name is made
	// until LockDelay has passed in cluster time, counted from the expiry
	// (or the revocation). 0 for none. See lockdelay.go.
	LockDelay time.Duration
	// Reason is why an OpRevoke ends the grant: the operator's words,
	// kept for the holder (see lockdelay.go).
	Reason string
	// Shared makes an OpAcquire a shared (read) acquire: shared grants
	// of a name coexist, each with its own token, and exclude an
	// exclusive grant. See shared.go.
	Shared bool
	// Handoff makes an OpRelease a handoff (see handoff.go): the grant
	// ends and, in the same Apply, the waiter HandoffTo (or the first
	// waiter when HandoffTo is "") is granted the name.
	Handoff   bool
	HandoffTo string
	// Priority is an OpAcquire's priority, kept in its waiter and its
	// grant: a waiter with a higher priority than the holder's asks the
	// holder to hand over (see handoff.go). 0 for none.
	Priority int
	// At is an OpTrim's time: the latest expiry the leader promised
	// the grant's holder.
	At time.Duration
}

// Batch is the unit of replication: operations stamped with one cluster
// time, applied in order.
type Batch struct {
	// Now is the cluster time chosen by the leader. Apply never lets cluster
	// time go backwards: it uses max(Now, time of the last applied batch).
	Now time.Duration
	// Wall is the leader's wall clock when it stamped the batch, in Unix
	// nanoseconds, or 0 if unknown. It is for display only: the history
	// records it next to cluster time (history.go); Apply decides
	// nothing by it.
	Wall int64
	// Headroom, if not zero, gives every grant and renewal in the batch
	// an expiry later than the one promised to its holder, by the
	// grant's TTL or Headroom, whichever is shorter, so that the leader
	// can answer the next renewals from memory (see memory.go).
	Headroom time.Duration
	Ops      []Op
}

// Lease is one grant: of a plain lease, or one slot of a semaphore.
// Times are cluster times.
type Lease struct {
	Name      string
	Holder    string
	Token     uint64
	TTL       time.Duration
	GrantedAt time.Duration
	ExpiresAt time.Duration
	// Limit is the semaphore limit of Name (at most Limit slots held at
	// once), or 0 for a plain lease.
	Limit int `json:",omitempty"`
	// Principal is the authenticated caller that acquired the grant, or
	// "" if the server authenticated nobody. Only that principal may
	// renew or release the grant or write with its token.
	Principal string `json:",omitempty"`
	// LockDelay is the grant's lock-delay (see Op.LockDelay), 0 for none.
	LockDelay time.Duration `json:",omitempty"`
	// Shared is true for a shared (read) grant: other shared grants of
	// Name may be live with it, an exclusive one may not (shared.go).
	Shared bool `json:",omitempty"`
	// termed is true if the lease history keeps the grant's term: the
	// retention kept terms when it was granted (see history.go). Its
	// term is made from the grant itself while it is held.
	termed bool
	// Priority is the grant's priority (see Op.Priority), 0 for none.
	Priority int `json:",omitempty"`
	// Promised, if not zero, is the expiry promised to the holder by the
	// last grant or renewal in the log, earlier than ExpiresAt, which
	// leaves headroom for renewals answered from the leader's memory
	// (see memory.go). Zero means ExpiresAt was promised.
	Promised time.Duration `json:",omitempty"`
	// startWall is the leader's wall clock at the grant, for its term
	// (Term.StartWall), when termed.
	startWall int64
}

// Promise returns the expiry promised to the holder: Promised if set,
// else ExpiresAt.
func (l Lease) Promise() time.Duration {
	if l.Promised != 0 {
		return l.Promised
	}
	return l.ExpiresAt
}

// Remaining returns how long the lease has left at cluster time now, as
// promised to its holder.
func (l Lease) Remaining(now time.Duration) time.Duration {
	if r := l.Promise() - now; r > 0 {
		return r
	}
	return 0
}

// Entry is one value of the fenced key-value store.
type Entry struct {
	Key      string
	Value    []byte
	Lease    string
	Token    uint64
	Revision uint64
}

// Limits bounds what requests may carry. They are checked by Validate before
// a request is proposed, so a rejected request never reaches the log.
type Limits struct {
	// MaxNameLen is the longest lease name or key in bytes. Default 256.
	MaxNameLen int
	// MaxHolderLen is the longest holder in bytes. Default 128.
	MaxHolderLen int
	// MaxValueLen is the largest value in bytes. Default 1 MiB.
	MaxValueLen int
	// MinTTL is the shortest TTL. The node derives it from raft timing
	// (at least twice the election timeout). Default 2s.
	MinTTL time.Duration
	// MaxTTL is the longest TTL. Default 24h.
	MaxTTL time.Duration
	// MaxWait is the longest wait_timeout; a wait with no timeout uses it.
	// Default 5m.
	MaxWait time.Duration
	// MaxRenew is the most leases one Renew may carry. Default 10000.
	MaxRenew int
	// MaxLimit is the largest semaphore limit (holders of one name at
	// once). Default 1000.
	MaxLimit int
	// MaxLockDelay is the longest lock-delay of a grant. Default 1m; 0
	// allows none.
	MaxLockDelay time.Duration
	// MaxReasonLen is the longest reason of a revocation in bytes.
	// Default 256.
	MaxReasonLen int
}

// MaxPriority is the highest priority an acquire may state.
const MaxPriority = 1000000

// DefaultLimits returns the default limits.
func DefaultLimits() Limits {
	return Limits{
		MaxNameLen:   256,
		MaxHolderLen: 128,
		MaxValueLen:  1 << 20,
		MinTTL:       2 * time.Second,
		MaxTTL:       24 * time.Hour,
		MaxWait:      5 * time.Minute,
		MaxRenew:     10000,
		MaxLimit:     1000,
		MaxLockDelay: time.Minute,
		MaxReasonLen: 256,
	}
}

func checkText(field, s string, max int) error {
	if s == "" {
		return invalidf("%s is empty", field)
	}
	if len(s) > max {
		return invalidf("%s is %d bytes, more than the limit of %d", field, len(s), max)
	}
	if printableASCII(s) {
		return nil
	}
	if !utf8.ValidString(s) {
		return invalidf("%s is not valid UTF-8", field)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return invalidf("%s contains the unprintable character %U", field, r)
		}
	}
	return nil
}

// printableASCII reports whether s is made only of the printable ASCII
// characters, space to tilde, all of which unicode.IsPrint accepts: most
// names, holders and session IDs, checked without decoding runes.
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c > '~' {
			return false
		}
	}
	return true
}

func (l Limits) checkTTL(ttl time.Duration) error {
	switch {
	case ttl <= 0:
		return invalidf("ttl must be positive, got %s", ttl)
	case ttl < l.MinTTL:
		return invalidf("ttl %s is below the minimum of %s", ttl, l.MinTTL)
	case ttl > l.MaxTTL:
		return invalidf("ttl %s is above the maximum of %s", ttl, l.MaxTTL)
	}
	return nil
}

func checkToken(t uint64) error {
	if t == 0 {
		return invalidf("token is missing (tokens start at 1)")
	}
	return nil
}

// Validate checks op against the limits. Ops of type OpExpire are internal
// and always valid. A nil error means op may be proposed.
func (l Limits) Validate(op Op) error {
	if err := checkSession(op); err != nil {
		return err
	}
	switch op.Type {
	case OpAcquire:
		if err := checkText("name", op.Name, l.MaxNameLen); err != nil {
			return err
		}
		if err := checkText("holder", op.Holder, l.MaxHolderLen); err != nil {
			return err
		}
		if err := l.checkTTL(op.TTL); err != nil {
			return err
		}
		if op.WaitTimeout < 0 {
			return invalidf("wait_timeout must not be negative, got %s", op.WaitTimeout)
		}
		if op.WaitTimeout > l.MaxWait {
			return invalidf("wait_timeout %s is above the maximum of %s", op.WaitTimeout, l.MaxWait)
		}
		if op.WaitTimeout > 0 && !op.Wait {
			return invalidf("wait_timeout is set but wait is not")
		}
		if op.Limit < 0 || op.Limit > max(l.MaxLimit, 1) {
			return invalidf("limit %d is out of range: 1 to %d holders", op.Limit, max(l.MaxLimit, 1))
		}
		if op.LockDelay < 0 {
			return invalidf("lock_delay must not be negative, got %s", op.LockDelay)
		}
		if op.LockDelay > l.MaxLockDelay {
			return invalidf("lock_delay %s is above the maximum of %s", op.LockDelay, l.MaxLockDelay)
		}
		if err := checkShared(op); err != nil {
			return err
		}
		if err := checkPriority(op.Priority); err != nil {
			return err
		}
	case OpRenew:
		if len(op.Refs) == 0 {
			return invalidf("no leases to renew")
		}
		if len(op.Refs) > l.MaxRenew {
			return invalidf("%d leases in one renewal, more than the limit of %d", len(op.Refs), l.MaxRenew)
		}
		for _, r := range op.Refs {
			if err := checkText("name", r.Name, l.MaxNameLen); err != nil {
				return err
			}
			if err := checkToken(r.Token); err != nil {
				return err
			}
			if r.TTL != 0 {
				if err := l.checkTTL(r.TTL); err != nil {
					return err
				}
			}
		}
	case OpRelease:
		if err := checkText("name", op.Name, l.MaxNameLen); err != nil {
			return err
		}
		if err := l.checkHandoff(op); err != nil {
			return err
		}
		return checkToken(op.Token)
	case OpGet:
		return checkText("name", op.Name, l.MaxNameLen)
	case OpList, OpKVList:
		if len(op.Prefix) > l.MaxNameLen {
			return invalidf("prefix is %d bytes, more than the limit of %d", len(op.Prefix), l.MaxNameLen)
		}
	case OpPut, OpDelete:
		if err := checkText("key", op.Key, l.MaxNameLen); err != nil {
			return err
		}
		if err := checkText("lease", op.Name, l.MaxNameLen); err != nil {
			return err
		}
		if len(op.Value) > l.MaxValueLen {
			return invalidf("value is %d bytes, more than the limit of %d", len(op.Value), l.MaxValueLen)
		}
		return checkToken(op.Token)
	case OpKVGet:
		return checkText("key", op.Key, l.MaxNameLen)
	case OpCancelWait:
		if err := checkText("name", op.Name, l.MaxNameLen); err != nil {
			return err
		}
		return checkText("holder", op.Holder, l.MaxHolderLen)
	case OpRevoke:
		if err := checkText("name", op.Name, l.MaxNameLen); err != nil {
			return err
		}
		return checkText("reason", op.Reason, l.MaxReasonLen)
	case OpHistory:
		return checkText("name", op.Name, l.MaxNameLen)
	case OpHistoryConfig:
		return checkRetention(HistoryRetention{Terms: op.Limit, Age: op.TTL})
	case OpTrim:
		return checkText("name", op.Name, l.MaxNameLen)
	case OpExpire:
	default:
		return invalidf("unknown operation %d", op.Type)
	}
	return nil
}

package redisfence

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tenure-io/tenure/fence"
)

// DefaultPrefix starts the key of every fence by default.
const DefaultPrefix = "tenure:fence:"

// Sentinels.
var (
	// ErrWrongType is returned when a key a guarded write touches holds
	// another type than the write needs (a fenced SET on a hash, a fenced
	// HSET on a list), or a fence key holds something other than a token.
	// Nothing is written and the fence is left as it was.
	ErrWrongType = errors.New("redisfence: key holds the wrong kind of value")
)

// Config configures a Fence. Start from DefaultConfig.
type Config struct {
	// Prefix starts the key of every fence: the fence of resource R is
	// the string key Prefix + "{" + R + "}", holding the highest token
	// accepted as a decimal number. Default (also when empty)
	// DefaultPrefix, "tenure:fence:". It must not contain "{" or "}".
	Prefix string
}

// DefaultConfig returns the defaults described on each Config field.
func DefaultConfig() Config { return Config{Prefix: DefaultPrefix} }

// Validate reports the first problem with c.
func (c Config) Validate() error {
	if strings.ContainsAny(c.Prefix, "{}") {
		return fmt.Errorf("redisfence: Config.Prefix %q contains a brace; the hash tag is the resource's", c.Prefix)
	}
	return nil
}

// Fence performs guarded writes on Redis. It is safe for concurrent use.
type Fence struct {
	rdb    redis.Scripter
	prefix string
}

// New returns a Fence that runs its scripts on rdb: a *redis.Client, a
// *redis.ClusterClient or a *redis.Ring (not a pipeline: the scripts are
// sent with EVALSHA, and with EVAL when the server does not have them
// yet, which needs the answer of the first).
func New(rdb redis.Scripter, cfg Config) (*Fence, error) {
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Fence{rdb: rdb, prefix: cfg.Prefix}, nil
}

// FenceKey returns the key of resource's fence. Its hash tag is
// {resource}: in a Redis Cluster, the keys a guarded write touches must
// carry the same tag (for example "reports:{jobs/nightly}:latest") so that
// they live in the fence's slot.
func (f *Fence) FenceKey(resource string) string { return f.prefix + "{" + resource + "}" }

// check validates a write's resource and token and returns the fence key
// and the token as a decimal string.
func (f *Fence) check(l fence.Lease) (key, token string, err error) {
	resource, tok := l.Name(), l.Token()
	if err := fence.Check(resource, tok); err != nil {
		return "", "", err
	}
	if strings.ContainsAny(resource, "{}") {
		return "", "", fence.Invalid("resource %q contains a brace, which would break the fence key's hash tag", resource)
	}
	return f.FenceKey(resource), strconv.FormatUint(tok, 10), nil
}

// run runs s with the fence of l and maps its errors.
func (f *Fence) run(ctx context.Context, s *redis.Script, l fence.Lease, keys []string, args ...any) (any, error) {
	fkey, token, err := f.check(l)
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		if k == "" {
			return nil, fence.Invalid("empty key")
		}
	}
	v, err := s.Run(ctx, f.rdb, append([]string{fkey}, keys...), append([]any{token}, args...)...).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, scriptError(err, l)
	}
	return v, nil
}

// Set sets key to value, as SET does (replacing a string; ttl > 0 sets
// an expiry, in milliseconds' precision), if l's token passes the fence
// of l.Name(). A key holding another type than a string is refused with
// ErrWrongType.
func (f *Fence) Set(ctx context.Context, l fence.Lease, key string, value any, ttl time.Duration) error {
	if ttl < 0 {
		return fence.Invalid("negative ttl %s", ttl)
	}
	_, err := f.run(ctx, setScript, l, []string{key}, value, ttl.Milliseconds())
	return err
}

// HSet sets fields of the hash key, as HSET does, if l's token passes:
// values are field, value pairs. A key holding another type than a hash
// is refused with ErrWrongType. It returns the number of fields added.
func (f *Fence) HSet(ctx context.Context, l fence.Lease, key string, values ...any) (int64, error) {
	if len(values) == 0 || len(values)%2 != 0 {
		return 0, fence.Invalid("HSet needs field, value pairs; got %d values", len(values))
	}
	v, err := f.run(ctx, hsetScript, l, []string{key}, values...)
	n, _ := v.(int64)
	return n, err
}

// Del deletes keys, as DEL does, if l's token passes, and returns how
// many existed.
func (f *Fence) Del(ctx context.Context, l fence.Lease, keys ...string) (int64, error) {
	if len(keys) == 0 {
		return 0, fence.Invalid("Del needs at least one key")
	}
	v, err := f.run(ctx, delScript, l, keys)
	n, _ := v.(int64)
	return n, err
}

// Get reads key, as GET does, fenced: it is the read of a
// read-modify-write. Like a write, it refuses a stale token and records
// l's token, so that from then on no lower token can write under l.Name()
// (a late holder that wakes up between this read and the write that
// follows is refused). found is false when key does not exist. A key that
// is not a string is refused with ErrWrongType. A read with a plain GET
// records nothing, and a late holder's write can then land between it and
// the write: see Update and docs/fencing.md.
func (f *Fence) Get(ctx context.Context, l fence.Lease, key string) (value string, found bool, err error) {
	v, err := f.run(ctx, getScript, l, []string{key})
	if err != nil || v == nil {
		return "", false, err
	}
	s, _ := v.(string)
	return s, true, nil
}

// Update is a fenced read-modify-write of the string key: a fenced Get,
// then fn with what it read (found is false for no key), then a fenced
// Set of what fn returned (no expiry). The fenced read keeps every lower
// token from writing in between; a newer holder that writes in between
// makes the Set fail with a *fence.StaleError. If fn returns an error,
// nothing is written and Update returns it. Update does not keep two
// writers with the same token (one holder's goroutines) apart; for that,
// or to read and write in one step, write the read-modify-write as a
// Script.
func (f *Fence) Update(ctx context.Context, l fence.Lease, key string, fn func(old string, found bool) (string, error)) error {
	old, found, err := f.Get(ctx, l, key)
	if err != nil {
		return err
	}
	v, err := fn(old, found)
	if err != nil {
		return err
	}
	return f.Set(ctx, l, key, v, 0)
}

// Advance records token as resource's fence if it is not lower than the
// highest accepted, and returns a *fence.StaleError otherwise. It writes
// nothing else; it is the check of an HTTP service's fence kept in Redis
// (see httpfence).
func (f *Fence) Advance(ctx context.Context, resource string, token uint64) error {
	_, err := f.run(ctx, advanceScript, fence.Grant(resource, token), nil)
	return err
}

// Highest returns the highest token accepted for resource, 0 for none.
func (f *Fence) Highest(ctx context.Context, resource string) (uint64, error) {
	v, err := readScript.Run(ctx, f.rdb, []string{f.FenceKey(resource)}).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, scriptError(err, fence.Grant(resource, 0))
	}
	s, _ := v.(string)
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: the fence key %s holds %q", ErrWrongType, f.FenceKey(resource), s)
	}
	return n, nil
}

// Script is a Lua script body of the caller's that runs only if the
// fence passes, in the same atomic step: see Fence.Script.
type Script struct {
	f *Fence
	s *redis.Script
}

// Script returns body as a guarded script. body is Lua as in EVAL: it
// sees its own keys in KEYS and arguments in ARGV, calls redis.call, and
// what it returns is Run's result. It runs only if the token passes the
// fence, and the token is recorded after it returns, all in one script.
// If body raises an error the fence is not raised, but, as with any Redis
// script, the writes it made before the error stay. In a Redis Cluster,
// the keys must carry the fence's hash tag (see FenceKey).
func (f *Fence) Script(body string) *Script {
	return &Script{f: f, s: redis.NewScript(checkLua + "local function body(KEYS, ARGV)\n" + body +
		"\nend\nlocal res = body({unpack(KEYS, 2)}, {unpack(ARGV, 2)})\n" + recordLua + "return res\n")}
}

// Hash returns the SHA1 digest of the whole script (the fence check with
// the body), by which EVALSHA names it.
func (s *Script) Hash() string { return s.s.Hash() }

// Run runs the script with keys and args if l's token passes the fence
// of l.Name(). A nil reply is a nil result, not an error.
func (s *Script) Run(ctx context.Context, l fence.Lease, keys []string, args ...any) (any, error) {
	return s.f.run(ctx, s.s, l, keys, args...)
}

// scriptError maps an error reply of the scripts.
func scriptError(err error, l fence.Lease) error {
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "TENURE_STALE "):
		h, _ := strconv.ParseUint(strings.TrimPrefix(msg, "TENURE_STALE "), 10, 64)
		return &fence.StaleError{Resource: l.Name(), Token: l.Token(), Highest: h}
	case strings.HasPrefix(msg, "TENURE_INVALID "):
		return fence.Invalid("%s", strings.TrimPrefix(msg, "TENURE_INVALID "))
	case strings.HasPrefix(msg, "TENURE_WRONGTYPE "):
		return fmt.Errorf("%w: %s (nothing was written)", ErrWrongType, strings.TrimPrefix(msg, "TENURE_WRONGTYPE "))
	}
	return fmt.Errorf("redisfence: %q: %w", l.Name(), err)
}

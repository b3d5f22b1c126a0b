package server

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
)

// An auth file names the principals a server knows, their roles and the
// SHA-256 hashes of their bearer tokens (never the tokens):
//
//	{"principals": {
//	  "alice":  {"roles": ["hold:jobs/", "read:"], "tokens": ["sha256:9f86d0..."]},
//	  "client": {"roles": ["admin"]}
//	}}
//
// A principal is named by a token or by the common name of a client
// certificate. A role is LEVEL:PREFIX: read (Get, List, Watch, KV Get and
// List) or hold (read, plus Acquire, Renew, Release, KV Put and Delete)
// on the names that start with PREFIX ("" is every name), or admin
// (everything, ClusterService included).

// AuthFile is the content of an auth file.
type AuthFile struct {
	Principals map[string]*AuthPrincipal `json:"principals"`
}

// AuthPrincipal is one principal of an auth file.
type AuthPrincipal struct {
	Roles  []string `json:"roles"`
	Tokens []string `json:"tokens,omitempty"`
}

// Level is what a role allows.
type Level uint8

// The levels, each including the ones before it.
const (
	LevelNone  Level = iota
	LevelRead        // Get, List, Watch, KV Get and List
	LevelHold        // Acquire, Renew, Release, KV Put and Delete
	LevelAdmin       // ClusterService and everything
)

func (l Level) String() string {
	switch l {
	case LevelRead:
		return "read"
	case LevelHold:
		return "hold"
	case LevelAdmin:
		return "admin"
	}
	return "none"
}

// Role is a level on the names that start with Prefix.
type Role struct {
	Level  Level
	Prefix string
}

func (r Role) String() string {
	if r.Level == LevelAdmin {
		return "admin"
	}
	return r.Level.String() + ":" + r.Prefix
}

// ParseRole parses read:PREFIX, hold:PREFIX or admin.
func ParseRole(s string) (Role, error) {
	level, prefix, _ := strings.Cut(s, ":")
	switch level {
	case "read":
		return Role{LevelRead, prefix}, nil
	case "hold":
		return Role{LevelHold, prefix}, nil
	case "admin":
		if prefix != "" {
			return Role{}, fmt.Errorf("role %q: admin takes no prefix (it allows everything)", s)
		}
		return Role{LevelAdmin, ""}, nil
	}
	return Role{}, fmt.Errorf("role %q: want read:PREFIX, hold:PREFIX or admin", s)
}

const tokenHashPrefix = "sha256:"

// HashToken returns the form of token an auth file stores.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return tokenHashPrefix + hex.EncodeToString(sum[:])
}

// NewToken returns a new random bearer token.
func NewToken() string {
	b := make([]byte, 32)
	rand.Read(b)
	return "tnr_" + base64.RawURLEncoding.EncodeToString(b)
}

// authTable is a loaded auth file.
type authTable struct {
	byHash map[[sha256.Size]byte]string // token hash -> principal
	roles  map[string][]Role
}

func (t *authTable) principalOf(token string) (string, bool) {
	p, ok := t.byHash[sha256.Sum256([]byte(token))]
	return p, ok
}

// ReadAuthFile reads and checks an auth file.
func ReadAuthFile(path string) (*AuthFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f AuthFile
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("auth file %s: %w", path, err)
	}
	if _, err := f.table(); err != nil {
		return nil, fmt.Errorf("auth file %s: %w", path, err)
	}
	return &f, nil
}

// table checks f and indexes it.
func (f *AuthFile) table() (*authTable, error) {
	if f.Principals == nil {
		return nil, errors.New(`no "principals" object`)
	}
	t := &authTable{byHash: make(map[[sha256.Size]byte]string), roles: make(map[string][]Role)}
	names := make([]string, 0, len(f.Principals))
	for name := range f.Principals {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		p := f.Principals[name]
		if name == "" || strings.HasPrefix(name, "member:") {
			return nil, fmt.Errorf("principal %q: a name must be non-empty and must not start with \"member:\"", name)
		}
		if p == nil {
			return nil, fmt.Errorf("principal %q is null", name)
		}
		for _, rs := range p.Roles {
			r, err := ParseRole(rs)
			if err != nil {
				return nil, fmt.Errorf("principal %q: %w", name, err)
			}
			t.roles[name] = append(t.roles[name], r)
		}
		for i, h := range p.Tokens {
			hexsum, ok := strings.CutPrefix(h, tokenHashPrefix)
			raw, err := hex.DecodeString(hexsum)
			if !ok || err != nil || len(raw) != sha256.Size {
				// Never echo it: it may be a token put there by mistake.
				return nil, fmt.Errorf("principal %q: token %d is not sha256:<64 hex digits> (the file holds hashes of tokens, never tokens; make them with tenure auth token)", name, i+1)
			}
			var sum [sha256.Size]byte
			copy(sum[:], raw)
			if other, dup := t.byHash[sum]; dup {
				return nil, fmt.Errorf("principals %q and %q have the same token hash", other, name)
			}
			t.byHash[sum] = name
		}
	}
	return t, nil
}

// AddToken adds the hash of token to principal name in the auth file at
// path (made if missing), and sets its roles if roles is not empty. The
// file is replaced atomically, mode 0600.
func AddToken(path, name, token string, roles []string) error {
	f := &AuthFile{Principals: map[string]*AuthPrincipal{}}
	if _, err := os.Stat(path); err == nil {
		if f, err = ReadAuthFile(path); err != nil {
			return err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, r := range roles {
		if _, err := ParseRole(r); err != nil {
			return err
		}
	}
	p := f.Principals[name]
	if p == nil {
		if len(roles) == 0 {
			return fmt.Errorf("principal %q is new: give it at least one --role (read:PREFIX, hold:PREFIX or admin)", name)
		}
		p = &AuthPrincipal{}
		f.Principals[name] = p
	}
	if len(roles) > 0 {
		p.Roles = roles
	}
	p.Tokens = append(p.Tokens, HashToken(token))
	return f.write(path)
}

// write checks f and replaces the file at path with it atomically, mode
// 0600.
func (f *AuthFile) write(path string) error {
	if _, err := f.table(); err != nil {
		return err
	}
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// tokenIDLen is how many hex digits of a token's hash make its ID.
const tokenIDLen = 12

// TokenID returns the ID of a token given its stored hash
// (sha256:HEX): the first 12 hex digits of the hash. It names the token
// in lists and revocations without being usable as one.
func TokenID(hash string) string {
	h := strings.TrimPrefix(hash, tokenHashPrefix)
	return h[:min(tokenIDLen, len(h))]
}

// AuthEntry is a principal of an auth file, as tenure auth list shows it.
type AuthEntry struct {
	Principal string   `json:"principal"`
	Roles     []string `json:"roles"`
	TokenIDs  []string `json:"token_ids"`
}

// List returns the principals of f, by name.
func (f *AuthFile) List() []AuthEntry {
	var out []AuthEntry
	for name, p := range f.Principals {
		e := AuthEntry{Principal: name, Roles: append([]string{}, p.Roles...), TokenIDs: []string{}}
		for _, h := range p.Tokens {
			e.TokenIDs = append(e.TokenIDs, TokenID(h))
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Principal < out[j].Principal })
	return out
}

// RevokeToken removes the token whose ID is id (TokenID, or a longer
// prefix of its hash) from the auth file at path and returns its
// principal. An ID that names no token, or more than one, changes
// nothing.
func RevokeToken(path, id string) (string, error) {
	f, err := ReadAuthFile(path)
	if err != nil {
		return "", err
	}
	id = strings.ToLower(strings.TrimPrefix(id, tokenHashPrefix))
	if len(id) < tokenIDLen {
		return "", fmt.Errorf("token ID %q is too short: give the %d hex digits tenure auth list shows", id, tokenIDLen)
	}
	var who string
	var at int
	for name, p := range f.Principals {
		for i, h := range p.Tokens {
			if strings.HasPrefix(strings.TrimPrefix(h, tokenHashPrefix), id) {
				if who != "" {
					return "", fmt.Errorf("token ID %q names more than one token: give more of its hash", id)
				}
				who, at = name, i
			}
		}
	}
	if who == "" {
		return "", fmt.Errorf("no token has ID %q in %s (tenure auth list shows the IDs)", id, path)
	}
	p := f.Principals[who]
	p.Tokens = append(p.Tokens[:at:at], p.Tokens[at+1:]...)
	return who, f.write(path)
}

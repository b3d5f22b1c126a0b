package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/gen/tenure/v1/tenurev1connect"
	"github.com/tenure-io/tenure/internal/tlsconfig"
	"github.com/tenure-io/tenure/internal/wire"
)

// principalHeader carries the original caller's principal on a request a
// follower forwards to the leader. The leader believes it only from a
// connection authenticated with a member's certificate (or when it names
// the principal the request's own credentials authenticate).
const principalHeader = "Tenure-Principal"

// memberPrefix starts the principal of a member of the cluster.
const memberPrefix = "member:"

// AuthConfig configures authentication and permissions.
type AuthConfig struct {
	// File is the auth file (principals, roles, token hashes); "" for
	// none. Reload reads it again.
	File string
	// ClientCA is set when the API verifies client certificates from a
	// client CA: a certificate's common name is a principal. With no
	// File, every such certificate may do everything.
	ClientCA bool
	// Peer is the cluster's member TLS; a connection with a member's
	// certificate may do everything and may forward a caller's
	// principal. Nil: no member is recognised on the API.
	Peer *tlsconfig.Peer
}

// Auth authenticates API requests and checks their permissions. A nil
// *Auth, or one with neither a file nor a client CA, lets every request
// through, with principals from client certificates when there are any.
type Auth struct {
	cfg   AuthConfig
	table atomic.Pointer[authTable]
	log   *slog.Logger
}

// NewAuth loads cfg's auth file.
func NewAuth(cfg AuthConfig, log *slog.Logger) (*Auth, error) {
	if log == nil {
		log = slog.Default()
	}
	a := &Auth{cfg: cfg, log: log}
	if cfg.File != "" {
		if err := a.load(); err != nil {
			return nil, err
		}
	}
	return a, nil
}

func (a *Auth) load() error {
	f, err := ReadAuthFile(a.cfg.File)
	if err != nil {
		return err
	}
	t, err := f.table()
	if err != nil {
		return err
	}
	a.table.Store(t)
	return nil
}

// Reload reads the auth file again. If it cannot be read or is not
// valid, the error is logged and returned, and the old one stays in
// force.
func (a *Auth) Reload() error {
	if a == nil || a.cfg.File == "" {
		return nil
	}
	if err := a.load(); err != nil {
		a.log.Error("auth file not reloaded; the previous one stays in force", "file", a.cfg.File, "err", err)
		return err
	}
	t := a.table.Load()
	a.log.Info("auth file reloaded", "file", a.cfg.File, "principals", len(t.roles), "tokens", len(t.byHash))
	return nil
}

// enabled reports whether requests must authenticate.
func (a *Auth) enabled() bool { return a != nil && (a.cfg.File != "" || a.cfg.ClientCA) }

// identity is who sent a request, as the HTTP layer found out.
type identity struct {
	principal string
	// member: the connection has a member's certificate and asserted no
	// caller: it may do everything.
	member bool
	// err: the credentials were bad; the request is refused with it.
	err error
	// how says how the principal was authenticated, for logs.
	how string
}

type identityKey struct{}

func identityFrom(ctx context.Context) identity {
	id, _ := ctx.Value(identityKey{}).(identity)
	return id
}

// principalFrom returns the principal of the request in ctx ("" when
// the server authenticates nobody).
func principalFrom(ctx context.Context) string { return identityFrom(ctx).principal }

// middleware authenticates every request and records who sent it in the
// request's context, for the interceptor and the handlers.
// A call of the API without valid credentials is refused here, before
// its body is read: a stranger cannot make the node read (and hold) a
// large body only to be told no.
func (a *Auth) middleware(next http.Handler) http.Handler {
	ew := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := a.authenticate(r)
		if isProcedure(r.URL.Path) && ew.IsSupported(r) {
			if err := a.refusal(id); err != nil {
				ew.Write(w, r, err)
				return
			}
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), identityKey{}, id)))
	})
}

// refusal is the error that refuses a call from id before it is read:
// bad credentials, or none where the server wants them; nil if the call
// may go on to its permission check.
func (a *Auth) refusal(id identity) error {
	if !a.enabled() {
		return nil
	}
	if id.err == nil && id.principal == "" && !id.member {
		return errUnauthenticated()
	}
	return id.err
}

// errUnauthenticated refuses a request that carries no credentials.
func errUnauthenticated() error {
	return connect.NewError(connect.CodeUnauthenticated,
		errors.New("server: this server requires authentication: a client certificate (--cert/--key, TENURE_CERT/TENURE_KEY) or a bearer token (TENURE_AUTH_TOKEN)"))
}

func (a *Auth) authenticate(r *http.Request) identity {
	if !a.enabled() {
		// Nobody is authenticated: every grant is anyone's.
		return identity{}
	}
	var id identity
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		leaf := r.TLS.VerifiedChains[0][0]
		if a != nil && a.cfg.Peer.IsMember(r.TLS.VerifiedChains) {
			if asserted := r.Header.Get(principalHeader); r.Header.Get(forwardedHeader) != "" && asserted != "" {
				// A follower forwarding its caller's request.
				return identity{principal: asserted, member: strings.HasPrefix(asserted, memberPrefix),
					how: "forwarded by member " + leaf.Subject.CommonName}
			}
			if r.Header.Get(forwardedHeader) == "" {
				return identity{principal: memberPrefix + leaf.Subject.CommonName, member: true, how: "member certificate"}
			}
			// Forwarded with no caller: the follower authenticated
			// nobody; fall through to the request's own credentials.
		} else if cn := leaf.Subject.CommonName; strings.HasPrefix(cn, memberPrefix) {
			return identity{err: connect.NewError(connect.CodePermissionDenied,
				fmt.Errorf("server: a client certificate may not name a member (common name %q)", cn))}
		} else if cn != "" {
			id = identity{principal: cn, how: "client certificate"}
		}
	}
	if id.principal == "" {
		if auth := r.Header.Get("Authorization"); auth != "" {
			token, ok := strings.CutPrefix(auth, "Bearer ")
			var t *authTable
			if a != nil {
				t = a.table.Load()
			}
			switch {
			case !ok:
				id.err = connect.NewError(connect.CodeUnauthenticated, errors.New("server: the Authorization header is not \"Bearer TOKEN\""))
			case t == nil:
				if a.enabled() {
					id.err = connect.NewError(connect.CodeUnauthenticated, errors.New("server: this server takes no bearer tokens (it has no auth file); use a client certificate"))
				}
			default:
				p, found := t.principalOf(token)
				if !found {
					id.err = connect.NewError(connect.CodeUnauthenticated, errors.New("server: unknown or revoked token: ask for a new one (tenure auth token) and set TENURE_AUTH_TOKEN"))
				} else {
					id = identity{principal: p, how: "bearer token"}
				}
			}
		}
	}
	if asserted := r.Header.Get(principalHeader); asserted != "" && id.err == nil && asserted != id.principal {
		id = identity{err: connect.NewError(connect.CodePermissionDenied,
			fmt.Errorf("server: the request asserts principal %q, but only a member of the cluster (with a certificate from the peer CA) may forward another principal's request", asserted))}
	}
	return id
}

// rule says what a procedure needs: a level on the names the request
// carries. Names are prefixes (the role's prefix must start them) when
// prefix is set.
type rule struct {
	// op says what the procedure does, as the refusal names it:
	// "acquire lease", "list leases under".
	op    string
	level Level
	// names returns the names of the request to check; nil for a
	// procedure that names none.
	names  func(msg any) []string
	prefix bool
}

func one[T any](f func(*T) string) func(any) []string {
	return func(m any) []string {
		t, ok := m.(*T)
		if !ok {
			return []string{""}
		}
		return []string{f(t)}
	}
}

// authRules is the permission of every procedure, keyed by procedure
// name. A procedure missing here is refused to everyone but admins and
// members; a test checks that every procedure of the services has a
// rule.
var authRules = map[string]rule{
	tenurev1connect.LeaseServiceAcquireProcedure: {op: "acquire lease", level: LevelHold, names: one(func(m *tenurev1.AcquireRequest) string { return m.GetName() })},
	tenurev1connect.LeaseServiceRenewProcedure: {op: "renew lease", level: LevelHold, names: func(m any) []string {
		r, _ := m.(*tenurev1.RenewRequest)
		var out []string
		for _, l := range r.GetLeases() {
			out = append(out, l.GetName())
		}
		if len(out) == 0 {
			out = []string{""}
		}
		return out
	}},
	tenurev1connect.LeaseServiceReleaseProcedure: {op: "release lease", level: LevelHold, names: one(func(m *tenurev1.ReleaseRequest) string { return m.GetName() })},
	tenurev1connect.LeaseServiceGetProcedure:     {op: "read lease", level: LevelRead, names: one(func(m *tenurev1.GetRequest) string { return m.GetName() })},
	tenurev1connect.LeaseServiceHistoryProcedure: {op: "read the history of lease", level: LevelRead, names: one(func(m *tenurev1.HistoryRequest) string { return m.GetName() })},
	tenurev1connect.LeaseServiceListProcedure:    {op: "list leases under", level: LevelRead, prefix: true, names: one(func(m *tenurev1.ListRequest) string { return m.GetPrefix() })},
	tenurev1connect.LeaseServiceWatchProcedure:   {op: "watch leases under", level: LevelRead, prefix: true, names: one(func(m *tenurev1.WatchRequest) string { return m.GetPrefix() })},
	tenurev1connect.KVServicePutProcedure:        {op: "write under lease", level: LevelHold, names: one(func(m *tenurev1.KVPutRequest) string { return m.GetLease() })},
	tenurev1connect.KVServiceDeleteProcedure:     {op: "delete under lease", level: LevelHold, names: one(func(m *tenurev1.KVDeleteRequest) string { return m.GetLease() })},
	tenurev1connect.KVServiceGetProcedure:        {op: "read key", level: LevelRead, names: one(func(m *tenurev1.KVGetRequest) string { return m.GetKey() })},
	tenurev1connect.KVServiceListProcedure:       {op: "list keys under", level: LevelRead, prefix: true, names: one(func(m *tenurev1.KVListRequest) string { return m.GetPrefix() })},
	// Ending another principal's grant is an operator's act.
	tenurev1connect.LeaseServiceRevokeProcedure: {op: "revoke lease", level: LevelAdmin, names: one(func(m *tenurev1.RevokeRequest) string { return m.GetName() })},
	// Status tells any authenticated principal the cluster's shape. A
	// batch comes in from any authenticated principal; the handler then
	// checks each op as its own call is checked, and a refusal names the
	// op and its lease.
	tenurev1connect.LeaseServiceBatchProcedure: {op: "send a batch", level: LevelNone},
	wire.BatchStreamProcedure:                  {op: "send a batch", level: LevelNone},

	tenurev1connect.ClusterServiceStatusProcedure:             {op: "read the cluster's status", level: LevelNone},
	tenurev1connect.ClusterServiceJoinProcedure:               {op: "add a member", level: LevelAdmin},
	tenurev1connect.ClusterServiceLeaveProcedure:              {op: "remove a member", level: LevelAdmin},
	tenurev1connect.ClusterServiceTransferLeadershipProcedure: {op: "move the leadership", level: LevelAdmin},
	tenurev1connect.ClusterServiceSnapshotProcedure:           {op: "take a backup", level: LevelAdmin},
}

// authorize checks the request msg of procedure in ctx.
func (a *Auth) authorize(ctx context.Context, procedure string, msg any) error {
	if !a.enabled() {
		return nil // nobody is authenticated (authenticate finds no error)
	}
	id := identityFrom(ctx)
	if id.err != nil {
		return id.err
	}
	if id.member {
		return nil
	}
	if id.principal == "" {
		return errUnauthenticated()
	}
	var roles []Role
	if t := a.table.Load(); t != nil {
		roles = t.roles[id.principal]
	} else {
		roles = []Role{{Level: LevelAdmin}} // a client CA and no file: every certificate is trusted
	}
	r, ok := authRules[procedure]
	if !ok {
		r = rule{op: "call " + procedure, level: LevelAdmin}
	}
	if r.level == LevelNone {
		// Any authenticated principal, with roles or none.
		return nil
	}
	var names []string
	if r.names != nil {
		names = r.names(msg)
	}
	if len(names) == 0 {
		names = []string{""}
	}
	for _, name := range names {
		if !allowed(roles, r, name) {
			return connect.NewError(connect.CodePermissionDenied, refusal(id.principal, r, name, roles))
		}
	}
	return nil
}

// refusal says why principal, with roles, may not do r on name.
func refusal(principal string, r rule, name string, roles []Role) error {
	if r.names == nil || r.level == LevelAdmin {
		what := r.op
		if r.names != nil {
			what = fmt.Sprintf("%s %q", r.op, name)
		}
		return fmt.Errorf("server: principal %q may not %s: it needs the role %s (its roles: %s)", principal, what, r.level, rolesText(roles))
	}
	need := fmt.Sprintf("%s, or %s on a shorter prefix", Role{Level: r.level, Prefix: name}, r.level)
	if name == "" {
		need = Role{Level: r.level}.String() + " (on every name)"
	}
	return fmt.Errorf("server: principal %q may not %s %q: it needs the role %s (its roles: %s)", principal, r.op, name, need, rolesText(roles))
}

func allowed(roles []Role, r rule, name string) bool {
	for _, role := range roles {
		switch {
		case role.Level == LevelAdmin:
			return true
		case r.level == LevelNone && role.Level > LevelNone:
			return true
		case r.level == LevelAdmin || role.Level < r.level:
			continue
		case r.names == nil, strings.HasPrefix(name, role.Prefix):
			return true
		}
	}
	return false
}

func rolesText(roles []Role) string {
	if len(roles) == 0 {
		return "none"
	}
	var s []string
	for _, r := range roles {
		s = append(s, r.String())
	}
	return strings.Join(s, ", ")
}

// interceptor checks every request's permission before its handler runs.
func (a *Auth) interceptor(log *slog.Logger) connect.Interceptor {
	return &authInterceptor{a: a, log: log}
}

type authInterceptor struct {
	a   *Auth
	log *slog.Logger
}

func (i *authInterceptor) check(ctx context.Context, spec connect.Spec, peer connect.Peer, msg any) error {
	err := i.a.authorize(ctx, spec.Procedure, msg)
	if err != nil {
		id := identityFrom(ctx)
		i.log.Warn("refused a request", "procedure", spec.Procedure, "from", peer.Addr,
			"principal", id.principal, "authenticated_by", id.how, "code", connect.CodeOf(err).String(), "err", err)
	}
	return err
}

func (i *authInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := i.check(ctx, req.Spec(), req.Peer(), req.Any()); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (i *authInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i *authInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return next(ctx, &checkedConn{StreamingHandlerConn: conn, ctx: ctx, i: i})
	}
}

// checkedConn checks the first message of a stream (a Watch's request)
// before the handler sees it.
type checkedConn struct {
	connect.StreamingHandlerConn
	ctx     context.Context
	i       *authInterceptor
	checked bool
}

func (c *checkedConn) Receive(msg any) error {
	if err := c.StreamingHandlerConn.Receive(msg); err != nil {
		return err
	}
	if !c.checked {
		if err := c.i.check(c.ctx, c.Spec(), c.Peer(), msg); err != nil {
			return err
		}
		c.checked = true
	}
	return nil
}

package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/internal/flaghelp"
)

const topUsage = `Usage: tenure [global flags] COMMAND [ARGS] [flags]

Commands:
  acquire NAME [--holder H] [--ttl 10s] [--limit N | --shared] [--lock-delay D] [--wait [--timeout 30s]]
  renew NAME --token T [--ttl D]
  release NAME --token T
  handoff NAME --token T [--to CANDIDATE]   hand the grant to a waiting candidate
  revoke NAME [--token T] --reason TEXT   end a grant now, as an operator
  get NAME
  list [PREFIX]
  history NAME [--since T] [--at T] [--limit N]   recent terms: holders, tokens, endings
  watch [PREFIX]
  status
  member list                  members, leader, last contact, reachability
  member remove ID             remove a member from the cluster
  leader transfer [ID]         hand leadership to ID (or any other voter)
  snapshot save FILE [--timeout 10m]   back up the cluster's state to FILE
  kv put KEY VALUE --lease NAME --token T
  kv get KEY [--print-value-only]
  kv list [PREFIX] [--keys-only]
  kv delete KEY --lease NAME --token T
  run NAME [--holder H] [--ttl 10s] [--limit N | --shared] [--lock-delay D] [--kill-after D] [--verbose] -- CMD [ARGS...]
                               run CMD holding the lease
  elect NAME [PROPOSAL] [--ttl 10s] [--lock-delay D] [--priority N]   campaign; print the token when leading
  elect --listen NAME          print each new leader
  completion bash|zsh|fish     shell completion script
  demo [--ttl 2s] [--pause D] [--scenario all] [--real] [--ui] [--postgres URL] [--verbose]
                               see fencing at work (--ui: on a live dashboard too)
  fence install --postgres URL [--schema S]   install tenure_fence in Postgres
  fence install --mysql DSN                   install tenure_fence in MySQL or MariaDB
  certs init DIR --members n1,n2,n3 [--hosts H,...] [--clients NAME,...]
                               make a CA and certificates
  auth token NAME --file FILE [--role hold:PREFIX] ...  make a bearer token
  auth list --file FILE        principals, roles and token IDs of an auth file
  auth revoke TOKEN-ID --file FILE   remove a token from an auth file

Global flags (before or after the command):
  --endpoints ADDRS      comma-separated API addresses (env TENURE_ENDPOINTS,
                         default 127.0.0.1:7400)
  -o, --output FORMAT    text or json (one JSON object per line; errors too,
                         on stderr)
  --cluster-id ID        refuse answers from any other cluster (env
                         TENURE_CLUSTER_ID; tenure status shows the ID).
                         Without it, the first answer's cluster is pinned
  --request-timeout D    how long to keep trying an unreachable cluster
                         (default 5s; acquire --wait adds its timeout)
  --cacert FILE          CA that verifies the servers (env TENURE_CACERT); makes
                         the endpoints https
  --cert FILE, --key FILE  client certificate and key (env TENURE_CERT, TENURE_KEY)
                         The bearer token is read from env TENURE_AUTH_TOKEN.
  --version              print the version

Exit codes: 0 ok; 1 failure (unreachable, internal); 2 bad usage or invalid
argument; 3 held by another holder (or acquire --wait timed out); 4 rejected
by fencing (stale token); 5 not authenticated or not permitted; 6 not found
(also an unknown member ID); 7 release of a grant that is no longer
live (already released or expired). tenure run exits with its command's
code, or 4 if the lease was lost.

Run 'tenure COMMAND -h' for the flags of a command.
`

// app is one run of the CLI.
type app struct {
	stdout, stderr io.Writer
	env            func(string) string
	g              globals
}

// globals are the flags every command accepts.
type globals struct {
	endpoints      string
	clusterID      string
	output         string
	requestTimeout time.Duration
	tls            tlsFlags
}

// register adds the global flags to fs, with their current values as
// defaults, so values given before the command carry over.
func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.endpoints, "endpoints", g.endpoints, "comma-separated API `addresses` of cluster members (env TENURE_ENDPOINTS)")
	fs.StringVar(&g.clusterID, "cluster-id", g.clusterID, "refuse answers from a cluster other than `ID` (env TENURE_CLUSTER_ID)")
	fs.StringVar(&g.output, "o", g.output, "output `format`: text or json")
	fs.StringVar(&g.output, "output", g.output, "output `format`: text or json")
	fs.DurationVar(&g.requestTimeout, "request-timeout", g.requestTimeout, "how long to keep trying an unreachable cluster")
	g.tls.register(fs)
}

func (g *globals) check() error {
	if g.output != "text" && g.output != "json" {
		return fmt.Errorf("--output must be text or json, got %q", g.output)
	}
	if g.requestTimeout <= 0 {
		return fmt.Errorf("--request-timeout must be positive, got %s", g.requestTimeout)
	}
	eps := g.endpointList()
	if len(eps) == 0 {
		return errors.New("--endpoints is empty")
	}
	cfg := client.DefaultConfig()
	cfg.Endpoints = eps
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("--endpoints: %s", strings.TrimPrefix(err.Error(), "client: "))
	}
	cfg.ClusterID = g.clusterID
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("--cluster-id: %s", strings.TrimPrefix(err.Error(), "client: "))
	}
	return nil
}

func (g *globals) endpointList() []string {
	var out []string
	for _, e := range strings.Split(g.endpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// run runs the CLI with args (without the program name) and returns the
// exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, env func(string) string) int {
	a := &app{stdout: stdout, stderr: stderr, env: env}
	a.g.endpoints = env("TENURE_ENDPOINTS")
	if a.g.endpoints == "" {
		a.g.endpoints = strings.Join(client.DefaultConfig().Endpoints, ",")
	}
	a.g.clusterID = env("TENURE_CLUSTER_ID")
	a.g.output = "text"
	a.g.requestTimeout = 5 * time.Second
	a.g.tls.fromEnv(env)

	err := a.dispatch(ctx, args)
	if h, ok := errors.AsType[*helpRequest](err); ok {
		fmt.Fprint(stdout, h.usage)
		return exitOK
	}
	if err != nil {
		report(stderr, a.tlsHint(err), a.g.output == "json")
	}
	return exitCode(err)
}

// tlsHint adds a hint to err when no endpoint answered plain HTTP/2
// because an endpoint speaks TLS: without it the user sees only
// "unexpected EOF".
func (a *app) tlsHint(err error) error {
	if !errors.Is(err, client.ErrUnavailable) && !errors.Is(err, client.ErrIndeterminate) {
		return err
	}
	if a.g.tls.cacert != "" || a.g.tls.cert != "" {
		return err
	}
	eps := a.g.endpointList()
	for i, ep := range eps {
		if i == 3 || strings.HasPrefix(ep, "https://") {
			break
		}
		addr := strings.TrimPrefix(ep, "http://")
		d := &net.Dialer{Timeout: 500 * time.Millisecond}
		// Only to learn whether it speaks TLS: nothing is sent.
		conn, herr := tls.DialWithDialer(d, "tcp", addr, &tls.Config{InsecureSkipVerify: true})
		if herr != nil {
			continue
		}
		conn.Close()
		return fmt.Errorf("%w\n(the server at %s speaks TLS: give the CA that verifies it with --cacert FILE or TENURE_CACERT, which makes the endpoints https)", err, addr)
	}
	return err
}

func (a *app) dispatch(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("tenure", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	a.g.register(fs)
	showVersion := fs.Bool("version", false, "print the version")
	// No reordering here: the first positional argument is the command.
	if err := fs.Parse(args); err != nil {
		return flagError(err, topUsage, topUsage)
	}
	if *showVersion {
		return a.version(fs.Args())
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return &usageError{msg: "no command given", usage: topUsage}
	}
	cmd, args := rest[0], rest[1:]
	switch cmd {
	case "acquire":
		return a.acquire(ctx, args)
	case "renew":
		return a.renew(ctx, args)
	case "release":
		return a.release(ctx, args)
	case "handoff":
		return a.handoff(ctx, args)
	case "revoke":
		return a.revoke(ctx, args)
	case "get":
		return a.get(ctx, args)
	case "history":
		return a.history(ctx, args)
	case "list":
		return a.list(ctx, args)
	case "watch":
		return a.watch(ctx, args)
	case "status":
		return a.status(ctx, args)
	case "kv":
		return a.kv(ctx, args)
	case "member":
		return a.member(ctx, args)
	case "snapshot":
		return a.snapshot(ctx, args)
	case "leader":
		return a.leader(ctx, args)
	case "run":
		return a.runCommand(ctx, args)
	case "elect":
		return a.elect(ctx, args)
	case "completion":
		return a.completion(args)
	case "version":
		return a.version(args)
	case "demo":
		return a.demo(ctx, args)
	case "fence":
		return a.fence(ctx, args)
	case "certs":
		return a.certs(args)
	case "auth":
		return a.auth(args)
	case "help":
		return &helpRequest{usage: topUsage}
	}
	return &usageError{msg: fmt.Sprintf("unknown command %q", cmd), usage: topUsage}
}

// command is the parsing of one command's arguments.
type command struct {
	fs *flag.FlagSet
	// help is the full usage, printed for -h; usage is the short one
	// printed after a usage error.
	help  string
	usage string
	// optional names the optional positional argument after the
	// required ones (PREFIX), for error messages.
	optional string
}

// newCommand returns a command whose flag set has the global flags;
// synopsis is its usage line, about says what it does.
func (a *app) newCommand(name, synopsis, about string) *command {
	fs := flag.NewFlagSet("tenure "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return &command{
		fs:    fs,
		help:  "Usage: tenure " + synopsis + "\n\n" + about + "\n",
		usage: "Usage: tenure " + synopsis + "\nRun 'tenure " + name + " -h' for details.\n",
	}
}

// parse parses args, flags anywhere among the positional arguments, with
// the global flags, and checks that the positional arguments named in
// required are there and that there are at most max of them. It returns
// them.
func (a *app) parse(c *command, args []string, required []string, max int) ([]string, error) {
	a.g.register(c.fs)
	c.help += "\nFlags:\n" + flagDefaults(c.fs)
	if err := c.fs.Parse(interspersed(c.fs, args)); err != nil {
		return nil, flagError(err, c.help, c.usage)
	}
	pos := c.fs.Args()
	switch {
	case len(pos) < len(required):
		return nil, &usageError{msg: "missing " + strings.Join(required[len(pos):], " "), usage: c.usage}
	case len(pos) > max:
		return nil, &usageError{msg: fmt.Sprintf("unexpected argument %q", pos[max]), usage: c.usage}
	}
	if err := a.g.check(); err != nil {
		return nil, &usageError{msg: err.Error(), usage: c.usage}
	}
	for i, p := range pos {
		label := c.optional
		if i < len(required) {
			label = required[i]
		}
		if label == "VALUE" {
			continue // a value may be any bytes
		}
		if !utf8.ValidString(p) {
			return nil, &usageError{msg: fmt.Sprintf("%s %q is not valid UTF-8", label, p), usage: c.usage}
		}
	}
	var bad error
	c.fs.Visit(func(f *flag.Flag) {
		g, ok := f.Value.(flag.Getter)
		if !ok {
			return
		}
		if s, ok := g.Get().(string); ok && bad == nil && !utf8.ValidString(s) {
			bad = &usageError{msg: fmt.Sprintf("--%s %q is not valid UTF-8", f.Name, s), usage: c.usage}
		}
	})
	if bad != nil {
		return nil, bad
	}
	return pos, nil
}

// parsePrefix parses the optional PREFIX of list and watch.
func (a *app) parsePrefix(c *command, args []string) (string, error) {
	c.optional = "PREFIX"
	pos, err := a.parse(c, args, nil, 1)
	if err != nil || len(pos) == 0 {
		return "", err
	}
	return pos[0], nil
}

// flagAliases are short names printed with their long flag in help.
var flagAliases = map[string]string{"o": "output"}

// flagDefaults lists the flags of fs for help.
func flagDefaults(fs *flag.FlagSet) string { return flaghelp.Defaults(fs, flagAliases) }

// dashFlag matches a flag name as package flag prints it in errors.
var dashFlag = regexp.MustCompile(`(^|flag |: )-([A-Za-z])`)

// flagError turns an error of flag.FlagSet.Parse into a help request,
// which prints help, or a usage error, which prints usage. Flags in its
// message get two dashes, as in the help.
func flagError(err error, help, usage string) error {
	if errors.Is(err, flag.ErrHelp) {
		return &helpRequest{usage: help}
	}
	return &usageError{msg: dashFlag.ReplaceAllString(err.Error(), "$1--$2"), usage: usage}
}

// interspersed returns args with the flags first, so flags may come after
// positional arguments (`tenure acquire jobs/x --holder a`). It knows from
// fs which flags take a value. "--" ends the flags: what follows it is
// positional. A lone "-" is positional.
func interspersed(fs *flag.FlagSet, args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if len(arg) < 2 || arg[0] != '-' {
			pos = append(pos, arg)
			continue
		}
		flags = append(flags, arg)
		name := strings.TrimPrefix(strings.TrimPrefix(arg, "-"), "-")
		if strings.Contains(name, "=") {
			continue
		}
		f := fs.Lookup(name)
		if f == nil {
			continue // Parse reports it
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			continue
		}
		if i+1 < len(args) {
			i++
			flags = append(flags, args[i])
		}
	}
	return append(append(flags, "--"), pos...)
}

// client returns a client for the global flags.
func (a *app) client() (*client.Client, error) {
	cfg := client.DefaultConfig()
	cfg.Endpoints = a.g.endpointList()
	cfg.ClusterID = a.g.clusterID
	cfg.RequestTimeout = a.g.requestTimeout
	if err := a.g.tls.apply(&cfg); err != nil {
		return nil, &usageError{msg: err.Error()}
	}
	c, err := client.New(cfg)
	if err != nil {
		return nil, &usageError{msg: err.Error()}
	}
	return c, nil
}

// withTimeout bounds a command: the request timeout plus extra.
func (a *app) withTimeout(ctx context.Context, extra time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, a.g.requestTimeout+extra)
}

func (a *app) out() printer { return printer{w: a.stdout, json: a.g.output == "json"} }

// defaultHolder is the host name, a dash and the process ID.
func defaultHolder() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "tenure"
	}
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

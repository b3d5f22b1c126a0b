package main

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/tenure-io/tenure/internal/tlsconfig"
	"github.com/tenure-io/tenure/server"
)

const certsUsage = `Usage: tenure certs COMMAND ...

Commands:
  certs init DIR --members n1,n2,n3 [--hosts H,...] [--clients client]

See docs/security.md.
`

func (a *app) certs(args []string) error {
	if len(args) == 0 {
		return &usageError{msg: "certs: no command given", usage: certsUsage}
	}
	switch args[0] {
	case "init":
		return a.certsInit(args[1:])
	case "-h", "-help", "--help", "help":
		return &helpRequest{usage: certsUsage}
	}
	return &usageError{msg: fmt.Sprintf("certs: unknown command %q", args[0]), usage: certsUsage}
}

const certsInitAbout = `Makes the certificates of a quick-start TLS cluster in DIR (ECDSA P-256):

  ca.crt, ca.key               the cluster CA: signs the member certificates;
                               tenured --peer-ca, and clients' --cacert
  client-ca.crt, client-ca.key the client CA: signs client certificates;
                               tenured --client-ca
  MEMBER.crt, MEMBER.key       one per --members name, for 127.0.0.1, ::1,
                               localhost and --hosts; tenured --tls-cert/--tls-key
                               and --peer-cert/--peer-key
  CLIENT.crt, CLIENT.key       one per --clients name (the principal);
                               tenure --cert/--key

Keys are written with mode 0600. Nothing is overwritten: if any of the files
exists, nothing is written (exit 1). It needs no tenure cluster.`

func (a *app) certsInit(args []string) error {
	c := a.newCommand("certs init", "certs init DIR --members n1,n2,n3 [--hosts H,...] [--clients NAME,...]", certsInitAbout)
	members := c.fs.String("members", "", "comma-separated member `names`: one certificate each")
	hosts := c.fs.String("hosts", "", "comma-separated host `names` and IP addresses added to every member certificate")
	clients := c.fs.String("clients", "client", "comma-separated client `names`: one certificate each (the common name is the principal)")
	pos, err := a.parse(c, args, []string{"DIR"}, 1)
	if err != nil {
		return err
	}
	o := tlsconfig.InitOptions{Members: splitList(*members), Hosts: splitList(*hosts), Clients: splitList(*clients)}
	if len(o.Members) == 0 {
		return &usageError{msg: "--members is required: the member names (for example --members n1,n2,n3)", usage: c.usage}
	}
	files, err := tlsconfig.Init(pos[0], o)
	if err != nil {
		return fmt.Errorf("certs init: %w", err)
	}
	a.out().print(struct {
		Dir   string   `json:"dir"`
		Files []string `json:"files"`
	}{pos[0], files}, fmt.Sprintf("wrote %d files to %s: %s", len(files), pos[0], strings.Join(files, " ")))
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

const authUsage = `Usage: tenure auth COMMAND ...

Commands:
  auth token NAME --file FILE [--role hold:PREFIX] [--role read:PREFIX] [--role admin]
  auth list --file FILE
  auth revoke TOKEN-ID --file FILE

See docs/security.md.
`

func (a *app) auth(args []string) error {
	if len(args) == 0 {
		return &usageError{msg: "auth: no command given", usage: authUsage}
	}
	switch args[0] {
	case "token":
		return a.authToken(args[1:])
	case "list":
		return a.authList(args[1:])
	case "revoke":
		return a.authRevoke(args[1:])
	case "-h", "-help", "--help", "help":
		return &helpRequest{usage: authUsage}
	}
	return &usageError{msg: fmt.Sprintf("auth: unknown command %q", args[0]), usage: authUsage}
}

const authTokenAbout = `Makes a new random bearer token for principal NAME, adds its SHA-256 hash
(never the token) to the auth file FILE (made, mode 0600, if missing) and
prints the token, once: keep it (clients read it from TENURE_AUTH_TOKEN).

--role sets NAME's roles (repeat it; a new principal needs at least one):
  read:PREFIX   Get, List, Watch, KV Get and List of names starting with PREFIX
  hold:PREFIX   read, plus Acquire, Renew, Release, KV Put and Delete
  admin         everything, ClusterService included
PREFIX may be empty ("read:" is every name). Without --role, an existing
principal keeps its roles and gets one more token.

It also prints the token's ID (the first 12 hex digits of its hash),
which names it in tenure auth list and tenure auth revoke and cannot be
used as a token. Send tenured SIGHUP to make it read FILE again. It needs
no tenure cluster.`

// roleList is a repeatable --role.
type roleList []string

func (r *roleList) String() string     { return strings.Join(*r, ",") }
func (r *roleList) Set(v string) error { *r = append(*r, v); return nil }

func (a *app) authToken(args []string) error {
	c := a.newCommand("auth token", "auth token NAME --file FILE [--role ROLE]...", authTokenAbout)
	file := c.fs.String("file", "", "the auth `file` tenured reads (--auth-file)")
	var roles roleList
	c.fs.Var(&roles, "role", "a `role` of NAME: read:PREFIX, hold:PREFIX or admin (repeatable)")
	pos, err := a.parse(c, args, []string{"NAME"}, 1)
	if err != nil {
		return err
	}
	if *file == "" {
		return &usageError{msg: "--file is required: the auth file tenured reads with --auth-file", usage: c.usage}
	}
	for _, r := range roles {
		if _, err := server.ParseRole(r); err != nil {
			return &usageError{msg: "--role: " + strings.TrimPrefix(err.Error(), "server: "), usage: c.usage}
		}
	}
	token := server.NewToken()
	if err := server.AddToken(*file, pos[0], token, roles); err != nil {
		return fmt.Errorf("auth token: %w", err)
	}
	a.out().print(struct {
		Name  string `json:"name"`
		Token string `json:"token"`
		File  string `json:"file"`
	}{pos[0], token, *file}, token)
	fmt.Fprintf(a.stderr, "tenure: added token %s of %q to %s (only its hash); send tenured SIGHUP to load it. It is shown only now.\n",
		server.TokenID(server.HashToken(token)), pos[0], *file)
	return nil
}

const authListAbout = `Lists the principals of the auth file FILE: their roles and the IDs of
their tokens (the first 12 hex digits of each token's hash; the file holds
no tokens). It needs no tenure cluster.`

func (a *app) authList(args []string) error {
	c := a.newCommand("auth list", "auth list --file FILE", authListAbout)
	file := c.fs.String("file", "", "the auth `file` tenured reads (--auth-file)")
	if _, err := a.parse(c, args, nil, 0); err != nil {
		return err
	}
	if *file == "" {
		return &usageError{msg: "--file is required: the auth file tenured reads with --auth-file", usage: c.usage}
	}
	f, err := server.ReadAuthFile(*file)
	if err != nil {
		return fmt.Errorf("auth list: %w", err)
	}
	entries := f.List()
	if a.g.output == "json" {
		for _, e := range entries {
			a.out().print(e, "")
		}
		return nil
	}
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PRINCIPAL\tROLES\tTOKEN IDS")
	for _, e := range entries {
		ids := strings.Join(e.TokenIDs, " ")
		if ids == "" {
			ids = "(none)"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", e.Principal, strings.Join(e.Roles, " "), ids)
	}
	w.Flush()
	fmt.Fprint(a.stdout, b.String())
	return nil
}

const authRevokeAbout = `Removes the token with ID TOKEN-ID (as tenure auth list and tenure auth
token show it) from the auth file FILE. Send tenured SIGHUP afterwards: from
then on the token is refused (unauthenticated). The principal keeps its
roles and its other tokens. It needs no tenure cluster.`

func (a *app) authRevoke(args []string) error {
	c := a.newCommand("auth revoke", "auth revoke TOKEN-ID --file FILE", authRevokeAbout)
	file := c.fs.String("file", "", "the auth `file` tenured reads (--auth-file)")
	pos, err := a.parse(c, args, []string{"TOKEN-ID"}, 1)
	if err != nil {
		return err
	}
	if *file == "" {
		return &usageError{msg: "--file is required: the auth file tenured reads with --auth-file", usage: c.usage}
	}
	who, err := server.RevokeToken(*file, pos[0])
	if err != nil {
		return fmt.Errorf("auth revoke: %w", err)
	}
	a.out().print(struct {
		Principal string `json:"principal"`
		TokenID   string `json:"token_id"`
		File      string `json:"file"`
	}{who, pos[0], *file}, fmt.Sprintf("revoked token %s of %q in %s; send tenured SIGHUP to apply it", pos[0], who, *file))
	return nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"unicode/utf8"

	"github.com/tenure-io/tenure/client"
)

const kvUsage = `Usage: tenure kv COMMAND ...

Commands of the fenced key-value store:
  kv put KEY VALUE --lease NAME --token T
  kv get KEY
  kv delete KEY --lease NAME --token T

A write is accepted only while T is the current, unexpired grant of the lease
NAME and no higher token has written KEY; otherwise it is rejected (exit 4).
`

func (a *app) kv(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return &usageError{msg: "kv: no command given", usage: kvUsage}
	}
	switch args[0] {
	case "put":
		return a.kvPut(ctx, args[1:])
	case "get":
		return a.kvGet(ctx, args[1:])
	case "delete":
		return a.kvDelete(ctx, args[1:])
	case "-h", "-help", "--help", "help":
		return &helpRequest{usage: kvUsage}
	}
	return &usageError{msg: fmt.Sprintf("kv: unknown command %q", args[0]), usage: kvUsage}
}

// fenceFlags are the --lease and --token of a fenced write.
type fenceFlags struct {
	lease string
	token tokenFlag
}

func (f *fenceFlags) register(c *command) {
	c.fs.StringVar(&f.lease, "lease", "", "`name` of the lease whose grant authorises the write")
	c.fs.Var(&f.token, "token", "fencing `token` of that grant")
}

func (f *fenceFlags) require(c *command) error {
	if f.lease == "" {
		return &usageError{msg: "--lease is required", usage: c.usage}
	}
	return f.token.require(c)
}

// stdin is where `kv put KEY -` reads its value; tests replace it.
var stdin io.Reader = os.Stdin

// maxStdinValue bounds what `kv put KEY -` reads: more than any server
// accepts, so an oversized value still gets the server's clear error.
const maxStdinValue = 64 << 20

func (a *app) kvPut(ctx context.Context, args []string) error {
	c := a.newCommand("kv put", "kv put KEY VALUE --lease NAME --token T",
		"Writes VALUE under KEY, fenced by the grant of lease NAME with token T.\n"+
			"A VALUE of - reads the value from standard input.")
	var f fenceFlags
	f.register(c)
	pos, err := a.parse(c, args, []string{"KEY", "VALUE"}, 2)
	if err != nil {
		return err
	}
	if err := f.require(c); err != nil {
		return err
	}
	return a.call(ctx, 0, func(ctx context.Context, cl *client.Client) error {
		value := []byte(pos[1])
		if pos[1] == "-" {
			// Values too large for a command-line argument come from stdin.
			if value, err = io.ReadAll(io.LimitReader(stdin, maxStdinValue)); err != nil {
				return fmt.Errorf("kv put: reading the value from stdin: %w", err)
			}
		}
		rev, err := cl.Put(ctx, pos[0], value, f.lease, f.token.v)
		if err != nil {
			return err
		}
		a.out().print(struct {
			Key      string `json:"key"`
			Revision uint64 `json:"revision"`
		}{pos[0], rev}, fmt.Sprintf("put %s (revision %d)", pos[0], rev))
		return nil
	})
}

// kvJSON is a value in -o json: the value as a string when it is UTF-8,
// else base64 in value_base64.
type kvJSON struct {
	Key         string `json:"key"`
	Value       string `json:"value,omitempty"`
	ValueBase64 []byte `json:"value_base64,omitempty"`
	Lease       string `json:"lease"`
	Token       uint64 `json:"token"`
	Revision    uint64 `json:"revision"`
}

func (a *app) kvGet(ctx context.Context, args []string) error {
	c := a.newCommand("kv get", "kv get KEY",
		"Prints the value of KEY with the lease and token that wrote it. A key\n"+
			"without a value is not found (exit 1).")
	pos, err := a.parse(c, args, []string{"KEY"}, 1)
	if err != nil {
		return err
	}
	return a.call(ctx, 0, func(ctx context.Context, cl *client.Client) error {
		kv, err := cl.KVGet(ctx, pos[0])
		if errors.Is(err, client.ErrNotFound) {
			return &notFoundError{what: fmt.Sprintf("key %q", pos[0]), err: err}
		}
		if err != nil {
			return err
		}
		j := kvJSON{Key: kv.Key, Lease: kv.Lease, Token: kv.Token, Revision: kv.Revision}
		if utf8.Valid(kv.Value) {
			j.Value = string(kv.Value)
		} else {
			j.ValueBase64 = kv.Value
		}
		a.out().print(j, fmt.Sprintf("%s = %q (lease %s, token %d, revision %d)",
			kv.Key, kv.Value, kv.Lease, kv.Token, kv.Revision))
		return nil
	})
}

func (a *app) kvDelete(ctx context.Context, args []string) error {
	c := a.newCommand("kv delete", "kv delete KEY --lease NAME --token T",
		"Deletes KEY, fenced by the grant of lease NAME with token T.")
	var f fenceFlags
	f.register(c)
	pos, err := a.parse(c, args, []string{"KEY"}, 1)
	if err != nil {
		return err
	}
	if err := f.require(c); err != nil {
		return err
	}
	return a.call(ctx, 0, func(ctx context.Context, cl *client.Client) error {
		rev, err := cl.Delete(ctx, pos[0], f.lease, f.token.v)
		if err != nil {
			return err
		}
		a.out().print(struct {
			Key      string `json:"key"`
			Revision uint64 `json:"revision"`
			Deleted  bool   `json:"deleted"`
		}{pos[0], rev, true}, fmt.Sprintf("deleted %s (revision %d)", pos[0], rev))
		return nil
	})
}

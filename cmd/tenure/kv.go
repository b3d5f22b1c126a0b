package main

import (
	"context"
	"encoding/base64"
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
  kv get KEY [--print-value-only]
  kv list [PREFIX] [--keys-only]
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
	case "list":
		return a.kvList(ctx, args[1:])
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

// kvJSON is a value in -o json: the value is always in "value", as text
// when it is UTF-8 ("encoding":"utf-8") and as base64 otherwise
// ("encoding":"base64").
type kvJSON struct {
	Key      string `json:"key"`
	Value    string `json:"value"`
	Encoding string `json:"encoding"`
	Lease    string `json:"lease"`
	Token    uint64 `json:"token"`
	Revision uint64 `json:"revision"`
}

const (
	encodingUTF8   = "utf-8"
	encodingBase64 = "base64"
)

// encodeValue returns v as text and its encoding: v itself if it is
// UTF-8, else its base64.
func encodeValue(v []byte) (string, string) {
	if utf8.Valid(v) {
		return string(v), encodingUTF8
	}
	return base64.StdEncoding.EncodeToString(v), encodingBase64
}

// printKV prints one value: in text, a UTF-8 value as it is and a binary
// one as base64, marked.
func (p printer) kv(kv client.KV) {
	value, enc := encodeValue(kv.Value)
	j := kvJSON{Key: kv.Key, Value: value, Encoding: enc, Lease: kv.Lease, Token: kv.Token, Revision: kv.Revision}
	text := fmt.Sprintf("%s = %s (lease %s, token %d, revision %d)", kv.Key, value, kv.Lease, kv.Token, kv.Revision)
	if enc == encodingBase64 {
		text = fmt.Sprintf("%s = base64:%s (binary, %d bytes; lease %s, token %d, revision %d)",
			kv.Key, value, len(kv.Value), kv.Lease, kv.Token, kv.Revision)
	}
	p.print(j, text)
}

// valueOnly is the --print-value-only flag of kv get.
func valueOnly(c *command) *bool {
	return c.fs.Bool("print-value-only", false, "print only the value, byte for byte (no newline added); not with -o json")
}

func (a *app) checkValueOnly(c *command, on bool) error {
	if on && a.g.output == "json" {
		return &usageError{msg: "--print-value-only prints the raw value; it does not combine with -o json", usage: c.usage}
	}
	return nil
}

func (a *app) kvGet(ctx context.Context, args []string) error {
	c := a.newCommand("kv get", "kv get KEY [--print-value-only]",
		"Prints the value of KEY with the lease and token that wrote it: a UTF-8 value as\n"+
			"text, any other as base64 marked \"base64:\" (in -o json: \"value\" with\n"+
			"\"encoding\" utf-8 or base64). A key without a value is not found (exit 6).")
	only := valueOnly(c)
	pos, err := a.parse(c, args, []string{"KEY"}, 1)
	if err != nil {
		return err
	}
	if err := a.checkValueOnly(c, *only); err != nil {
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
		if *only {
			_, err := a.stdout.Write(kv.Value)
			return err
		}
		a.out().kv(kv)
		return nil
	})
}

func (a *app) kvList(ctx context.Context, args []string) error {
	c := a.newCommand("kv list", "kv list [PREFIX] [--keys-only]",
		"Prints the values of the keys that start with PREFIX (every key without one),\n"+
			"sorted by key, one per line as kv get prints them. --keys-only prints the\n"+
			"keys alone (in -o json: {\"key\": ...}).")
	keysOnly := c.fs.Bool("keys-only", false, "print only the keys")
	c.optional = "PREFIX"
	pos, err := a.parse(c, args, nil, 1)
	if err != nil {
		return err
	}
	prefix := ""
	if len(pos) > 0 {
		prefix = pos[0]
	}
	return a.call(ctx, 0, func(ctx context.Context, cl *client.Client) error {
		kvs, err := cl.KVList(ctx, prefix, client.KVListOptions{KeysOnly: *keysOnly})
		if err != nil {
			return err
		}
		out := a.out()
		for _, kv := range kvs {
			if *keysOnly {
				out.print(struct {
					Key string `json:"key"`
				}{kv.Key}, kv.Key)
				continue
			}
			out.kv(kv)
		}
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
		if errors.Is(err, client.ErrNotFound) {
			return &notFoundError{what: fmt.Sprintf("key %q", pos[0]), err: err}
		}
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

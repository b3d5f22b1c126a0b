package redisfence

import (
	"embed"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The scripts are the files in scripts/, shipped for any language (their
// calling convention is scripts/README.md) and embedded here, so that Go
// sends the very same scripts, under the same SHA1 digests (EVALSHA),
// as any other client that loads the files.
//
// Each guarded script takes the fence key as KEYS[1] and the token, in
// decimal, as ARGV[1]; the write's own keys and arguments follow. Each
// checks first (the block between "-- tenure:check begin" and "--
// tenure:check end"), writes next and records the token last (the
// "tenure:record" block), and refuses a key of the wrong type before it
// writes anything, so an error leaves both the data and the fence as
// they were.
//
//go:embed scripts/*.lua
var scriptFiles embed.FS

// Scripts returns the shipped scripts by file name ("set.lua", ...), the
// same text as the files in scripts/.
func Scripts() map[string]string {
	out := map[string]string{}
	entries, _ := scriptFiles.ReadDir("scripts")
	for _, e := range entries {
		out[e.Name()] = file(e.Name())
	}
	return out
}

// file returns the text of scripts/name; the files are embedded, so a
// missing one is a build mistake.
func file(name string) string {
	b, err := scriptFiles.ReadFile("scripts/" + name)
	if err != nil {
		panic("redisfence: " + err.Error())
	}
	return string(b)
}

// block returns the lines of s from "-- tenure:NAME begin" to "--
// tenure:NAME end", both included.
func block(s, name string) string {
	begin, end := "-- tenure:"+name+" begin\n", "-- tenure:"+name+" end\n"
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		panic("redisfence: advance.lua has no " + name + " block")
	}
	return s[i : j+len(end)]
}

var (
	// checkLua refuses a stale token. It defines tenure_fkey,
	// tenure_token and tenure_highest (names a script body of the
	// caller's will not clash with) for what follows; recordLua records
	// the token. Script wraps a body of the caller's in them.
	checkLua  = block(file("advance.lua"), "check")
	recordLua = block(file("advance.lua"), "record")

	// setScript: KEYS[2] key; ARGV[2] value, ARGV[3] ttl in ms (0: none).
	setScript = redis.NewScript(file("set.lua"))
	// hsetScript: KEYS[2] key; ARGV[2..] field, value pairs.
	hsetScript = redis.NewScript(file("hset.lua"))
	// delScript: KEYS[2..] the keys to delete.
	delScript = redis.NewScript(file("del.lua"))
	// getScript: KEYS[2] the key to read, fenced.
	getScript = redis.NewScript(file("get.lua"))
	// advanceScript records the token and writes nothing else.
	advanceScript = redis.NewScript(file("advance.lua"))
	// readScript returns the fence, as a string (nil for none), refusing
	// a fence key of another type.
	readScript = redis.NewScript(file("highest.lua"))
)

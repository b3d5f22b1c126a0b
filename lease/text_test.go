package lease

import (
	"testing"
	"unicode"
	"unicode/utf8"

	"pgregory.net/rapid"
)

// TestCheckTextAsRunesDo holds checkText, which takes printable ASCII
// without decoding it, to the rule it states: non-empty, within the
// limit, valid UTF-8, every rune printable.
func TestCheckTextAsRunesDo(t *testing.T) {
	want := func(s string) bool {
		if s == "" || len(s) > 16 || !utf8.ValidString(s) {
			return false
		}
		for _, r := range s {
			if !unicode.IsPrint(r) {
				return false
			}
		}
		return true
	}
	check := func(t interface{ Fatalf(string, ...any) }, s string) {
		if got := checkText("name", s, 16) == nil; got != want(s) {
			t.Fatalf("checkText(%q) accepted %v, want %v", s, got, want(s))
		}
	}
	for b := range 256 {
		check(t, string([]byte{byte(b)}))
		check(t, "a"+string([]byte{byte(b)})+"z")
	}
	rapid.Check(t, func(t *rapid.T) {
		check(t, string(rapid.SliceOfN(rapid.Byte(), 0, 20).Draw(t, "bytes")))
		check(t, rapid.StringN(0, 20, -1).Draw(t, "string"))
	})
}

package main

import (
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"
)

// Every flag that tenured -h shows is in the README's flag table, so the
// docs cannot drift from the binary.
func TestEveryFlagIsDocumented(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var table []string
	for _, l := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(l, "| `--") {
			table = append(table, l)
		}
	}
	rows := strings.Join(table, "\n")
	var help strings.Builder
	fs := newFlagSet(&options{}, &help)
	fs.Usage()
	fs.VisitAll(func(f *flag.Flag) {
		if !regexp.MustCompile(`(?m)^\s*--?` + regexp.QuoteMeta(f.Name) + `\b`).MatchString(help.String()) {
			return // hidden: fault injection
		}
		if !regexp.MustCompile("`--" + regexp.QuoteMeta(f.Name) + "[` ]").MatchString(rows) {
			t.Errorf("tenured --%s is in -h but not in the README's flag table", f.Name)
		}
	})
}

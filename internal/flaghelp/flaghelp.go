// Package flaghelp prints the flags of a flag.FlagSet for help, the way
// the project's commands show them: each flag once, with two dashes, a
// short alias beside its long name, and defaults only where they say
// something.
package flaghelp

import (
	"flag"
	"fmt"
	"slices"
	"strings"
)

// Defaults lists the flags of fs. aliases maps a short flag name to the
// long one it stands for (printed as "-o, --output"); flags named in hide
// are left out.
func Defaults(fs *flag.FlagSet, aliases map[string]string, hide ...string) string {
	short := make(map[string]string)
	for s, long := range aliases {
		if fs.Lookup(s) != nil {
			short[long] = s
		}
	}
	var b strings.Builder
	fs.VisitAll(func(f *flag.Flag) {
		if slices.Contains(hide, f.Name) {
			return
		}
		if long, ok := aliases[f.Name]; ok && fs.Lookup(long) != nil {
			return // printed with its long name
		}
		value, usage := flag.UnquoteUsage(f)
		b.WriteString("  ")
		if s, ok := short[f.Name]; ok {
			b.WriteString("-" + s + ", ")
		}
		b.WriteString("--" + f.Name)
		if value != "" {
			b.WriteString(" " + value)
		}
		b.WriteString("\n        " + strings.ReplaceAll(usage, "\n", "\n        "))
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
			fmt.Fprintf(&b, " (default %s)", f.DefValue)
		}
		b.WriteString("\n")
	})
	return b.String()
}

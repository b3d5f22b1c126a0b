package main

import (
	"flag"
	"fmt"
	"sort"
	"strings"
)

// envPrefix starts the environment variable of every tenured flag:
// --data-dir is TENURE_DATA_DIR.
const envPrefix = "TENURE_"

// notFromEnv are the flags with no environment variable: actions, not
// settings. The recovery flags start a new cluster once: taken from an
// environment that outlives the start, they would do it again at every
// restart.
var notFromEnv = []string{"version", "h", "help", "restore", "force-new-cluster", "token-floor"}

// envName returns the environment variable of the flag name.
func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// setFromEnv sets every flag of fs that the command line (already
// parsed into fs) did not set, from its environment variable (envName)
// when that is set and not empty: a flag on the command line wins. It
// covers every flag of fs, also those added later. It returns the flags
// it set and their variables. An invalid value is an error that names
// the variable.
func setFromEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) (map[string]string, error) {
	onCommandLine := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	set := make(map[string]string)
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || onCommandLine[f.Name] || isNotFromEnv(f.Name) {
			return
		}
		name := envName(f.Name)
		v, ok := lookup(name)
		if !ok || v == "" {
			return
		}
		if serr := fs.Set(f.Name, v); serr != nil {
			err = fmt.Errorf("environment variable %s=%q (for --%s): %v", name, v, f.Name, serr)
			return
		}
		set[f.Name] = name
	})
	return set, err
}

// envNote adds to err, an error about flags, which of the flags it names
// came from the environment and from which variable.
func envNote(err error, fromEnv map[string]string) error {
	var notes []string
	for flagName, env := range fromEnv {
		if strings.Contains(err.Error(), "--"+flagName) {
			notes = append(notes, fmt.Sprintf("--%s was set by the environment variable %s", flagName, env))
		}
	}
	if len(notes) == 0 {
		return err
	}
	sort.Strings(notes)
	return fmt.Errorf("%w (%s)", err, strings.Join(notes, "; "))
}

func isNotFromEnv(name string) bool {
	for _, n := range notFromEnv {
		if n == name {
			return true
		}
	}
	return false
}

const envHelp = `
Every flag can also be set as an environment variable: TENURE_ and the flag's
name in capitals with underscores for dashes (--data-dir is TENURE_DATA_DIR,
--cors-origins is TENURE_CORS_ORIGINS). A flag on the command line wins over
the environment; an empty variable counts as unset. The one-time recovery
flags --restore, --force-new-cluster and --token-floor are command-line only.
`

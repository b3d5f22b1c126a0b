package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/tenure-io/tenure/internal/version"
)

func (a *app) version(args []string) error {
	if len(args) > 0 {
		return &usageError{msg: fmt.Sprintf("version: unexpected argument %q", args[0]), usage: topUsage}
	}
	fmt.Fprintln(a.stdout, version.Line("tenure"))
	return nil
}

// globalFlags are the flags every command takes, for completion.
var globalFlags = []string{"--endpoints", "--cluster-id", "--output", "-o", "--request-timeout", "--cacert", "--cert", "--key"}

// commandFlags are the commands and their own flags, for completion.
// TestCompletionKnowsEveryFlag keeps it in step with the commands.
var commandFlags = map[string][]string{
	"acquire":    {"--holder", "--ttl", "--limit", "--shared", "--lock-delay", "--wait", "--timeout"},
	"renew":      {"--token", "--ttl"},
	"release":    {"--token"},
	"handoff":    {"--token", "--to"},
	"revoke":     {"--token", "--reason"},
	"get":        nil,
	"history":    {"--since", "--at", "--limit"},
	"list":       nil,
	"watch":      nil,
	"status":     nil,
	"kv":         nil,
	"member":     nil,
	"leader":     nil,
	"snapshot":   nil,
	"run":        {"--holder", "--ttl", "--limit", "--shared", "--lock-delay", "--kill-after", "--verbose"},
	"elect":      {"--listen", "--ttl", "--lock-delay", "--priority"},
	"demo":       {"--ttl", "--pause", "--scenario", "--postgres", "--real", "--ui", "--verbose"},
	"fence":      nil,
	"certs":      nil,
	"auth":       nil,
	"completion": nil,
	"version":    nil,
	"help":       nil,
}

// subcommandFlags are the subcommands of the commands that have them
// (kv, fence, certs, auth, member, leader, snapshot) and their flags.
var subcommandFlags = map[string]map[string][]string{
	"kv": {
		"put":    {"--lease", "--token"},
		"get":    {"--print-value-only"},
		"list":   {"--keys-only"},
		"delete": {"--lease", "--token"},
	},
	"fence": {
		"install": {"--postgres", "--schema", "--mysql"},
	},
	"certs": {
		"init": {"--members", "--hosts", "--clients"},
	},
	"auth": {
		"token":  {"--file", "--role"},
		"list":   {"--file"},
		"revoke": {"--file"},
	},
	"member": {
		"list":   nil,
		"remove": nil,
	},
	"leader": {
		"transfer": nil,
	},
	"snapshot": {
		"save": {"--timeout"},
	},
}

// subcommanded returns the commands with subcommands, sorted.
func subcommanded() []string {
	var names []string
	for n := range subcommandFlags {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func sortedNames(m map[string][]string) string {
	var names []string
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, " ")
}

const completionUsage = `Usage: tenure completion bash|zsh|fish

Prints a completion script for the shell. Load it with:

  bash:  source <(tenure completion bash)     (or save it in
         /etc/bash_completion.d/tenure)
  zsh:   source <(tenure completion zsh)      (after compinit)
  fish:  tenure completion fish | source      (or save it in
         ~/.config/fish/completions/tenure.fish)
`

func (a *app) completion(args []string) error {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		return &helpRequest{usage: completionUsage}
	}
	if len(args) != 1 {
		return &usageError{msg: "completion needs one shell: bash, zsh or fish", usage: completionUsage}
	}
	var script string
	switch args[0] {
	case "bash":
		script = bashCompletion()
	case "zsh":
		script = "autoload -U +X bashcompinit && bashcompinit\n" + bashCompletion()
	case "fish":
		script = fishCompletion()
	default:
		return &usageError{msg: fmt.Sprintf("completion: unknown shell %q (bash, zsh or fish)", args[0]), usage: completionUsage}
	}
	fmt.Fprint(a.stdout, script)
	return nil
}

func bashCompletion() string {
	var b strings.Builder
	b.WriteString("# bash completion for tenure (tenure completion bash)\n_tenure() {\n")
	b.WriteString("  local cur=${COMP_WORDS[COMP_CWORD]} cmd='' sub='' i w\n")
	b.WriteString("  for ((i = 1; i < COMP_CWORD; i++)); do\n")
	b.WriteString("    w=${COMP_WORDS[i]}\n")
	b.WriteString("    case $w in -*) continue ;; esac\n")
	b.WriteString("    if [[ -z $cmd ]]; then cmd=$w; elif [[ -z $sub ]]; then sub=$w; fi\n")
	b.WriteString("  done\n")
	fmt.Fprintf(&b, "  local global=%q flags=''\n", strings.Join(globalFlags, " ")+" --help")
	b.WriteString("  case $cmd in\n")
	fmt.Fprintf(&b, "  '') COMPREPLY=($(compgen -W %q -- \"$cur\")); [[ $cur == -* ]] && COMPREPLY=($(compgen -W \"$global --version\" -- \"$cur\")); return ;;\n",
		sortedNames(commandFlags))
	for _, cmd := range subcommanded() {
		subs := subcommandFlags[cmd]
		fmt.Fprintf(&b, "  %s)\n    case $sub in\n", cmd)
		fmt.Fprintf(&b, "    '') COMPREPLY=($(compgen -W %q -- \"$cur\")); return ;;\n", sortedNames(subs))
		for _, sub := range strings.Fields(sortedNames(subs)) {
			fmt.Fprintf(&b, "    %s) flags=%q ;;\n", sub, strings.Join(subs[sub], " "))
		}
		b.WriteString("    esac ;;\n")
	}
	b.WriteString("  completion) COMPREPLY=($(compgen -W 'bash zsh fish' -- \"$cur\")); return ;;\n")
	for _, cmd := range strings.Fields(sortedNames(commandFlags)) {
		if fl := commandFlags[cmd]; len(fl) > 0 {
			fmt.Fprintf(&b, "  %s) flags=%q ;;\n", cmd, strings.Join(fl, " "))
		}
	}
	b.WriteString("  esac\n")
	b.WriteString("  if [[ $cur == -* ]]; then COMPREPLY=($(compgen -W \"$flags $global\" -- \"$cur\")); fi\n")
	b.WriteString("}\ncomplete -o default -F _tenure tenure\n")
	return b.String()
}

func fishCompletion() string {
	var b strings.Builder
	b.WriteString("# fish completion for tenure (tenure completion fish)\ncomplete -c tenure -f\n")
	cmds := sortedNames(commandFlags)
	fmt.Fprintf(&b, "complete -c tenure -n 'not __fish_seen_subcommand_from %s' -a '%s'\n", cmds, cmds)
	b.WriteString("complete -c tenure -l version -d 'print the version'\n")
	for _, f := range globalFlags {
		if strings.HasPrefix(f, "--") {
			fmt.Fprintf(&b, "complete -c tenure -l %s -r\n", strings.TrimPrefix(f, "--"))
		}
	}
	for _, cmd := range strings.Fields(cmds) {
		for _, f := range commandFlags[cmd] {
			fmt.Fprintf(&b, "complete -c tenure -n '__fish_seen_subcommand_from %s' -l %s\n", cmd, strings.TrimPrefix(f, "--"))
		}
	}
	for _, cmd := range subcommanded() {
		m := subcommandFlags[cmd]
		subs := sortedNames(m)
		fmt.Fprintf(&b, "complete -c tenure -n '__fish_seen_subcommand_from %s; and not __fish_seen_subcommand_from %s' -a '%s'\n", cmd, subs, subs)
		for _, sub := range strings.Fields(subs) {
			for _, f := range m[sub] {
				fmt.Fprintf(&b, "complete -c tenure -n '__fish_seen_subcommand_from %s; and __fish_seen_subcommand_from %s' -l %s\n", cmd, sub, strings.TrimPrefix(f, "--"))
			}
		}
	}
	b.WriteString("complete -c tenure -n '__fish_seen_subcommand_from completion' -a 'bash zsh fish'\n")
	return b.String()
}

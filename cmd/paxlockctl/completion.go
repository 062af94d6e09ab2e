// This file is completion bash|zsh: a shell script, written from the
// command table and the flag set, so that it completes what this build
// accepts.

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/template"
)

// completionWords are what the scripts complete: the commands, each
// command's subcommands, the flags, those that take a value, and those
// whose value is a file.
type completionWords struct {
	Commands string
	Subs     [][2]string // command, its subcommands
	Flags    string
	Valued   string
	Files    string
}

// fileFlags are the flags whose value is a file or directory name.
var fileFlags = []string{"ca", "cert", "key", "admin-ca", "admin-token-file", "secret-file", "out"}

func wordsOf(fs *flag.FlagSet) completionWords {
	var flags, valued []string
	fs.VisitAll(func(f *flag.Flag) {
		flags = append(flags, "-"+f.Name)
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
			valued = append(valued, "-"+f.Name)
		}
	})
	flags = append(flags, "-h")
	files := make([]string, len(fileFlags))
	for i, f := range fileFlags {
		files[i] = "-" + f
	}
	w := completionWords{Commands: strings.Join(commandNames, " "), Flags: strings.Join(flags, " "),
		Valued: strings.Join(valued, " "), Files: strings.Join(files, " ")}
	for _, c := range commandNames {
		if subs, ok := subcommands[c]; ok {
			w.Subs = append(w.Subs, [2]string{c, strings.Join(subs, " ")})
		}
	}
	slices.SortFunc(w.Subs, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	return w
}

// bashCompletion completes the first word that is not a flag (or a
// flag's value) as a command, the second as its subcommand, a word that
// starts with - as a flag, a file flag's value as a file, and after "--"
// (a run form's CMD) a command of the system.
var bashCompletion = template.Must(template.New("bash").Parse(`# bash completion for paxlockctl: source <(paxlockctl completion bash)
_paxlockctl() {
    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"
    local commands="{{.Commands}}"
    local flags="{{.Flags}}"
    local valued=" {{.Valued}} " files=" {{.Files}} "
    COMPREPLY=()
    local i w cmd="" n=0
    for (( i=1; i<COMP_CWORD; i++ )); do
        w="${COMP_WORDS[i]}"
        if [[ "$w" == "--" ]]; then
            COMPREPLY=( $(compgen -c -- "$cur") )
            return
        fi
        if [[ "$w" == -* ]]; then
            if [[ "$w" != *=* && "$valued" == *" $w "* ]]; then (( i++ )); fi
            continue
        fi
        (( n++ ))
        if (( n == 1 )); then cmd="$w"; fi
    done
    if [[ "$files" == *" $prev "* ]]; then
        COMPREPLY=( $(compgen -f -- "$cur") )
        return
    fi
    if [[ "$valued" == *" $prev "* ]]; then
        return
    fi
    if [[ "$cur" == -* ]]; then
        COMPREPLY=( $(compgen -W "$flags" -- "$cur") )
        return
    fi
    if [[ -z "$cmd" ]]; then
        COMPREPLY=( $(compgen -W "$commands" -- "$cur") )
        return
    fi
    if (( n == 1 )); then
        case "$cmd" in
{{- range .Subs}}
        {{index . 0}}) COMPREPLY=( $(compgen -W "{{index . 1}}" -- "$cur") ) ;;
{{- end}}
        esac
    fi
}
complete -o default -F _paxlockctl paxlockctl
`))

// zshCompletion is bashCompletion's rules for zsh's completion system.
var zshCompletion = template.Must(template.New("zsh").Parse(`#compdef paxlockctl
# zsh completion for paxlockctl: source <(paxlockctl completion zsh), after compinit
_paxlockctl() {
  local -a commands flags valued files
  commands=({{.Commands}})
  flags=({{.Flags}})
  valued=({{.Valued}})
  files=({{.Files}})
  local cur=${words[CURRENT]} prev=${words[CURRENT-1]}
  local i w cmd= n=0
  for (( i=2; i<CURRENT; i++ )); do
    w=${words[i]}
    if [[ $w == -- ]]; then
      _command_names
      return
    fi
    if [[ $w == -* ]]; then
      if [[ $w != *=* ]] && (( ${valued[(Ie)$w]} )); then (( i++ )); fi
      continue
    fi
    (( n++ ))
    (( n == 1 )) && cmd=$w
  done
  if (( ${files[(Ie)$prev]} )); then
    _files
    return
  fi
  (( ${valued[(Ie)$prev]} )) && return
  if [[ $cur == -* ]]; then
    compadd -- $flags
    return
  fi
  if [[ -z $cmd ]]; then
    compadd -- $commands
    return
  fi
  if (( n == 1 )); then
    case $cmd in
{{- range .Subs}}
      {{index . 0}}) compadd -- {{index . 1}} ;;
{{- end}}
    esac
  fi
}
compdef _paxlockctl paxlockctl
`))

// runCompletion is completion bash|zsh.
func runCompletion(_ context.Context, o *options, _ printer, _ string, args []string) error {
	if len(args) != 1 || args[0] != "bash" && args[0] != "zsh" {
		return fmt.Errorf("%w: want completion bash|zsh", errUsage)
	}
	return writeCompletion(o.stdout, args[0], o.fs)
}

// writeCompletion writes shell's completion script for fs's flags.
func writeCompletion(w io.Writer, shell string, fs *flag.FlagSet) error {
	t := bashCompletion
	if shell == "zsh" {
		t = zshCompletion
	}
	return t.Execute(w, wordsOf(fs))
}

package cli

// Shell completion scripts, generated from the kong model by
// github.com/miekg/king.

import (
	"fmt"
	"strings"

	"github.com/alecthomas/kong"
	"github.com/miekg/king"
)

// CompletionCmd is a `completion bash|zsh|fish` command: it prints a
// completion script for the whole command line (commands, flags, enum
// values) on stdout, to be sourced by the shell (bash: source <(capper
// completion bash)) or installed where it looks for completions.
type CompletionCmd struct {
	Shell string `arg:"" enum:"bash,zsh,fish" help:"The shell: bash, zsh or fish." completion:"echo bash zsh fish"`
}

// Run prints the script.
func (c CompletionCmd) Run(kctx *kong.Context) error {
	script, err := CompletionScript(kctx.Model.Node, c.Shell)
	if err != nil {
		return err
	}
	if _, err := kctx.Stdout.Write(script); err != nil {
		return fmt.Errorf("print %s completion: %w", c.Shell, err)
	}
	return nil
}

// CompletionScript generates the completion script of the command line
// whose root is app for shell (bash, zsh or fish). king pastes help texts
// into the scripts' quoted strings as they are, so it first rewrites, in
// app, the characters that would end those strings or be expanded by the
// shell (see shellSafeHelp): use it on a model that is not used afterwards.
func CompletionScript(app *kong.Node, shell string) ([]byte, error) {
	var c king.Completer
	switch shell {
	case "bash":
		c = &king.Bash{}
	case "zsh":
		c = &king.Zsh{}
	case "fish":
		c = &king.Fish{}
	default:
		return nil, fmt.Errorf("completion: unknown shell %q (want bash, zsh or fish)", shell)
	}
	shellSafeHelp(app)
	c.Completion(app, "")
	out := c.Out()
	if len(out) == 0 {
		return nil, fmt.Errorf("completion: no %s script generated", shell)
	}
	return out, nil
}

// shellSafeHelp rewrites, in the help texts of n and everything below it,
// what king does not escape: quotes, "$", backquotes and backslashes (which
// end or expand the shells' quoted strings), brackets and colons (which
// delimit zsh's _arguments specs), and line breaks.
func shellSafeHelp(n *kong.Node) {
	safe := strings.NewReplacer(
		"'", "\u2019", "\"", "\u201d", "`", "\u2019", "$", "", "\\", "/",
		"[", "(", "]", ")", ":", " -", "\n", " ",
	)
	var walk func(n *kong.Node)
	walk = func(n *kong.Node) {
		n.Help = safe.Replace(n.Help)
		for _, f := range n.Flags {
			f.Help = safe.Replace(f.Help)
		}
		for _, p := range n.Positional {
			p.Help = safe.Replace(p.Help)
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(n)
}

// Package flagparse reads a process's configuration from command-line
// arguments as `floodgate` does (kong: each flag's FLOODGATE_* variable,
// then its default), for the process packages' ParseFlags: a program that
// embeds a process configures it with the same names and defaults as the
// CLI.
package flagparse

import "github.com/alecthomas/kong"

// Parse fills cfg, a pointer to a struct of kong-tagged fields, from args;
// name is the command's, for error messages.
func Parse(name string, cfg any, args []string) error {
	p, err := kong.New(cfg, kong.Name(name), kong.Exit(func(int) {}))
	if err != nil {
		return err
	}
	_, err = p.Parse(args)
	return err
}

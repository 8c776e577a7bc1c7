package main

import (
	"context"
	"fmt"
	"os"

	"github.com/floodgate-dev/floodgate/internal/version"
)

// VersionCmd prints the build info.
type VersionCmd struct{}

// Run prints one line: version, commit, date, Go version.
func (VersionCmd) Run(context.Context) error {
	_, err := fmt.Fprintln(os.Stdout, version.Read())
	return err
}

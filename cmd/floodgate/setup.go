package main

import (
	"context"
	"errors"
)

// SetupCmd is a placeholder until topics and migrations land.
type SetupCmd struct{}

// Run reports that the subcommand is not built yet.
func (c *SetupCmd) Run(ctx context.Context) error { return errors.New("not implemented yet") }

package main

import (
	"context"
	"errors"
)

// MigrateCmd is a placeholder until its issue lands.
type MigrateCmd struct{}

// Run reports that the subcommand is not built yet.
func (c *MigrateCmd) Run(ctx context.Context) error { return errors.New("not implemented yet") }

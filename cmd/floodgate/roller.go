package main

import (
	"context"
	"errors"
)

// RollerCmd is a placeholder until its issue lands.
type RollerCmd struct{}

// Run reports that the subcommand is not built yet.
func (c *RollerCmd) Run(ctx context.Context) error { return errors.New("not implemented yet") }

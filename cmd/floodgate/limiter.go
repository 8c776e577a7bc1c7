package main

import (
	"context"
	"errors"
)

// LimiterCmd is a placeholder until its issue lands.
type LimiterCmd struct{}

// Run reports that the subcommand is not built yet.
func (c *LimiterCmd) Run(ctx context.Context) error { return errors.New("not implemented yet") }

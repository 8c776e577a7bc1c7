package main

import (
	"context"
	"errors"
)

// QueryCmd is a placeholder until its issue lands.
type QueryCmd struct{}

// Run reports that the subcommand is not built yet.
func (c *QueryCmd) Run(ctx context.Context) error { return errors.New("not implemented yet") }

package main

import (
	"context"
	"errors"
)

// AggregatorCmd is a placeholder until its issue lands.
type AggregatorCmd struct{}

// Run reports that the subcommand is not built yet.
func (c *AggregatorCmd) Run(ctx context.Context) error { return errors.New("not implemented yet") }

package main

import (
	"context"
	"errors"
)

// TopicsCmd is a placeholder until its issue lands.
type TopicsCmd struct{}

// Run reports that the subcommand is not built yet.
func (c *TopicsCmd) Run(ctx context.Context) error { return errors.New("not implemented yet") }

package main

import (
	"context"
	"errors"
)

// ProduceCmd is a placeholder until its issue lands.
type ProduceCmd struct{}

// Run reports that the subcommand is not built yet.
func (c *ProduceCmd) Run(ctx context.Context) error { return errors.New("not implemented yet") }

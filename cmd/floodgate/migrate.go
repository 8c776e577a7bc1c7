package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"text/tabwriter"
	"time"

	"floodgate/migrations"
)

// MigrateCmd applies or lists the embedded database migrations.
type MigrateCmd struct {
	PostgresFlags
	Action  string        `arg:"" enum:"up,status" default:"status" help:"up: apply pending migrations; status: list them (default)."`
	Timeout time.Duration `name:"timeout" default:"5m" help:"Give up after this long (includes waiting for another migrator's lock)."`

	out io.Writer `kong:"-"`
}

// Run opens the database and runs the action.
func (c *MigrateCmd) Run(ctx context.Context, log *slog.Logger) (err error) {
	out := c.out
	if out == nil {
		out = os.Stdout
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	u, err := c.postgresURL()
	if err != nil {
		return err
	}
	db, err := migrations.Open(ctx, u)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := db.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("close database: %w", cerr))
		}
	}()

	if c.Action == "up" {
		applied, err := migrations.Up(ctx, db)
		for _, a := range applied {
			log.Info("migration applied", "version", a.Version, "file", a.Name, "duration", a.Duration.Round(time.Millisecond))
		}
		if err != nil {
			return err
		}
		if len(applied) == 0 {
			log.Info("database is up to date")
		}
	}
	st, err := migrations.Status(ctx, db)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tFILE\tSTATE\tAPPLIED AT")
	for _, m := range st {
		state, at := "pending", "-"
		if m.Applied {
			state, at = "applied", m.AppliedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", m.Version, m.Name, state, at)
	}
	return tw.Flush()
}

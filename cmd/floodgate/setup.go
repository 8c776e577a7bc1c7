package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"floodgate/migrations"
)

// SetupCmd is the one-shot deploy step: it creates the topics and applies
// the migrations, retrying while Kafka or PostgreSQL are still starting, so a
// compose file or an init container needs no shell loop around it.
type SetupCmd struct {
	KafkaFlags
	TopicPartitions
	PostgresFlags
	Wait time.Duration `name:"wait" env:"FLOODGATE_SETUP_WAIT" default:"2m" help:"Keep retrying for this long while the services come up."`
}

// Run creates topics, then migrates, each retried until Wait runs out.
func (c *SetupCmd) Run(ctx context.Context, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, c.Wait)
	defer cancel()
	if err := retry(ctx, log, "create topics", func() error {
		_, err := ensureTopics(ctx, log, c.KafkaFlags, c.TopicPartitions, 30*time.Second)
		return err
	}); err != nil {
		return err
	}
	return retry(ctx, log, "migrate", func() error {
		db, err := migrations.Open(ctx, c.PostgresURL)
		if err != nil {
			return err
		}
		applied, err := migrations.Up(ctx, db)
		for _, a := range applied {
			log.Info("migration applied", "version", a.Version, "file", a.Name)
		}
		return errors.Join(err, db.Close())
	})
}

// retry runs op until it succeeds or ctx ends, pausing between attempts.
func retry(ctx context.Context, log *slog.Logger, what string, op func() error) error {
	for {
		err := op()
		if err == nil {
			return nil
		}
		log.Warn(what+" failed; retrying", "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: gave up: %w", what, err)
		case <-time.After(2 * time.Second):
		}
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/floodgate-dev/floodgate/internal/jitter"
	"github.com/floodgate-dev/floodgate/internal/kafkaconn"
	"github.com/floodgate-dev/floodgate/internal/postgres"
	"github.com/floodgate-dev/floodgate/internal/topics"
	"github.com/floodgate-dev/floodgate/migrations"
)

// SetupCmd is the one-shot deploy step: it creates the topics and applies
// the migrations, retrying while Kafka or PostgreSQL are still starting, so a
// compose file or an init container needs no shell loop around it.
type SetupCmd struct {
	KafkaFlags
	TopicPartitions
	PostgresFlags
	Deadline time.Duration `name:"deadline" aliases:"wait" env:"FLOODGATE_SETUP_DEADLINE,FLOODGATE_SETUP_WAIT" default:"2m" help:"Give up on the whole command after this long, retrying meanwhile while the services come up."`
}

// Run creates topics, then migrates, each retried until Wait runs out.
func (c *SetupCmd) Run(ctx context.Context, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, c.Deadline)
	defer cancel()
	if err := retry(ctx, log, "create topics", func() error {
		_, err := topics.EnsureFlags(ctx, log, c.KafkaFlags, c.TopicPartitions, 30*time.Second)
		return err
	}); err != nil {
		return err
	}
	return retry(ctx, log, "migrate", func() error {
		u, err := c.URL()
		if err != nil {
			return permanent{err}
		}
		db, err := migrations.Open(ctx, u)
		if err != nil {
			return err
		}
		applied, err := migrations.Up(ctx, db)
		for _, a := range applied {
			log.Info("migration applied", "version", a.Version, "file", a.Name)
		}
		if err == nil {
			warnNoReader(ctx, log, db)
		}
		return errors.Join(err, db.Close())
	})
}

// permanent marks an error retrying cannot cure.
type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// retry runs op until it succeeds or ctx ends, pausing 2-3s between
// attempts: jittered, so that setups started together (replicas of an init
// container) do not knock on a starting service in step.
func retry(ctx context.Context, log *slog.Logger, what string, op func() error) error {
	wait := jitter.New(2*time.Second, 3*time.Second)
	for {
		err := op()
		if err == nil {
			return nil
		}
		var perm permanent
		if errors.As(err, &perm) || errors.Is(err, kafkaconn.ErrRefused) || postgres.Refused(err) {
			// A wrong password or an untrusted certificate does not get
			// better by waiting: fail now, with the cause.
			return fmt.Errorf("%s: %w", what, err)
		}
		log.Warn(what+" failed; retrying", "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: gave up: %w", what, err)
		case <-time.After(wait.Next()):
		}
	}
}

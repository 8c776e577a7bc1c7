package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/floodgate-dev/floodgate/internal/loadgen"
	"github.com/floodgate-dev/floodgate/internal/topics"
	"github.com/floodgate-dev/floodgate/producer"
)

// ProduceCmd publishes events: NDJSON from stdin, or synthetic load.
type ProduceCmd struct {
	KafkaFlags
	TopicPartitions
	NoCreateTopics bool `name:"no-create-topics" env:"FLOODGATE_PRODUCE_NO_CREATE_TOPICS" help:"Do not create the topics first."`

	Stdin    bool          `name:"stdin" env:"FLOODGATE_PRODUCE_STDIN" help:"Read NDJSON events from stdin, one per line, as docs/events.md describes them, attrs included (e.g. \"attrs\":{\"email\":\"a@example.com\"} for distinct rules); v, id and ts are filled in when missing (give the id to have --dedup skip a re-sent line); bad lines are reported and skipped."`
	Count    int64         `name:"count" env:"FLOODGATE_PRODUCE_COUNT" help:"Stop after N events."`
	Duration time.Duration `name:"duration" env:"FLOODGATE_PRODUCE_DURATION" help:"Stop after this long."`
	Rate     float64       `name:"rate" env:"FLOODGATE_PRODUCE_RATE" default:"0" help:"Events per second; 0 = as fast as possible."`

	Subjects int           `name:"subjects" env:"FLOODGATE_PRODUCE_SUBJECTS" default:"10000" help:"Synthetic: distinct subjects (Zipf-skewed: a few are hot)."`
	Actions  []string      `name:"actions" env:"FLOODGATE_PRODUCE_ACTIONS" default:"login_failed" sep:"," help:"Synthetic: actions, chosen uniformly."`
	Kind     string        `name:"kind" env:"FLOODGATE_PRODUCE_KIND" default:"ip" help:"Synthetic: kind of the subjects (ip, email, or any name)."`
	Zipf     float64       `name:"zipf" env:"FLOODGATE_PRODUCE_ZIPF" default:"1.1" help:"Synthetic: Zipf exponent s (> 1); higher is more skewed."`
	Uniform  bool          `name:"uniform" env:"FLOODGATE_PRODUCE_UNIFORM" help:"Synthetic: draw subjects uniformly (no hot ones) instead of by --zipf."`
	Backfill time.Duration `name:"backfill" env:"FLOODGATE_PRODUCE_BACKFILL" help:"Synthetic: spread event times uniformly over the past D (e.g. 72h)."`
	TSFrom   time.Time     `name:"ts-from" env:"FLOODGATE_PRODUCE_TS_FROM" help:"Synthetic: spread event times over [ts-from, ts-to) (RFC 3339)."`
	TSTo     time.Time     `name:"ts-to" env:"FLOODGATE_PRODUCE_TS_TO" help:"Synthetic: end of --ts-from's range (default now)."`
	Seed     uint64        `name:"seed" env:"FLOODGATE_PRODUCE_SEED" help:"Synthetic: seed of subjects, actions and times (0 = random). Event ids are always random."`

	Acks        string        `name:"acks" env:"FLOODGATE_PRODUCE_ACKS" default:"all" enum:"all,one,none" help:"Required acknowledgements."`
	Compression string        `name:"compression" env:"FLOODGATE_PRODUCE_COMPRESSION" default:"lz4" enum:"lz4,snappy,zstd,gzip,none" help:"Batch compression."`
	Linger      time.Duration `name:"linger" env:"FLOODGATE_PRODUCE_LINGER" default:"5ms" help:"How long a batch waits to fill."`
	BatchSize   int           `name:"batch-size" env:"FLOODGATE_PRODUCE_BATCH_SIZE" default:"5000" help:"Most events per partition batch."`
	MaxBuffered int           `name:"max-buffered" env:"FLOODGATE_PRODUCE_MAX_BUFFERED" default:"250000" help:"Most events in flight (bounds memory: about 0.5 KB each)."`
	Progress    time.Duration `name:"progress" env:"FLOODGATE_PRODUCE_PROGRESS" default:"1s" help:"Progress line interval on stderr; 0 = none."`

	stdin  io.Reader `kong:"-"`
	stderr io.Writer `kong:"-"`
}

// Run creates the topics, then pumps events into a Publisher until the
// count, duration, end of stdin or interrupt, and flushes.
func (c *ProduceCmd) Run(ctx context.Context, log *slog.Logger) (err error) {
	stdin, stderr := c.stdin, c.stderr
	if stdin == nil {
		stdin = os.Stdin
	}
	if stderr == nil {
		stderr = os.Stderr
	}
	if !c.Stdin && c.Count == 0 && c.Duration == 0 {
		return errors.New("nothing to do: give --stdin, or --count and/or --duration for synthetic load")
	}
	var src loadgen.Source
	if c.Stdin {
		src = loadgen.NewNDJSON(stdin)
	} else {
		gen, err := loadgen.NewSynthetic(loadgen.SyntheticConfig{
			Subjects: c.Subjects, Actions: c.Actions, Kind: c.Kind, ZipfS: c.Zipf, Uniform: c.Uniform,
			Backfill: c.Backfill, TSFrom: c.TSFrom, TSTo: c.TSTo, Seed: c.Seed,
		}, time.Now())
		if err != nil {
			return err
		}
		log.Info("synthetic load", "subjects", c.Subjects, "actions", c.Actions, "kind", c.Kind, "zipf", c.Zipf, "seed", gen.Seed())
		src = gen
	}
	if !c.NoCreateTopics {
		if _, err := topics.EnsureFlags(ctx, log, c.KafkaFlags, c.TopicPartitions, time.Minute); err != nil {
			return err
		}
	}

	kc, err := c.KafkaCluster(ctx)
	if err != nil {
		return err
	}
	pub, err := producer.New(producer.Config{
		Brokers: c.Brokers, Security: kc.Security, Topic: c.Topic,
		BatchTimeout: c.Linger, BatchSize: c.BatchSize, RequiredAcks: c.Acks, Compression: c.Compression,
		MaxBuffered: c.MaxBuffered, Async: true, Logger: log,
	})
	if err != nil {
		return err
	}
	pump, err := loadgen.NewPump(loadgen.PumpConfig{
		Count: c.Count, Duration: c.Duration, Rate: c.Rate,
		OnBadInput: func(err error) { log.Warn("skipped bad input", "err", err) },
	}, src, pub)
	if err != nil {
		return errors.Join(err, pub.Close())
	}
	return loadgen.Run(ctx, stderr, pump, pub, c.Progress, c.Topic)
}

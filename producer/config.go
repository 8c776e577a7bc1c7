package producer

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/event"

	"github.com/floodgate-dev/floodgate/internal/kafkaconn"
)

// Security is how a Publisher connects to the brokers: TLS (a
// *tls.Config; nil: plaintext) and a kafka-go SASL mechanism (nil: none),
// as every floodgate process connects.
type Security = kafkaconn.Security

// Config configures a Publisher. The zero value of every field except
// Brokers means its documented default.
type Config struct {
	// Brokers are the Kafka bootstrap addresses, host:port. Required.
	Brokers []string
	// Security is how to reach them: TLS and SASL (zero: plaintext).
	Security Security
	// Topic receives the events. Default "floodgate.events".
	Topic string

	// BatchTimeout is the linger: how long a partition's batch may wait to
	// fill before it is sent. Default 5ms.
	BatchTimeout time.Duration
	// BatchSize is the most events in one partition batch. Default 256.
	//
	// kafka-go allocates room for BatchSize messages (about 150 bytes
	// each) with every new partition batch, so a large value is a large
	// allocation per partition and linger even when a batch carries one
	// event: at 5000, a limiter publishing its takes spent a fifth of its
	// CPU allocating and collecting them. 256 still carries 51k events/s
	// per partition at the default linger; bulk loads (`floodgate
	// produce`, 5000) set more.
	BatchSize int
	// BatchBytes is the most bytes in one partition batch, before
	// compression. Default 1 MiB; must stay under the broker's
	// message.max.bytes (1 MiB by default) when compression is "none".
	BatchBytes int64
	// RequiredAcks is "all" (every in-sync replica), "one" (the leader) or
	// "none". Default "all".
	RequiredAcks string
	// Compression of batches: "lz4", "snappy", "zstd", "gzip" or "none".
	// Default "lz4".
	Compression string
	// WriteTimeout bounds one produce request. Default 10s.
	WriteTimeout time.Duration
	// MaxAttempts is how many times a batch is tried before its events are
	// reported failed. Default 10.
	MaxAttempts int

	// MaxBuffered bounds memory: the most events accepted by Publish and not
	// yet acknowledged by Kafka (or failed). Default 100000.
	MaxBuffered int
	// NonBlocking makes Publish return ErrBufferFull at once instead of
	// waiting (until its context ends) for room in the buffer.
	// Default false: Publish blocks, which is back-pressure.
	NonBlocking bool
	// Async makes Publish return as soon as the events are buffered, without
	// waiting for Kafka's acknowledgement. Failures are then counted in
	// Stats, reported by Err and returned by Close. Default false: Publish
	// returns once every event is acknowledged, or with the error.
	Async bool

	// Logger receives failed batches (at error level). Default: discard.
	Logger *slog.Logger
}

// Defaults of Config.
const (
	DefaultTopic        = "floodgate.events"
	DefaultBatchTimeout = 5 * time.Millisecond
	DefaultBatchSize    = 256
	DefaultBatchBytes   = 1 << 20
	DefaultRequiredAcks = "all"
	DefaultCompression  = "lz4"
	DefaultWriteTimeout = 10 * time.Second
	DefaultMaxAttempts  = 10
	DefaultMaxBuffered  = 100_000
)

// minBatchBytes fits two events of the largest size event.Decode accepts,
// with their keys and record overhead.
const minBatchBytes = 4 * event.MaxSize

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Topic == "" {
		c.Topic = DefaultTopic
	}
	if c.BatchTimeout == 0 {
		c.BatchTimeout = DefaultBatchTimeout
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.BatchBytes == 0 {
		c.BatchBytes = DefaultBatchBytes
	}
	if c.RequiredAcks == "" {
		c.RequiredAcks = DefaultRequiredAcks
	}
	if c.Compression == "" {
		c.Compression = DefaultCompression
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.MaxBuffered == 0 {
		c.MaxBuffered = DefaultMaxBuffered
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports every invalid field of c (after defaults), or nil.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("brokers: at least one broker address is required"))
	}
	for i, b := range c.Brokers {
		if strings.TrimSpace(b) == "" || !strings.Contains(b, ":") {
			errs = append(errs, fmt.Errorf("brokers[%d]=%q: want host:port", i, b))
		}
	}
	if c.BatchTimeout < 0 {
		errs = append(errs, fmt.Errorf("batch timeout %v: must not be negative", c.BatchTimeout))
	}
	if c.BatchSize < 0 {
		errs = append(errs, fmt.Errorf("batch size %d: must not be negative", c.BatchSize))
	}
	if c.BatchBytes < minBatchBytes {
		errs = append(errs, fmt.Errorf("batch bytes %d: must be at least %d (two maximal events)", c.BatchBytes, minBatchBytes))
	}
	if _, err := parseAcks(c.RequiredAcks); err != nil {
		errs = append(errs, err)
	}
	if _, err := parseCompression(c.Compression); err != nil {
		errs = append(errs, err)
	}
	if c.WriteTimeout < 0 {
		errs = append(errs, fmt.Errorf("write timeout %v: must not be negative", c.WriteTimeout))
	}
	if c.MaxAttempts < 0 {
		errs = append(errs, fmt.Errorf("max attempts %d: must not be negative", c.MaxAttempts))
	}
	if c.MaxBuffered < 0 {
		errs = append(errs, fmt.Errorf("max buffered %d: must not be negative", c.MaxBuffered))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("producer config: %w", err)
	}
	return nil
}

func parseAcks(s string) (kafka.RequiredAcks, error) {
	switch s {
	case "all", "-1":
		return kafka.RequireAll, nil
	case "one", "1":
		return kafka.RequireOne, nil
	case "none", "0":
		return kafka.RequireNone, nil
	}
	return 0, fmt.Errorf("required acks %q: want all, one or none", s)
}

func parseCompression(s string) (kafka.Compression, error) {
	switch s {
	case "none":
		return 0, nil
	case "gzip":
		return kafka.Gzip, nil
	case "snappy":
		return kafka.Snappy, nil
	case "lz4":
		return kafka.Lz4, nil
	case "zstd":
		return kafka.Zstd, nil
	}
	return 0, fmt.Errorf("compression %q: want lz4, snappy, zstd, gzip or none", s)
}

// Package producer publishes floodgate events to Kafka from Go programs.
//
// A Publisher validates and encodes each event.Event, keys the message by
// Event.Key ("<kind>:<subject>") and places it with the murmur2 partitioner
// of Java's default producer, so Go, Java and librdkafka
// (partitioner=murmur2_random) producers agree on where a subject lives
// (Partition computes it).
//
// Memory is bounded: at most Config.MaxBuffered events are in flight.
// Publish waits for room (back-pressure) until its context ends, or returns
// ErrBufferFull when Config.NonBlocking is set. Kafka errors are never
// dropped: the synchronous Publish (the default) returns them; with
// Config.Async they are counted in Stats, reported by Err and returned by
// Close.
//
//	p, err := producer.New(producer.Config{Brokers: []string{"127.0.0.1:19092"}})
//	if err != nil {
//		return err
//	}
//	defer func() { err = errors.Join(err, p.Close()) }()
//	evs := event.Split("login_failed", time.Now(), map[string]string{"ip": ip, "email": email})
//	if err := p.Publish(ctx, evs...); err != nil {
//		return fmt.Errorf("publish login_failed: %w", err)
//	}
//
// EnsureTopics creates the topics for a program that does not run
// `floodgate topics`.
//
// This package is part of floodgate's public API (with event, and the
// limiter's limitapi, limiterclient and limitermw): a service that emits
// access events imports it; everything it builds on is internal.
package producer

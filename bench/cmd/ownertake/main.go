// Command ownertake measures the ceiling of stage B's strict takes
// (docs/architecture.md, "Next, not built: the owner answers lookups")
// before anyone builds them: an Envoy RLS server that answers each take
// from memory — an exact sliding window per subject, 1m over seconds and
// 1h over minutes as make bench's bench_strict rule — and answers only once
// the take's event is in Kafka (a kafka-go Writer, acks=all, concurrent
// takes batched over --linger). Everything a real owner adds is left out
// (loading copies, the overlay, routing, fencing), so its figures bound
// from above what stage B could reach on this machine. Run it beside
// `floodgate aggregator` on the topic (which then counts the events in
// memory, as stage B's owner would) and `floodbench rls-load` against it.
//
//	go run ./bench/cmd/ownertake -addr 127.0.0.1:47102 -topic floodgate.ownertake
//
// docs/profiles.md ("Stage B's ceiling") has the figures.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/maphash"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/segmentio/kafka-go"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/decide"
	"github.com/floodgate-dev/floodgate/internal/topics"
	"github.com/floodgate-dev/floodgate/internal/window"
	"google.golang.org/grpc"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:47102", "RLS listen address")
	brokers := flag.String("brokers", envOr("FLOODGATE_BROKERS", "127.0.0.1:19092"), "Kafka brokers")
	topic := flag.String("topic", "floodgate.ownertake", "events topic (created by the caller)")
	linger := flag.Duration("linger", time.Millisecond, "how long a produce batch waits to fill")
	limit := flag.Int64("limit", 1_000_000_000, "events per minute and per hour")
	noProduce := flag.Bool("no-produce", false, "answer from memory alone (the part that is not Kafka's)")
	journal := flag.String("journal", "", "key prefix: journal each take in its slot's take stream in Redis (one pipeline per round of takes) instead of producing it; the aggregator of that prefix relays them to Kafka")
	redisAddr := flag.String("redis-addr", envOr("FLOODGATE_REDIS_ADDR", "127.0.0.1:6379"), "Redis, with -journal")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *addr, strings.Split(*brokers, ","), *topic, *linger, *limit, *noProduce, *journal, *redisAddr); err != nil {
		fmt.Fprintln(os.Stderr, "ownertake:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, addr string, brokers []string, topic string, linger time.Duration, limit int64, noProduce bool, journal, redisAddr string) error {
	w := &kafka.Writer{
		Addr: kafka.TCP(brokers...), Topic: topic, Balancer: &kafka.Murmur2Balancer{},
		RequiredAcks: kafka.RequireAll, BatchTimeout: linger, BatchSize: 1000, WriteTimeout: 10 * time.Second,
	}
	defer w.Close()
	s := &server{w: w, limit: limit, seed: maphash.MakeSeed(), noProduce: noProduce}
	if journal != "" {
		s.journal = make(chan jtake, 1024)
		go journalLoop(ctx, redis.NewClient(&redis.Options{Addr: redisAddr}), window.Keys{Prefix: journal}, s.journal)
	}
	for i := range s.shards {
		s.shards[i].subs = map[string]*windows{}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	srv := grpc.NewServer(decide.RLSServerOptions(decide.DefaultMaxRequestBytes, decide.DefaultMaxConcurrentStreams)...)
	rlsv3.RegisterRateLimitServiceServer(srv, s)
	go func() { <-ctx.Done(); srv.GracefulStop() }()
	slog.Info("ownertake serving", "addr", ln.Addr().String(), "topic", topic, "linger", linger)
	if err := srv.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// server answers takes as a partition owner would: a lock per shard (a
// partition), the windows in memory, durable before the answer.
type server struct {
	rlsv3.UnimplementedRateLimitServiceServer
	w         *kafka.Writer
	noProduce bool
	journal   chan jtake
	limit     int64
	seed      maphash.Seed
	shards    [12]shard
}

type shard struct {
	mu   sync.Mutex
	subs map[string]*windows
}

// windows are one subject's exact 1m (per second) and 1h (per minute)
// sliding windows.
type windows struct {
	sec, min [60]int64
	secAt    [60]int64 // the second each sec slot holds
	minAt    [60]int64
}

func (w *windows) sums(now int64) (m, h int64) {
	for i := range w.sec {
		if now-w.secAt[i] < 60 {
			m += w.sec[i]
		}
	}
	for i := range w.min {
		if now/60-w.minAt[i] < 60 {
			h += w.min[i]
		}
	}
	return m, h
}

func (w *windows) add(now, n int64) {
	if s := now % 60; w.secAt[s] != now {
		w.secAt[s], w.sec[s] = now, 0
	}
	w.sec[now%60] += n
	if m := now / 60; w.minAt[m%60] != m {
		w.minAt[m%60], w.min[m%60] = m, 0
	}
	w.min[(now/60)%60] += n
}

func (s *server) ShouldRateLimit(ctx context.Context, in *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	n := int64(max(in.GetHitsAddend(), 1))
	now := time.Now()
	sec := now.Unix()
	st := make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(in.GetDescriptors()))
	msgs := make([]kafka.Message, 0, len(st))
	for i, d := range in.GetDescriptors() {
		es := d.GetEntries()
		if len(es) != 1 {
			return nil, errors.New("one entry per descriptor")
		}
		kind, subject := es[0].GetKey(), es[0].GetValue()
		key := kind + ":" + subject
		sh := &s.shards[maphash.String(s.seed, key)%uint64(len(s.shards))]
		sh.mu.Lock()
		w := sh.subs[key]
		if w == nil {
			w = &windows{}
			sh.subs[key] = w
		}
		m, h := w.sums(sec)
		ok := m+n <= s.limit && h+n <= s.limit
		if ok {
			w.add(sec, n)
		}
		sh.mu.Unlock()
		if !ok {
			st[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OVER_LIMIT}
			continue
		}
		st[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		v, err := event.Encode(event.Event{ID: event.NewID(), Action: in.GetDomain(), Kind: kind, Subject: subject, TS: now, N: n})
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, kafka.Message{Key: []byte(key), Value: v})
	}
	if err := s.record(ctx, msgs); err != nil {
		return nil, err
	}
	overall := rlsv3.RateLimitResponse_OK
	for _, x := range st {
		if x.Code != rlsv3.RateLimitResponse_OK {
			overall = rlsv3.RateLimitResponse_OVER_LIMIT
		}
	}
	return &rlsv3.RateLimitResponse{OverallCode: overall, Statuses: st}, nil
}

// record makes the admitted takes' events durable as the flags choose,
// before the answer.
func (s *server) record(ctx context.Context, msgs []kafka.Message) error {
	switch {
	case len(msgs) == 0 || s.noProduce:
		return nil
	case s.journal != nil:
		done := make(chan error, 1)
		s.journal <- jtake{msgs: msgs, done: done}
		if err := <-done; err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		return nil
	}
	if err := s.w.WriteMessages(ctx, msgs...); err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	return nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// jtake is a take's events waiting for the journal's next round.
type jtake struct {
	msgs []kafka.Message
	done chan error
}

// journalLoop appends the takes that wait to their slots' take streams, one
// pipeline per round: a round leaves as soon as the last one is answered,
// with whatever queued meanwhile (as strict.Taker sends its script runs).
func journalLoop(ctx context.Context, rdb *redis.Client, keys window.Keys, in <-chan jtake) {
	for {
		var round []jtake
		select {
		case <-ctx.Done():
			return
		case t := <-in:
			round = append(round, t)
		}
	fill:
		for len(round) < 256 {
			select {
			case t := <-in:
				round = append(round, t)
			default:
				break fill
			}
		}
		pipe := rdb.Pipeline()
		for _, t := range round {
			for _, m := range t.msgs {
				part := topics.Partition(m.Key, 12)
				pipe.XAdd(ctx, &redis.XAddArgs{Stream: keys.Takes(part), Values: []any{string(m.Key), strconv.Itoa(len(m.Key)) + ":" + string(m.Key) + string(m.Value)}})
			}
		}
		_, err := pipe.Exec(ctx)
		for _, t := range round {
			t.done <- err
		}
	}
}

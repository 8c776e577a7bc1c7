package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"floodgate/limiter"
	"floodgate/live"
	"floodgate/producer"
	"floodgate/rules"
	"floodgate/window"
)

// OwnerTakesFlags turn on stage B's strict takes: this aggregator answers
// the strict takes of the partitions it owns, from its memory, over the
// limiter's surfaces (docs/limiter.md, "Owner takes").
type OwnerTakesFlags struct {
	OwnerTakes         bool          `name:"owner-takes" env:"FLOODGATE_OWNER_TAKES" help:"Answer strict takes of the owned partitions from this process's memory (needs write-back; the limiter's --rls-mode take must not run beside it). Takes of partitions owned elsewhere are denied with a retry."`
	TakesHTTPAddr      string        `name:"takes-http-addr" env:"FLOODGATE_TAKES_HTTP_ADDR" default:"127.0.0.1:8082" help:"With --owner-takes: Connect/gRPC, /v1/take, /v1/check, /healthz, /readyz."`
	TakesRLSAddr       string        `name:"takes-rls-addr" env:"FLOODGATE_TAKES_RLS_ADDR" default:"127.0.0.1:8083" help:"With --owner-takes: Envoy RateLimitService in take mode; \"off\" disables."`
	TakesTimeout       time.Duration `name:"takes-timeout" env:"FLOODGATE_TAKES_TIMEOUT" default:"250ms" help:"With --owner-takes: budget of one take (its loads and its take stream round); past it the take is denied."`
	TakesAuthTokenFile string        `name:"takes-auth-token-file" env:"FLOODGATE_TAKES_AUTH_TOKEN_FILE" help:"With --owner-takes: file holding the bearer token the take surfaces require (empty: none)."`
	TakesRelayLinger   time.Duration `name:"takes-relay-linger" env:"FLOODGATE_TAKES_RELAY_LINGER" default:"200ms" help:"With --owner-takes: pause of each partition's take relay after publishing a partial batch (the relay's produce requests: a take's answer never waits for them)."`
	TakesPublishLinger time.Duration `name:"takes-publish-linger" env:"FLOODGATE_TAKES_PUBLISH_LINGER" default:"50ms" help:"With --owner-takes: how long the events of a take's non-strict subjects may wait to share a produce request."`
	TakesTLSCert       string        `name:"takes-tls-cert" env:"FLOODGATE_TAKES_TLS_CERT" help:"With --owner-takes: PEM certificate (chain) the take surfaces serve; with --takes-tls-key, they speak TLS only."`
	TakesTLSKey        string        `name:"takes-tls-key" env:"FLOODGATE_TAKES_TLS_KEY" help:"PEM key of --takes-tls-cert."`
	TakesTLSClientCA   string        `name:"takes-tls-client-ca" env:"FLOODGATE_TAKES_TLS_CLIENT_CA" help:"PEM CA(s): the take surfaces require client certificates signed by them (mTLS)."`
}

// takesSink is the owner-takes part of the live sink's configuration.
func (c *AggregatorCmd) takesSink(rdb live.TakesRedis, cl *kafka.Client) *live.TakesConfig {
	if !c.OwnerTakes {
		return nil
	}
	return &live.TakesConfig{Redis: rdb, Bounds: func(ctx context.Context, topic string, partition int) (int64, int64, error) {
		return bounds(ctx, cl, topic, partition)
	}}
}

// bounds are the partition's first offset and last stable offset: what a
// read_committed consumer, as the aggregator is, can count up to.
func bounds(ctx context.Context, cl *kafka.Client, topic string, partition int) (first, end int64, err error) {
	res, err := cl.ListOffsets(ctx, &kafka.ListOffsetsRequest{
		Topics:         map[string][]kafka.OffsetRequest{topic: {kafka.FirstOffsetOf(partition), kafka.LastOffsetOf(partition)}},
		IsolationLevel: kafka.ReadCommitted,
	})
	if err != nil {
		return 0, 0, fmt.Errorf("list offsets %s/%d: %w", topic, partition, err)
	}
	for _, po := range res.Topics[topic] {
		if po.Partition == partition {
			if po.Error != nil {
				return 0, 0, fmt.Errorf("list offsets %s/%d: %w", topic, partition, po.Error)
			}
			return po.FirstOffset, po.LastOffset, nil
		}
	}
	return 0, 0, fmt.Errorf("list offsets %s/%d: no answer for the partition", topic, partition)
}

// takesServer is the limiter surfaces answering owner takes, closed on
// failure (a take this owner cannot answer is denied with a retry), with
// the producer of the takes' non-strict events; nil without --owner-takes.
func (c *AggregatorCmd) takesServer(sink *live.Sink, store *window.Store, current func() *rules.Set, reg prometheus.Registerer, gatherer prometheus.Gatherer, logger *slog.Logger) (*limiter.Server, *producer.Publisher, error) {
	if !c.OwnerTakes {
		return nil, nil, nil
	}
	token, err := secret("takes-auth-token", "", c.TakesAuthTokenFile)
	if err != nil {
		return nil, nil, err
	}
	tlsFlags := ListenTLSFlags{TLSCert: c.TakesTLSCert, TLSKey: c.TakesTLSKey, TLSClientCA: c.TakesTLSClientCA}
	tlsCfg, err := tlsFlags.serverTLS(logger)
	if err != nil {
		return nil, nil, err
	}
	if token == "" && (beyondLoopback(c.TakesHTTPAddr) || c.TakesRLSAddr != "off" && beyondLoopback(c.TakesRLSAddr)) {
		logger.Warn("owner takes listen beyond loopback without a token: anyone who reaches them may take; set --takes-auth-token-file",
			"http", c.TakesHTTPAddr, "rls", c.TakesRLSAddr)
	}
	pub, err := producer.New(producer.Config{
		Brokers: c.Brokers, Security: c.cluster.Security, Topic: c.Topic, Async: true, NonBlocking: true, BatchTimeout: c.TakesPublishLinger,
		Logger: logger.With("component", "producer"),
	})
	if err != nil {
		return nil, nil, err
	}
	lim, err := limiter.New(limiter.Config{
		Store: store, Taker: sink, Rules: current, Publisher: pub,
		Timeout: c.TakesTimeout, FailureMode: limiter.FailClosed, Logger: logger.With("component", "owner-takes"), Registerer: reg,
	})
	if err != nil {
		return nil, nil, errors.Join(err, pub.Close())
	}
	srv, err := limiter.NewServer(limiter.ServerConfig{
		Limiter: lim, HTTPAddr: c.TakesHTTPAddr, RLSAddr: c.TakesRLSAddr, RLSMode: limiter.RLSTake, RLSNoOKHeaders: true,
		AuthToken: token, MaxRequestBytes: limiter.DefaultMaxRequestBytes, TLS: tlsCfg, Gatherer: gatherer, Logger: logger.With("component", "owner-takes"),
	})
	if err != nil {
		return nil, nil, errors.Join(err, pub.Close())
	}
	return srv, pub, nil
}

package aggregator

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/internal/decide"
	"github.com/floodgate-dev/floodgate/internal/live"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/secretfile"
	"github.com/floodgate-dev/floodgate/internal/takeroute"
	"github.com/floodgate-dev/floodgate/internal/tlsfiles"
	"github.com/floodgate-dev/floodgate/internal/window"
	"github.com/floodgate-dev/floodgate/producer"
)

// OwnerTakesFlags turn on stage B's strict takes: this aggregator answers
// the strict takes of the partitions it owns, from its memory, over the
// limiter's surfaces (docs/takes.md, "Owner takes").
type OwnerTakesFlags struct {
	OwnerTakes         bool          `name:"owner-takes" env:"FLOODGATE_OWNER_TAKES" help:"Answer strict takes of the owned partitions from this process's memory (needs write-back; the limiter's --rls-mode take must not run beside it). Takes of partitions owned elsewhere are denied with a retry."`
	TakesHTTPAddr      string        `name:"takes-http-addr" env:"FLOODGATE_TAKES_HTTP_ADDR" default:"127.0.0.1:8082" help:"With --owner-takes: Connect/gRPC, /v1/take, /v1/check, /healthz, /readyz."`
	TakesRLSAddr       string        `name:"takes-rls-addr" env:"FLOODGATE_TAKES_RLS_ADDR" default:"127.0.0.1:8083" help:"With --owner-takes: Envoy RateLimitService in take mode; \"off\" disables."`
	TakesTimeout       time.Duration `name:"takes-timeout" env:"FLOODGATE_TAKES_TIMEOUT" default:"250ms" help:"With --owner-takes: budget of one take (its loads and its take stream round); past it the take is denied."`
	TakesAuthTokenFile string        `name:"takes-auth-token-file" env:"FLOODGATE_TAKES_AUTH_TOKEN_FILE" help:"With --owner-takes: file holding the bearer token the take surfaces require (empty: none)."`
	TakesRelayLinger   time.Duration `name:"takes-relay-linger" env:"FLOODGATE_TAKES_RELAY_LINGER" default:"200ms" help:"With --owner-takes: pause of each partition's take relay after publishing a partial batch (the relay's produce requests: a take's answer never waits for them)."`
	TakesPublishLinger time.Duration `name:"takes-publish-linger" env:"FLOODGATE_TAKES_PUBLISH_LINGER" default:"50ms" help:"With --owner-takes: how long the events of a take's non-strict subjects may wait to share a produce request."`
	TakesPeerAddr      string        `name:"takes-peer-addr" env:"FLOODGATE_TAKES_PEER_ADDR" default:"127.0.0.1:8084" help:"With --owner-takes: where the other members forward the takes of the partitions this one owns (their owner records name it); \"off\": no forwarding either way."`
	TakesPeerTokenFile string        `name:"takes-peer-token-file" env:"FLOODGATE_TAKES_PEER_TOKEN_FILE" help:"With --owner-takes: file holding the members' peer credential, the bearer token forwarded takes carry and the peer endpoint requires; the same on every member, and not the take surfaces' token. Required when --takes-peer-addr listens beyond loopback or --takes-auth-token-file is set."`
	TakesAdvertise     string        `name:"takes-advertise" env:"FLOODGATE_TAKES_ADVERTISE" help:"With --owner-takes: the address the owner records give for --takes-peer-addr, as the other members reach it (default: the address it listens on)."`
	TakesPeerCA        string        `name:"takes-peer-ca" env:"FLOODGATE_TAKES_PEER_CA" help:"With --owner-takes and TLS: PEM CA(s) the peers' certificates are checked against, besides the system's."`
	TakesTLSCert       string        `name:"takes-tls-cert" env:"FLOODGATE_TAKES_TLS_CERT" help:"With --owner-takes: PEM certificate (chain) the take surfaces serve; with --takes-tls-key, they speak TLS only."`
	TakesTLSKey        string        `name:"takes-tls-key" env:"FLOODGATE_TAKES_TLS_KEY" help:"PEM key of --takes-tls-cert."`
	TakesTLSClientCA   string        `name:"takes-tls-client-ca" env:"FLOODGATE_TAKES_TLS_CLIENT_CA" help:"PEM CA(s): the take surfaces require client certificates signed by them (mTLS)."`
}

// takesSink is the owner-takes part of the live sink's configuration.
func (c *Config) takesSink(rdb live.TakesRedis, cl *kafka.Client, advertise string) *live.TakesConfig {
	if !c.OwnerTakes {
		return nil
	}
	return &live.TakesConfig{Redis: rdb, Advertise: advertise, Bounds: func(ctx context.Context, topic string, partition int) (int64, int64, error) {
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

// ownerTakes is what --owner-takes serves: the limiter's surfaces over
// the live sink (through a router that forwards takes of partitions owned
// elsewhere), the peer endpoint that answers forwarded takes, and the
// producer of the takes' non-strict events.
type ownerTakes struct {
	srv  *decide.Server
	pub  *producer.Publisher
	peer *http.Server
	ln   net.Listener // the peer endpoint's; nil: off
	tls  bool
}

// peerListener listens for forwarded takes and returns the address owner
// records give (nil, "" with --takes-peer-addr off or without
// --owner-takes).
func (c *Config) peerListener() (net.Listener, string, error) {
	if !c.OwnerTakes || c.TakesPeerAddr == "off" {
		return nil, "", nil
	}
	ln, err := net.Listen("tcp", c.TakesPeerAddr)
	if err != nil {
		return nil, "", fmt.Errorf("owner takes peer listener %s: %w", c.TakesPeerAddr, err)
	}
	adv := c.TakesAdvertise
	if adv == "" {
		adv = ln.Addr().String()
	}
	return ln, adv, nil
}

// takesServer builds the owner takes' servers; nil without --owner-takes.
func (c *Config) takesServer(sink *live.Sink, rdb takeroute.Redis, store *window.Store, ln net.Listener, advertise string, current func() *rules.Set, reg *prometheus.Registry, logger *slog.Logger) (*ownerTakes, error) {
	if !c.OwnerTakes {
		return nil, nil
	}
	token, err := secretfile.Read("takes-auth-token", "", c.TakesAuthTokenFile)
	if err != nil {
		return nil, err
	}
	tlsFlags := tlsfiles.ListenFlags{TLSCert: c.TakesTLSCert, TLSKey: c.TakesTLSKey, TLSClientCA: c.TakesTLSClientCA}
	tlsCfg, err := tlsFlags.ServerTLS(logger)
	if err != nil {
		return nil, err
	}
	peerToken, err := secretfile.Read("takes-peer-token", "", c.TakesPeerTokenFile)
	if err != nil {
		return nil, err
	}
	if err := checkPeerToken(token, peerToken, ln); err != nil {
		return nil, err
	}
	if ln != nil && tlsCfg == nil && tlsfiles.BeyondLoopback(ln.Addr().String()) {
		logger.Warn("owner takes: the peer endpoint listens beyond loopback without TLS: the peer credential crosses the network in clear; set --takes-tls-cert and --takes-tls-key",
			"peer", ln.Addr().String())
	}
	if token == "" && (tlsfiles.BeyondLoopback(c.TakesHTTPAddr) || c.TakesRLSAddr != "off" && tlsfiles.BeyondLoopback(c.TakesRLSAddr)) {
		logger.Warn("owner takes listen beyond loopback without a token: anyone who reaches them may take; set --takes-auth-token-file",
			"http", c.TakesHTTPAddr, "rls", c.TakesRLSAddr)
	}
	plan := func(sub window.Subject, values map[string]string) (window.EvalQuery, error) {
		return decide.TakeQuery(current(), sub, values)
	}
	router, err := c.takeRouter(sink, rdb, store, advertise, peerToken, plan, tlsCfg != nil, reg, logger)
	if err != nil {
		return nil, err
	}
	pub, err := producer.New(producer.Config{
		Brokers: c.Brokers, Security: c.cluster.Security, Topic: c.Topic, Async: true, NonBlocking: true, BatchTimeout: c.TakesPublishLinger,
		Logger: logger.With("component", "producer"),
	})
	if err != nil {
		return nil, err
	}
	lim, err := decide.New(decide.Config{
		Store: store, Taker: router, Rules: current, Publisher: pub,
		Timeout: c.TakesTimeout, FailureMode: decide.FailClosed, Logger: logger.With("component", "owner-takes"), Registerer: reg,
	})
	if err != nil {
		return nil, errors.Join(err, pub.Close())
	}
	srv, err := decide.NewServer(decide.ServerConfig{
		Limiter: lim, HTTPAddr: c.TakesHTTPAddr, RLSAddr: c.TakesRLSAddr, RLSMode: decide.RLSTake, RLSNoOKHeaders: true,
		AuthToken: token, MaxRequestBytes: decide.DefaultMaxRequestBytes, TLS: tlsCfg, Gatherer: reg, Logger: logger.With("component", "owner-takes"),
	})
	if err != nil {
		return nil, errors.Join(err, pub.Close())
	}
	ot := &ownerTakes{srv: srv, pub: pub, ln: ln, tls: tlsCfg != nil}
	if ln != nil {
		mux := http.NewServeMux()
		mux.Handle(takeroute.Path, router.Handler())
		ot.peer = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, IdleTimeout: time.Minute, TLSConfig: tlsCfg}
	}
	return ot, nil
}

// checkPeerToken refuses a peer credential that take clients could hold
// or that is missing where one is needed. Forwarded takes append the
// owner's events, and reserve room until their commit: only members may
// send them. Beyond loopback anyone on the network could; on loopback with
// take surfaces that require a token, any local process could take past
// that token. The take surfaces' token would not do either way: every take
// client holds it.
func checkPeerToken(token, peerToken string, ln net.Listener) error {
	switch {
	case peerToken != "" && peerToken == token:
		return errors.New("--takes-peer-token-file holds the same secret as --takes-auth-token-file: take clients would hold the members' peer credential; give each its own")
	case ln == nil || peerToken != "":
		return nil
	case tlsfiles.BeyondLoopback(ln.Addr().String()):
		return fmt.Errorf("--takes-peer-addr %s listens beyond loopback: it needs --takes-peer-token-file, the members' own credential (or --takes-peer-addr off)", ln.Addr())
	case token != "":
		return errors.New("--takes-auth-token-file is set: the peer endpoint (--takes-peer-addr) needs --takes-peer-token-file too, the members' own credential, or any local process could take past the token (or --takes-peer-addr off)")
	}
	return nil
}

// takeRouter forwards takes to their partitions' owners; with the peer
// endpoint off, it forwards nothing (every take is this process's or
// denied).
func (c *Config) takeRouter(sink *live.Sink, rdb takeroute.Redis, store *window.Store, advertise, peerToken string, plan takeroute.Planner, tlsOn bool, reg prometheus.Registerer, logger *slog.Logger) (*takeroute.Router, error) {
	cfg := takeroute.Config{Local: sink, Redis: rdb, Store: store, Plan: plan, Self: advertise, Token: peerToken, Registerer: reg, Logger: logger.With("component", "take-router")}
	if tlsOn {
		cfg.Scheme = "https"
		tc, err := c.peerClientTLS()
		if err != nil {
			return nil, err
		}
		cfg.Client = takeroute.NewClient(tc)
	}
	return takeroute.New(cfg)
}

// peerClientTLS is how a member reaches the others' peer endpoints over
// TLS: their certificates checked against the system's roots and
// --takes-peer-ca; with --takes-tls-client-ca the endpoints require a client
// certificate, and the member presents its own (--takes-tls-cert, which must
// then allow client authentication too), reloaded as it rotates.
func (c *Config) peerClientTLS() (*tls.Config, error) {
	roots, err := x509.SystemCertPool()
	if err != nil {
		roots = x509.NewCertPool()
	}
	if c.TakesPeerCA != "" {
		pem, err := os.ReadFile(c.TakesPeerCA)
		if err != nil {
			return nil, fmt.Errorf("--takes-peer-ca: %w", err)
		}
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--takes-peer-ca %s: no PEM certificate", c.TakesPeerCA)
		}
	}
	tc := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if c.TakesTLSClientCA != "" {
		own, err := tlsfiles.Client(tlsfiles.ClientFiles{Cert: c.TakesTLSCert, Key: c.TakesTLSKey})
		if err != nil {
			return nil, fmt.Errorf("--takes-tls-cert as the peers' client certificate: %w", err)
		}
		tc.GetClientCertificate = own.GetClientCertificate
	}
	return tc, nil
}

// start listens and serves.
func (o *ownerTakes) start(logger *slog.Logger) error {
	if err := o.srv.Start(); err != nil {
		return err
	}
	peer := ""
	if o.peer != nil {
		peer = o.ln.Addr().String()
		go func() {
			serve := func() error { return o.peer.Serve(o.ln) }
			if o.tls {
				serve = func() error { return o.peer.ServeTLS(o.ln, "", "") }
			}
			if err := serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error("owner takes: the peer endpoint stopped; takes forwarded here fail", "err", err)
			}
		}()
	}
	logger.Info("owner takes served", "http", o.srv.HTTPAddr(), "rls", o.srv.RLSAddr(), "peer", peer)
	return nil
}

// stop drains the servers and closes the producer.
func (o *ownerTakes) stop(ctx context.Context, logger *slog.Logger) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := o.srv.Shutdown(sctx); err != nil {
		logger.Warn("owner takes: shutdown", "err", err)
	}
	if o.peer != nil {
		if err := o.peer.Shutdown(sctx); err != nil {
			logger.Warn("owner takes: peer endpoint shutdown", "err", err)
		}
	}
	closeLogged(logger, "owner takes producer", o.pub)
}

package benchmark

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/bench/harness"
	"github.com/floodgate-dev/floodgate/bench/rlsload"
	"github.com/floodgate-dev/floodgate/internal/kafkaconn"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/stacktest/childproc"
	"github.com/floodgate-dev/floodgate/internal/tlsfiles"
	"github.com/floodgate-dev/floodgate/internal/topics"
)

// secureProfile is scripts/stack's secure profile (`scripts/stack env
// --secure`): TLS-only Redis with an ACL user, a SASL_SSL-only broker
// (SCRAM-SHA-512), every secret a file.
type secureProfile struct {
	dir, brokers, redisAddr string
}

func (s secureProfile) file(parts ...string) string {
	return filepath.Join(append([]string{s.dir}, parts...)...)
}

// env is floodgate's settings for the profile (its brokers and Redis go in
// the arguments, as the plain runs give theirs).
func (s secureProfile) env() []string {
	return []string{
		"FLOODGATE_KAFKA_TLS=true", "FLOODGATE_KAFKA_TLS_CA=" + s.file("tls", "ca.pem"),
		"FLOODGATE_KAFKA_SASL_MECHANISM=scram-sha-512", "FLOODGATE_KAFKA_SASL_USERNAME=floodgate",
		"FLOODGATE_KAFKA_SASL_PASSWORD_FILE=" + s.file("secrets", "kafka-password"),
		"FLOODGATE_REDIS_TLS=true", "FLOODGATE_REDIS_TLS_CA=" + s.file("tls", "ca.pem"),
		"FLOODGATE_REDIS_USERNAME=floodgate", "FLOODGATE_REDIS_PASSWORD_FILE=" + s.file("secrets", "redis-password"),
	}
}

func (s secureProfile) kafka() (kafkaconn.Cluster, error) {
	f := kafkaconn.Flags{Brokers: []string{s.brokers}, KafkaTLSCA: s.file("tls", "ca.pem"), KafkaSASLMechanism: "scram-sha-512",
		KafkaSASLUsername: "floodgate", KafkaSASLPasswordFile: s.file("secrets", "kafka-password")}
	sec, err := f.KafkaSecurity()
	return kafkaconn.Cluster{Brokers: f.Brokers, Security: sec}, err
}

func (s secureProfile) redis() (*redis.Client, error) {
	cfg, err := tlsfiles.Client(tlsfiles.ClientFiles{CA: s.file("tls", "ca.pem")})
	if err != nil {
		return nil, err
	}
	pw, err := os.ReadFile(s.file("secrets", "redis-password"))
	if err != nil {
		return nil, err
	}
	return redis.NewClient(&redis.Options{Addr: s.redisAddr, Username: "floodgate", Password: strings.TrimSpace(string(pw)), TLSConfig: cfg}), nil
}

// secure: the producer and the live aggregator on the secure profile,
// beside the plain figures of this run (the producer and live steps):
// what TLS and SASL cost. Same sizes, same arguments, same machine.
func (b *bench) secure(ctx context.Context) error {
	if b.cfg.SecureDir == "" {
		return errors.New("no secure profile (scripts/stack up --secure; FLOODGATE_SECURE_DIR)")
	}
	sp := secureProfile{dir: b.cfg.SecureDir, brokers: b.cfg.SecureBrokers, redisAddr: b.cfg.SecureRedisAddr}
	kc, err := sp.kafka()
	if err != nil {
		return err
	}
	rdb, err := sp.redis()
	if err != nil {
		return err
	}
	defer rdb.Close()
	var made []string
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := topics.DeleteOn(cctx, kc, made...); err != nil {
			b.log.Warn("bench: delete secure topics", "err", err)
		}
	}()
	for i := 0; i < b.cfg.Runs; i++ {
		t := "floodgate.bench." + b.id + ".secure" + strconv.Itoa(i)
		specs := []topics.Spec{{Name: t, Partitions: b.cfg.PartCount}, {Name: t + ".dlq", Partitions: 1}, {Name: t + ".decisions", Partitions: 1}}
		if _, err := topics.EnsureOn(ctx, kc, specs...); err != nil {
			return err
		}
		made = append(made, t, t+".dlq", t+".decisions")
		args := b.produceArgs([]string{sp.brokers}, t, b.cfg.Events, i+1)
		start := time.Now()
		p, err := childproc.Run(ctx, childproc.Config{Name: "secure-produce-" + strconv.Itoa(i), Bin: b.cfg.Bin, Args: args, Env: sp.env(), LogDir: b.cfg.WorkDir})
		wall := time.Since(start)
		if err != nil {
			return err
		}
		b.res.SecureProduce = append(b.res.SecureProduce, producedRate(p, b.cfg.Events, wall))

		addr, err := childproc.FreePort()
		if err != nil {
			return err
		}
		prefix := "bench" + b.id + "s" + strconv.Itoa(i)
		aargs := b.aggregatorArgs(target{brokers: []string{sp.brokers}, redis: []string{sp.redisAddr}}, t, "bench-"+b.id+"-secure-"+strconv.Itoa(i), prefix, b.rules, addr)
		ap, err := childproc.Start(ctx, childproc.Config{Name: "secure-aggregator-" + strconv.Itoa(i), Bin: b.cfg.Bin, Args: aargs, Env: sp.env(), LogDir: b.cfg.WorkDir})
		if err != nil {
			return err
		}
		rate, err := waitCounted(ctx, []*childproc.Proc{ap}, []string{"http://" + addr + "/metrics"}, "floodgate_aggregator_messages_in_total", float64(b.cfg.Events))
		err = errors.Join(err, ap.Stop(15*time.Second), stacktest.DeletePrefix(ctx, rdb, prefix))
		if err != nil {
			return fmt.Errorf("secure live run %d: %w", i, err)
		}
		b.res.SecureLive = append(b.res.SecureLive, rate)
	}
	return b.secureChecks(ctx, sp, kc)
}

// secureChecks: allowed checks (one limit) over Envoy RLS at c=16, against
// a plain limiter on the default profile and then a limiter serving RLS
// over TLS on the secure profile (Redis over TLS as its ACL user), one
// after the other in this step, so that both see the same machine.
func (b *bench) secureChecks(ctx context.Context, sp secureProfile, kc kafkaconn.Cluster) error {
	rulesPath, _, err := b.writeLookupRules()
	if err != nil {
		return err
	}
	conc := []int{16}
	// Plain.
	topic, err := b.topic("limplain")
	if err != nil {
		return err
	}
	prefix := "bench" + b.id + "lp"
	lim, err := b.startLimiter(ctx, target{brokers: b.cfg.Brokers, redis: []string{b.cfg.RedisAddr}}, "limiter-plain", topic, prefix, rulesPath, "check")
	if err != nil {
		return err
	}
	cl, err := rlsload.Dial(lim.rls, runtime.NumCPU())
	if err == nil {
		var runs []Lookup
		runs, err = b.measure(ctx, lim.Proc, lim.metrics(), "plain-allowed-one", false, cl.Op(shapeOne, rlsload.OK), conc, 0)
		b.res.SecurePlainChecks = append(b.res.SecurePlainChecks, runs...)
		err = errors.Join(err, cl.Close())
	}
	if err = errors.Join(err, lim.Stop(15*time.Second), stacktest.DeletePrefix(ctx, b.rdb, prefix)); err != nil {
		return fmt.Errorf("plain checks: %w", err)
	}

	// Secure: TLS on the limiter's listeners, Redis and Kafka as above.
	stopic := "floodgate.bench." + b.id + ".limsecure"
	if _, err := topics.EnsureOn(ctx, kc, topics.Spec{Name: stopic, Partitions: b.cfg.PartCount}); err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_ = topics.DeleteOn(cctx, kc, stopic)
	}()
	httpAddr, err := childproc.FreePort()
	if err != nil {
		return err
	}
	rlsAddr, err := childproc.FreePort()
	if err != nil {
		return err
	}
	sprefix := "bench" + b.id + "ls"
	args := []string{"limiter", "--http-addr", httpAddr, "--rls-addr", rlsAddr, "--rls-mode", "check",
		"--brokers", sp.brokers, "--topic", stopic, "--key-prefix", sprefix, "--rules", rulesPath, "--redis-addr", sp.redisAddr,
		"--tls-cert", sp.file("tls", "server.pem"), "--tls-key", sp.file("tls", "server.key")}
	p, err := childproc.Start(ctx, childproc.Config{Name: "limiter-secure", Bin: b.cfg.Bin, Args: args, Env: sp.env(), LogDir: b.cfg.WorkDir})
	if err != nil {
		return err
	}
	defer func() { _ = p.Stop(15 * time.Second) }()
	tlsCfg, err := tlsfiles.Client(tlsfiles.ClientFiles{CA: sp.file("tls", "ca.pem")})
	if err != nil {
		return err
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}, Timeout: 2 * time.Second}
	defer hc.CloseIdleConnections()
	for deadline := time.Now().Add(time.Minute); ; {
		resp, err := hc.Get("https://" + httpAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) || !p.Alive() {
			return fmt.Errorf("secure limiter not ready: %v; log: %s", err, p.Tail(5))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	scl, err := rlsload.DialTLS(rlsAddr, runtime.NumCPU(), tlsCfg)
	if err != nil {
		return err
	}
	defer scl.Close()
	runs, err := b.measure(ctx, p, "", "secure-allowed-one", false, scl.Op(shapeOne, rlsload.OK), conc, 0)
	b.res.SecureChecks = append(b.res.SecureChecks, runs...)
	srdb, rerr := sp.redis()
	if rerr == nil {
		rerr = errors.Join(stacktest.DeletePrefix(ctx, srdb, sprefix), srdb.Close())
	}
	return errors.Join(err, rerr)
}

// renderSecure writes the secure-versus-plain table.
func renderSecure(w func(string, ...any), r *Results) {
	if len(r.SecureProduce) == 0 {
		return
	}
	w("\nThe secure profile (`scripts/stack up --secure`: Kafka SASL_SSL with SCRAM-SHA-512, Redis TLS with an ACL user) beside the plain one, same commands and sizes:\n\n")
	w("| what | plain | secure | secure ÷ plain | secure runs |\n|---|--:|--:|--:|---|\n")
	w("| producer events/s | %s | %s | %s | %s |\n", harness.Human(harness.Median(r.Produce)), harness.Human(harness.Median(r.SecureProduce)),
		ratio(harness.Median(r.SecureProduce), harness.Median(r.Produce)), runs(r.SecureProduce))
	w("| aggregator live events/s | %s | %s | %s | %s |\n", harness.Human(harness.Median(r.Live)), harness.Human(harness.Median(r.SecureLive)),
		ratio(harness.Median(r.SecureLive), harness.Median(r.Live)), runs(r.SecureLive))
	if len(r.SecureChecks) > 0 && len(r.SecurePlainChecks) > 0 {
		p, sc := r.SecurePlainChecks[0], r.SecureChecks[0]
		w("| allowed checks/s, Envoy RLS, c=%d (plain: h2c; secure: RLS over TLS) | %s | %s | %s | p99 plain %s, secure %s |\n",
			sc.Concurrency, harness.Human(p.PerSec), harness.Human(sc.PerSec), ratio(sc.PerSec, p.PerSec),
			rlsload.Latency(p.P99), rlsload.Latency(sc.P99))
	}
}

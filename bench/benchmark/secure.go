package benchmark

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"floodgate/bench/harness"
	"floodgate/kafkaconn"
	"floodgate/tlsfiles"
	"floodgate/topics"
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
		p, err := harness.Run(ctx, harness.ProcConfig{Name: "secure-produce-" + strconv.Itoa(i), Bin: b.cfg.Bin, Args: args, Env: sp.env(), LogDir: b.cfg.WorkDir})
		wall := time.Since(start)
		if err != nil {
			return err
		}
		b.res.SecureProduce = append(b.res.SecureProduce, producedRate(p, b.cfg.Events, wall))

		addr, err := harness.FreePort()
		if err != nil {
			return err
		}
		prefix := "bench" + b.id + "s" + strconv.Itoa(i)
		aargs := b.aggregatorArgs(target{brokers: []string{sp.brokers}, redis: []string{sp.redisAddr}}, t, "bench-"+b.id+"-secure-"+strconv.Itoa(i), prefix, addr)
		ap, err := harness.Start(ctx, harness.ProcConfig{Name: "secure-aggregator-" + strconv.Itoa(i), Bin: b.cfg.Bin, Args: aargs, Env: sp.env(), LogDir: b.cfg.WorkDir})
		if err != nil {
			return err
		}
		rate, err := waitCounted(ctx, []*harness.Proc{ap}, []string{"http://" + addr + "/metrics"}, "floodgate_aggregator_messages_in_total", float64(b.cfg.Events))
		err = errors.Join(err, ap.Stop(15*time.Second), harness.DeletePrefix(ctx, rdb, prefix))
		if err != nil {
			return fmt.Errorf("secure live run %d: %w", i, err)
		}
		b.res.SecureLive = append(b.res.SecureLive, rate)
	}
	return nil
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
	w("\nAllowed-check throughput over TLS is not measured yet.\n")
}

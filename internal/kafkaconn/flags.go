package kafkaconn

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-dev/floodgate/internal/secretfile"
	"github.com/floodgate-dev/floodgate/internal/tlsfiles"
)

// Flags are the command-line settings of a Kafka connection (kong tags,
// FLOODGATE_* environment fallbacks), shared by every binary that talks to
// Kafka: embed them in a command.
type Flags struct {
	Brokers               []string `name:"brokers" env:"FLOODGATE_BROKERS" default:"127.0.0.1:19092" sep:"," help:"Kafka bootstrap brokers, comma separated."`
	KafkaTLS              bool     `name:"kafka-tls" env:"FLOODGATE_KAFKA_TLS" help:"Connect to Kafka over TLS (implied by the other --kafka-tls-* flags)."`
	KafkaTLSCA            string   `name:"kafka-tls-ca" env:"FLOODGATE_KAFKA_TLS_CA" help:"PEM file of the CA(s) trusted for the brokers' certificates (default: the system's)."`
	KafkaTLSCert          string   `name:"kafka-tls-cert" env:"FLOODGATE_KAFKA_TLS_CERT" help:"PEM client certificate (mTLS), with --kafka-tls-key."`
	KafkaTLSKey           string   `name:"kafka-tls-key" env:"FLOODGATE_KAFKA_TLS_KEY" help:"PEM key of --kafka-tls-cert."`
	KafkaTLSServerName    string   `name:"kafka-tls-server-name" env:"FLOODGATE_KAFKA_TLS_SERVER_NAME" help:"Name the brokers' certificates must carry (default: the address dialled)."`
	KafkaSASLMechanism    string   `name:"kafka-sasl-mechanism" env:"FLOODGATE_KAFKA_SASL_MECHANISM" default:"none" enum:"none,plain,scram-sha-256,scram-sha-512" help:"SASL mechanism: none, plain, scram-sha-256, scram-sha-512."`
	KafkaSASLUsername     string   `name:"kafka-sasl-username" env:"FLOODGATE_KAFKA_SASL_USERNAME" help:"SASL username."`
	KafkaSASLPassword     string   `name:"kafka-sasl-password" env:"FLOODGATE_KAFKA_SASL_PASSWORD" help:"SASL password (prefer --kafka-sasl-password-file)."`
	KafkaSASLPasswordFile string   `name:"kafka-sasl-password-file" env:"FLOODGATE_KAFKA_SASL_PASSWORD_FILE" help:"File holding the SASL password (wins over --kafka-sasl-password)."`
	// PLAIN sends the password as it is: over a plaintext connection,
	// anyone on the path reads it. Refused unless said on purpose.
	KafkaSASLPlainInsecure bool `name:"kafka-sasl-plain-insecure" env:"FLOODGATE_KAFKA_SASL_PLAIN_INSECURE" help:"Allow --kafka-sasl-mechanism plain without --kafka-tls: the password crosses the network in clear (refused by default)."`
}

// ErrPlainInClear is in the chain of KafkaSecurity's error when SASL PLAIN
// is asked for without TLS and without --kafka-sasl-plain-insecure.
var ErrPlainInClear = errors.New("SASL PLAIN without TLS sends the password in clear")

// KafkaSecurity builds the TLS and SASL settings, reading the files now.
func (f *Flags) KafkaSecurity() (Security, error) {
	var sec Security
	if f.KafkaTLS || f.KafkaTLSCA != "" || f.KafkaTLSCert != "" || f.KafkaTLSServerName != "" {
		cfg, err := tlsfiles.Client(tlsfiles.ClientFiles{CA: f.KafkaTLSCA, Cert: f.KafkaTLSCert, Key: f.KafkaTLSKey, ServerName: f.KafkaTLSServerName})
		if err != nil {
			return sec, fmt.Errorf("kafka: %w", err)
		}
		sec.TLS = cfg
	}
	password, err := secretfile.Read("kafka-sasl-password", f.KafkaSASLPassword, f.KafkaSASLPasswordFile)
	if err != nil {
		return sec, err
	}
	if f.KafkaSASLMechanism != "" && f.KafkaSASLMechanism != "none" && (f.KafkaSASLUsername == "" || password == "") {
		return sec, fmt.Errorf("kafka: --kafka-sasl-mechanism %s needs --kafka-sasl-username and a password", f.KafkaSASLMechanism)
	}
	if sec.SASL, err = Mechanism(f.KafkaSASLMechanism, f.KafkaSASLUsername, password); err != nil {
		return sec, err
	}
	if sec.SASL != nil && sec.SASL.Name() == "PLAIN" && sec.TLS == nil && !f.KafkaSASLPlainInsecure {
		return Security{}, fmt.Errorf("kafka: %w: set --kafka-tls (or --kafka-sasl-plain-insecure to allow it on a network you trust)", ErrPlainInClear)
	}
	return sec, nil
}

// KafkaCluster returns the brokers and how to reach them, after checking
// that one of them accepts the connection (TLS, SASL) within 10 s: a
// refused handshake fails the start with its cause instead of being
// retried for ever by the clients.
func (f *Flags) KafkaCluster(ctx context.Context) (Cluster, error) {
	sec, err := f.KafkaSecurity()
	if err != nil {
		return Cluster{}, err
	}
	if err := sec.Check(ctx, f.Brokers, 10*time.Second); err != nil {
		return Cluster{}, err
	}
	return Cluster{Brokers: f.Brokers, Security: sec}, nil
}

// Package kafkaconn holds how floodgate's Kafka clients reach the brokers
// (TLS and SASL), so that every client of every process — producers,
// consumers, admin calls — connects the same way, and a broker that refuses
// the connection fails the process at start with a message that says why.
package kafkaconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
)

// Security is how to connect: TLS (nil: plaintext) and a SASL mechanism
// (nil: none). The zero value is a plaintext connection.
type Security struct {
	TLS  *tls.Config
	SASL sasl.Mechanism
}

// Transport sets t's TLS and SASL and returns it (for kafka.Client and
// kafka.Writer); a nil t is a new Transport.
func (s Security) Transport(t *kafka.Transport) *kafka.Transport {
	if t == nil {
		t = &kafka.Transport{}
	}
	t.TLS, t.SASL = s.TLS, s.SASL
	return t
}

// Dialer sets d's TLS and SASL and returns it (for kafka.Reader and
// consumer groups); a nil d is a new Dialer with kafka-go's defaults.
func (s Security) Dialer(d *kafka.Dialer) *kafka.Dialer {
	if d == nil {
		d = &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true}
	}
	d.TLS, d.SASLMechanism = s.TLS, s.SASL
	return d
}

// Client is a kafka.Client of brokers over t (nil: a new Transport) with
// this security.
func (s Security) Client(brokers []string, timeout time.Duration, t *kafka.Transport) *kafka.Client {
	return &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: timeout, Transport: s.Transport(t)}
}

// Mechanism returns the SASL mechanism named name ("", "none", "plain",
// "scram-sha-256", "scram-sha-512"; case does not matter); none is nil.
func Mechanism(name, username, password string) (sasl.Mechanism, error) {
	switch strings.ToLower(name) {
	case "", "none":
		return nil, nil
	case "plain":
		return plain.Mechanism{Username: username, Password: password}, nil
	case "scram-sha-256", "scram-sha-512":
		algo := scram.SHA256
		if strings.HasSuffix(strings.ToLower(name), "512") {
			algo = scram.SHA512
		}
		m, err := scram.Mechanism(algo, username, password)
		if err != nil {
			return nil, fmt.Errorf("kafka sasl %s: %w", name, err)
		}
		return m, nil
	default:
		return nil, fmt.Errorf("kafka sasl mechanism %q: want none, plain, scram-sha-256 or scram-sha-512", name)
	}
}

// Check connects to the brokers in turn until one accepts the connection
// (TCP, TLS handshake, SASL authentication) and answers a metadata request,
// within timeout. Its error names the broker and the cause: an untrusted
// certificate, wrong credentials, TLS against a plaintext port or the
// reverse. Clients that retry (writers, readers) would otherwise retry a
// refused handshake for ever, which looks like lag.
func (s Security) Check(ctx context.Context, brokers []string, timeout time.Duration) error {
	if len(brokers) == 0 {
		return errors.New("kafka: no brokers configured")
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var errs []error
	for _, b := range brokers {
		err := s.check(ctx, b)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return errors.Join(errs...)
}

func (s Security) check(ctx context.Context, broker string) error {
	d := s.Dialer(&kafka.Dialer{ClientID: "floodgate-check", Timeout: 10 * time.Second})
	conn, err := d.DialContext(ctx, "tcp", broker)
	if err != nil {
		return s.explain(broker, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := conn.Brokers(); err != nil {
		return s.explain(broker, err)
	}
	return nil
}

// explain wraps err with what it most likely means.
func (s Security) explain(broker string, err error) error {
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		recHeader tls.RecordHeaderError
		kerr      kafka.Error
	)
	mech := "none"
	if s.SASL != nil {
		mech = s.SASL.Name()
	}
	switch {
	case errors.As(err, &unknownCA):
		return refusedErr{fmt.Errorf("kafka %s: TLS: the broker's certificate is not signed by a trusted CA (set --kafka-tls-ca): %w", broker, err)}
	case errors.As(err, &hostname):
		return refusedErr{fmt.Errorf("kafka %s: TLS: the broker's certificate is not for this address (set --kafka-tls-server-name): %w", broker, err)}
	case errors.As(err, &invalid):
		return refusedErr{fmt.Errorf("kafka %s: TLS: the broker's certificate is invalid: %w", broker, err)}
	case errors.As(err, &recHeader):
		return refusedErr{fmt.Errorf("kafka %s: TLS handshake answered by something that does not speak TLS (is it a plaintext listener? unset --kafka-tls): %w", broker, err)}
	case errors.As(err, &kerr) && (kerr == kafka.SASLAuthenticationFailed):
		return refusedErr{fmt.Errorf("kafka %s: SASL %s authentication failed: wrong username or password: %w", broker, mech, err)}
	case errors.As(err, &kerr) && (kerr == kafka.UnsupportedSASLMechanism || kerr == kafka.IllegalSASLState):
		return refusedErr{fmt.Errorf("kafka %s: SASL %s is not enabled on this listener (check --kafka-sasl-mechanism): %w", broker, mech, err)}
	case s.TLS == nil && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || isTimeout(err)):
		return fmt.Errorf("kafka %s: the broker closed the connection or did not answer (is it a TLS or SASL listener? set --kafka-tls, --kafka-sasl-mechanism): %w", broker, err)
	case s.TLS != nil && s.SASL == nil && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)):
		return fmt.Errorf("kafka %s: the broker closed the connection after the TLS handshake (does the listener require SASL? set --kafka-sasl-mechanism): %w", broker, err)
	default:
		return fmt.Errorf("kafka %s (tls %t, sasl %s): %w", broker, s.TLS != nil, mech, err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded)
}

// Cluster is a set of bootstrap brokers and how to connect to them.
type Cluster struct {
	Brokers []string
	Security
}

// Client is a kafka.Client of the cluster over t (nil: a new Transport).
func (c Cluster) Client(timeout time.Duration, t *kafka.Transport) *kafka.Client {
	return c.Security.Client(c.Brokers, timeout, t)
}

// ErrRefused is in the chain of a Check error when the broker refused the
// connection (TLS, SASL): retrying will not help.
var ErrRefused = errors.New("refused")

type refusedErr struct{ error }

func (e refusedErr) Unwrap() error        { return e.error }
func (e refusedErr) Is(target error) bool { return target == ErrRefused }

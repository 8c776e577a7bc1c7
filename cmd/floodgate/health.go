package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/floodgate-dev/floodgate/internal/jitter"
	"github.com/floodgate-dev/floodgate/internal/tlsfiles"
)

// HealthCmd probes a health endpoint; container health checks use it because
// the runtime image has no shell or curl.
type HealthCmd struct {
	URL      string        `arg:"" help:"URL to GET; any 2xx answer is healthy."`
	Deadline time.Duration `name:"deadline" aliases:"timeout" env:"FLOODGATE_HEALTH_DEADLINE" default:"3s" help:"Keep asking until a 2xx answer, for at most this long."`
	TLSCA    string        `name:"tls-ca" env:"FLOODGATE_HEALTH_TLS_CA" help:"PEM CA trusted for an https URL (default: the system's)."`
	TLSCert  string        `name:"tls-cert" env:"FLOODGATE_HEALTH_TLS_CERT" help:"PEM client certificate, for a listener that requires one (with --tls-key)."`
	TLSKey   string        `name:"tls-key" env:"FLOODGATE_HEALTH_TLS_KEY" help:"PEM key of --tls-cert."`
}

// Run exits non-zero unless URL answers 2xx within the timeout. It asks
// again until then: a script starting a process can wait on it without a
// sleep, and a container runtime's probe gets the same answer either way.
func (c *HealthCmd) Run(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.Deadline)
	defer cancel()
	client := http.DefaultClient
	if c.TLSCA != "" || c.TLSCert != "" {
		cfg, err := tlsfiles.Client(tlsfiles.ClientFiles{CA: c.TLSCA, Cert: c.TLSCert, Key: c.TLSKey})
		if err != nil {
			return fmt.Errorf("health: %w", err)
		}
		client = &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
	}
	wait := jitter.New(50*time.Millisecond, 500*time.Millisecond)
	for {
		err := c.probe(ctx, client)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait.Next()):
		}
	}
}

func (c *HealthCmd) probe(ctx context.Context, client *http.Client) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL, nil)
	if err != nil {
		return fmt.Errorf("health request %s: %w", c.URL, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("health %s: %w", c.URL, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("health %s: %s: %s", c.URL, resp.Status, body)
	}
	return nil
}

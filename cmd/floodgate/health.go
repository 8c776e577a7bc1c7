package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// HealthCmd probes a health endpoint; container health checks use it because
// the runtime image has no shell or curl.
type HealthCmd struct {
	URL     string        `arg:"" help:"URL to GET; any 2xx answer is healthy."`
	Timeout time.Duration `name:"timeout" default:"3s" help:"Give up after this long."`
}

// Run exits non-zero unless URL answers 2xx within the timeout.
func (c *HealthCmd) Run(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL, nil)
	if err != nil {
		return fmt.Errorf("health request %s: %w", c.URL, err)
	}
	resp, err := http.DefaultClient.Do(req)
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

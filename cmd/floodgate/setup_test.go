package main

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// TestSetupRetry covers setup's retry loop without services: a transient
// failure is retried (after one jittered 2-3s pause), a permanent one fails
// at once, and a ctx that ends gives up with the last error.
func TestSetupRetry(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	transient := errors.New("connection refused")

	calls := 0
	err := retry(t.Context(), log, "create topics", func() error {
		if calls++; calls == 1 {
			return transient
		}
		return nil
	})
	if err != nil || calls != 2 {
		t.Fatalf("retry after one transient failure = %v after %d calls; want nil after 2", err, calls)
	}

	calls = 0
	err = retry(t.Context(), log, "migrate", func() error {
		calls++
		return permanent{errors.New("bad url")}
	})
	if err == nil || calls != 1 || !strings.Contains(err.Error(), "migrate: bad url") {
		t.Fatalf("permanent failure = %v after %d calls; want it at once", err, calls)
	}

	ctx, cancel := context.WithCancel(t.Context())
	calls = 0
	err = retry(ctx, log, "migrate", func() error {
		calls++
		cancel() // the Wait budget runs out during this attempt
		return transient
	})
	if !errors.Is(err, transient) || calls != 1 || !strings.Contains(err.Error(), "gave up") {
		t.Fatalf("ended ctx = %v after %d calls; want gave up with the last error", err, calls)
	}
}

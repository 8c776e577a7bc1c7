package operator_test

import (
	"testing"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/live"
	"github.com/floodgate-dev/floodgate/internal/operator"
	"github.com/floodgate-dev/floodgate/internal/window"
	"github.com/floodgate-dev/floodgate/internal/window/windowtest"
)

// The store and batch helpers every test of the slot's schema shares
// (window/windowtest), under the names these tests use.
var (
	newStore  = windowtest.NewStore
	mustRules = windowtest.MustRules
	ev        = windowtest.Event
	base      = windowtest.Base
)

// batcher hands out batches of consecutive offsets for one partition.
type batcher = windowtest.Batcher

type eventT = event.Event

// applierOf returns the live path's Applier over st, with its defaults.
func applierOf(tb testing.TB, st *window.Store) *live.Applier {
	tb.Helper()
	ap, err := live.NewApplier(st, live.ApplierConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	return ap
}

// writerOf returns the operator's Writer over st.
func writerOf(tb testing.TB, st *window.Store) *operator.Writer {
	tb.Helper()
	w, err := operator.NewWriter(st)
	if err != nil {
		tb.Fatal(err)
	}
	return w
}

package backtest_test

import (
	"testing"

	"github.com/floodgate-dev/floodgate/internal/backtest"
)

// --exit-code gates on what the candidate newly denies; a shadow rule
// denies nobody.
func TestNewDenies(t *testing.T) {
	alone := &backtest.Report{Candidate: &backtest.Outcome{Denies: []backtest.Deny{{Shadow: false}, {Shadow: true}, {Shadow: false}}}}
	if n := alone.NewDenies(); n != 2 {
		t.Errorf("without a baseline: %d, want 2", n)
	}
	vs := &backtest.Report{Candidate: &backtest.Outcome{}, Baseline: &backtest.Outcome{}, Changes: []backtest.Change{
		{Change: backtest.ChangeNew}, {Change: backtest.ChangeNew, Shadow: true}, {Change: backtest.ChangeGone}, {Change: backtest.ChangeChanged},
	}}
	if n := vs.NewDenies(); n != 1 {
		t.Errorf("against a baseline: %d, want 1", n)
	}
}

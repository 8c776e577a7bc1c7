package backtest_test

import (
	"context"
	"os"
	"runtime/pprof"
	"testing"
	"time"

	"floodgate/backtest"
	"floodgate/rules"
)

func TestProfTmp(t *testing.T) {
	topic := os.Getenv("BT_TOPIC")
	if topic == "" {
		t.Skip()
	}
	set, err := rules.Load("/tmp/bench-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f, _ := os.Create("/tmp/bt.prof")
	pprof.StartCPUProfile(f)
	rep, err := backtest.Run(context.Background(), backtest.Config{Rules: set, From: time.Now().Add(-time.Hour), To: time.Now(), Brokers: []string{"127.0.0.1:19092"}, Topic: topic})
	pprof.StopCPUProfile()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d events %.0f/s", rep.Events, rep.EventsPerSecond)
}

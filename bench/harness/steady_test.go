package harness

import "testing"

func TestSteadyRateFromProgressLines(t *testing.T) {
	out := `Warning: --messages is deprecated. Use --num-records instead.
time, threadId, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
2026-12-05 02:30:55:483, 0, 0.0001, 0.0003, 1, 2.2173, 288, 163, 0.0008, 6.1350
2026-12-05 02:30:55:683, 0, 25.5366, 127.6821, 188501, 942500.0000, 0, 200, 127.6821, 942500.0000
2026-12-05 02:30:55:883, 0, 25.5366, 127.6821, 388501, 942500.0000, 0, 200, 127.6821, 942500.0000
2026-12-05 02:30:56:683, 0, 25.5366, 127.6821, 1188501, 942500.0000, 0, 200, 127.6821, 942500.0000
`
	rate, last, err := steadyRate(out, 250000)
	if err != nil || last != 1188501 || rate != 800000/0.8 {
		t.Fatalf("rate %v last %d err %v; want 1e6 from the line at 388501 to the last", rate, last, err)
	}
	if _, _, err := steadyRate(out, 2_000_000); err == nil {
		t.Fatal("no line past a quarter: want an error")
	}
}

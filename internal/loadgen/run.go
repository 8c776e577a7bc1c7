package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/floodgate-dev/floodgate/producer"
)

// Run runs pump into pub until the pump stops, then closes pub (which
// flushes, even after an interrupt), writing to w a progress line every
// every (0: none) and a last line naming topic: `floodgate produce`. Bad
// input lines skipped make an error too, once the rest is sent.
func Run(ctx context.Context, w io.Writer, pump *Pump, pub *producer.Publisher, every time.Duration, topic string) error {
	start := time.Now()
	stopProgress := progress(w, every, start, pump, pub)
	runErr := pump.Run(ctx)
	closeErr := pub.Close() // flushes, even after an interrupt
	stopProgress()

	elapsed := time.Since(start)
	st, counts := pub.Stats(), pump.Counts()
	fmt.Fprintf(w, "produce: done: %d events acknowledged in %s (%.0f/s), %d failed, %d bad input lines; topic %s\n",
		st.Published, elapsed.Round(time.Millisecond), float64(st.Published)/elapsed.Seconds(), st.Failed, counts.Bad, topic)
	if err := errors.Join(runErr, closeErr); err != nil {
		return err
	}
	if counts.Bad > 0 {
		return fmt.Errorf("%d bad input lines skipped", counts.Bad)
	}
	return nil
}

func progress(w io.Writer, every time.Duration, start time.Time, pump *Pump, pub *producer.Publisher) (stop func()) {
	if every <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		var lastAcked int64
		last := start
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				st, counts := pub.Stats(), pump.Counts()
				rate := float64(st.Published-lastAcked) / now.Sub(last).Seconds()
				lastAcked, last = st.Published, now
				fmt.Fprintf(w, "produce: %s sent %d, acked %d (%.0f/s), in flight %d, errors %d (failed %d, bad lines %d)\n",
					now.Sub(start).Round(time.Second), counts.Sent, st.Published, rate, st.Buffered, st.Failed+counts.Bad, st.Failed, counts.Bad)
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

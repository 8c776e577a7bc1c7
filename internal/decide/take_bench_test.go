package decide_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/floodgate-dev/floodgate/internal/decide"
)

// BenchmarkStrictTake: strict takes of one e-mail each (password_reset's
// strict rule), 16 callers, over the stack's Redis; events queued with
// the count (a recorder stands for the publisher).
func BenchmarkStrictTake(b *testing.B) {
	e := newEnv(b)
	var i atomic.Int64
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			k := i.Add(1)
			_, err := e.lim.Take(context.Background(), decide.Request{Action: "password_reset",
				Subjects: []decide.Subject{{Kind: "email", Subject: "b" + strconv.FormatInt(k%10000, 10) + "@example.com"}}})
			if err != nil {
				b.Error(err)
			}
		}
	})
}

package takeroute

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"errors"
	"github.com/floodgate-dev/floodgate/internal/live"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/window"
	"github.com/floodgate-dev/floodgate/internal/window/windowtest"
)

// A forwarded take's answer survives the wire: sums, retry seconds, a ban.
func TestWireStatesRoundTrip(t *testing.T) {
	until := time.Unix(1795771700, 0).UTC()
	ban := &window.Ban{Until: time.UnixMilli(1795775000123).UTC(), Message: "no", Operator: "op", Since: time.UnixMilli(1795771000000).UTC()}
	in := []window.EvalState{{Sums: []int64{3, 7}, Until: []time.Time{{}, until}, Ban: ban}, {Sums: []int64{0}, Until: []time.Time{{}}}}
	w, err := toWire(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := fromWire(w)
	if err != nil {
		t.Fatal(err)
	}
	if out[0].Sums[1] != 7 || !out[0].Until[0].IsZero() || !out[0].Until[1].Equal(until) || *out[0].Ban != *ban || out[1].Ban != nil {
		t.Errorf("round trip: got %+v, want %+v", out, in)
	}
}

// A take across owners splits by owner: each part its queries, and the
// events of its counted ones by the subject's Kafka key; an event of no
// counted query goes to none; parts in the order of their owners.
func TestSplitPartsByOwner(t *testing.T) {
	q := func(kind, subject string, count bool) window.EvalQuery {
		return window.EvalQuery{Subject: window.Subject{Action: "login", Kind: kind, Subject: subject}, Count: count}
	}
	qs := []window.EvalQuery{q("ip", "10.0.0.1", true), q("email", "a@example.com", true), q("ua", "curl", false)}
	evs := []window.QueuedEvent{{Key: []byte("email:a@example.com")}, {Key: []byte("ua:curl")}, {Key: []byte("ip:10.0.0.1")}}
	parts := splitParts(qs, evs, []string{"b:1", "a:1", "b:1"})
	if len(parts) != 2 || parts[0].addr != "a:1" || parts[1].addr != "b:1" {
		t.Fatalf("parts %+v", parts)
	}
	if !slices.Equal(parts[0].qs, []int{1}) || !slices.Equal(parts[0].evs, []int{0}) {
		t.Errorf("a's part: queries %v events %v; want [1] and [0]", parts[0].qs, parts[0].evs)
	}
	if !slices.Equal(parts[1].qs, []int{0, 2}) || !slices.Equal(parts[1].evs, []int{2}) {
		t.Errorf("b's part: queries %v events %v; want [0 2] and [2]", parts[1].qs, parts[1].evs)
	}
}

// The router keeps its connections to a peer: calls at once share about as
// many as are in flight, instead of a dial each (net/http
// keeps two idle per host unless told).
func TestRouterReusesPeerConnections(t *testing.T) {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte("{}\n")) // as json.Encoder writes: a newline after the value
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	r := &Router{cfg: Config{Client: NewClient(nil), Scheme: "http"}}
	const inFlight, each = 16, 40
	var wg sync.WaitGroup
	for range inFlight {
		wg.Go(func() {
			for range each {
				if _, _, err := r.call(context.Background(), addr, wireTake{Op: "commit", ID: "x"}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	// a call may dial while another's connection is on its way back to
	// the pool: a few more than in flight, not one a call
	if n := conns.Load(); n > 2*inFlight {
		t.Errorf("%d connections for %d calls, %d at a time: want at most %d", n, inFlight*each, inFlight, 2*inFlight)
	}
}

// notOwner is a Local that answers no take: it is catching up, or stopping.
type notOwner struct{ reserved atomic.Int64 }

func (l *notOwner) TakeQueued(context.Context, time.Time, []window.EvalQuery, int64, []window.QueuedEvent) (bool, []bool, []window.EvalState, error) {
	return false, nil, nil, live.ErrNotOwner
}

func (l *notOwner) Reserve(context.Context, time.Time, []window.EvalQuery, int64, []window.QueuedEvent) (string, []bool, []window.EvalState, error) {
	l.reserved.Add(1)
	return "", nil, nil, live.ErrNotOwner
}
func (l *notOwner) Commit(context.Context, string) error { return nil }
func (l *notOwner) Release(string) error                 { return nil }

// A take whose partitions' records name this member, which just said it
// does not answer them now, fails at once with ErrNotOwner: nothing is
// forwarded, and no take across owners is begun with this member alone.
func TestRouterDoesNotRouteToItself(t *testing.T) {
	rdb := stacktest.Redis(t)
	st := windowtest.NewStore(t, rdb)
	if err := rdb.Set(context.Background(), st.Keys().TakesOwner(0), "127.0.0.1:1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	local := &notOwner{}
	r, err := New(Config{Local: local, Redis: rdb, Store: st, Plan: planner(t), Self: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	q := window.EvalQuery{Subject: window.Subject{Action: "login", Kind: "ip", Subject: "10.0.0.1"}, Count: true}
	if _, _, _, err := r.TakeQueued(context.Background(), time.Now(), []window.EvalQuery{q}, 1, nil); !errors.Is(err, live.ErrNotOwner) {
		t.Fatalf("err %v; want live.ErrNotOwner", err)
	}
	if n := local.reserved.Load(); n != 0 {
		t.Errorf("%d reservations begun with this member alone", n)
	}
}

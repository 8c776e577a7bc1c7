package takeroute

import (
	"bytes"
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/internal/live"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// Path is the peer endpoint's path.
const Path = "/internal/owner-take"

// Bounds of a forwarded take: a take is a request's subjects (the
// limiter allows 16 by default), each with its event.
const (
	maxQueries   = 64
	maxBodyBytes = 1 << 20
	maxIDBytes   = 64
	// maxRefusalBytes of a refusal's text are read into the sender's error.
	maxRefusalBytes = 1 << 10
	ownerTTL        = time.Second // how long a looked-up owner is trusted
)

// Planner derives a forwarded take's query for one subject from this
// member's rules in force: decide.TakeQuery under them. An error refuses
// the take (the subject is not as a limiter sends it).
type Planner func(sub window.Subject, values map[string]string) (window.EvalQuery, error)

// Local answers takes of the partitions this process owns, whole or in
// two phases (a take across owners); *live.Sink.
type Local interface {
	TakeQueued(ctx context.Context, now time.Time, qs []window.EvalQuery, n int64, events []window.QueuedEvent) (bool, []bool, []window.EvalState, error)
	Reserve(ctx context.Context, now time.Time, qs []window.EvalQuery, n int64, events []window.QueuedEvent) (string, []bool, []window.EvalState, error)
	Commit(ctx context.Context, id string) error
	Release(id string) error
}

// Redis is what a Router reads of Redis: the owner records.
type Redis interface {
	MGet(ctx context.Context, keys ...string) *redis.SliceCmd
}

// Config configures a Router.
type Config struct {
	Local Local         // required
	Redis Redis         // required
	Store *window.Store // required: partitions and keys
	// Plan derives a forwarded take's limits from this member's rules: the
	// peer endpoint never takes them from the wire. Required.
	Plan Planner
	// Self is this process's peer address as its owner records give it: a
	// take is never forwarded to it.
	Self string
	// Client sends forwarded takes (TLS as the peers serve it). Default:
	// NewClient(nil).
	Client *http.Client
	// Scheme of the peers' endpoint: "http" (default) or "https".
	Scheme string
	// Token is the members' peer credential: when set, it is sent as a
	// bearer token and required on Handler. It must not be the take
	// surfaces' token, which take clients hold.
	Token string
	// Now is the clock forwarded takes are answered at. Default time.Now.
	Now func() time.Time
	// Registerer receives the router's metrics. Nil: not registered.
	Registerer prometheus.Registerer
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Router is a decide.Taker: local takes first, forwarded otherwise.
type Router struct {
	cfg       Config
	forwarded *prometheus.CounterVec
	refused   *prometheus.CounterVec // requests the peer endpoint refused, by reason
	mu        sync.Mutex
	// owners caches owner records by partition.
	owners map[int]cachedOwner
}

type cachedOwner struct {
	addr string
	at   time.Time
}

// maxIdlePerPeer is how many idle connections the client keeps to each
// peer: as many as takes in flight to it, or each take past net/http's
// default of 2 dials a connection of its own (an eighth of a forwarding
// member's CPU went to dialing at 16 takes in flight).
const maxIdlePerPeer = 256

// NewClient returns the client a Router forwards takes with: a 5 s timeout,
// connections kept for reuse, TLS as tc says (nil: the peers speak plain
// HTTP or the system's roots do).
func NewClient(tc *tls.Config) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = maxIdlePerPeer
	t.MaxIdleConns = 4 * maxIdlePerPeer
	if tc != nil {
		t.TLSClientConfig = tc
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: t}
}

// New returns a Router.
func New(cfg Config) (*Router, error) {
	if cfg.Local == nil || cfg.Redis == nil || cfg.Store == nil || cfg.Plan == nil {
		return nil, errors.New("take router: local taker, redis, store and planner are required")
	}
	if cfg.Client == nil {
		cfg.Client = NewClient(nil)
	}
	if cfg.Scheme == "" {
		cfg.Scheme = "http"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	r := &Router{cfg: cfg, owners: map[int]cachedOwner{}, refused: newRefused(), forwarded: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "floodgate_takeroute_forwarded_total",
		Help: "Owner takes of partitions another member owns, by result: forwarded (answered there), split (its partitions have several owners: reserved at each, then committed or released), no_owner (a partition no member answers: denied here), not_owner (the member named no longer answers them: denied), failed (no answer: the take may have counted there).",
	}, []string{"result"})}
	for _, res := range []string{"forwarded", "split", "no_owner", "not_owner", "failed"} {
		r.forwarded.WithLabelValues(res)
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{r.forwarded, r.refused} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("take router: register metrics: %w", err)
			}
		}
	}
	return r, nil
}

// TakeQueued implements decide.Taker: the take is answered here when this
// process owns its partitions, else forwarded to the member whose owner
// records name all of them, else reserved at each owner and committed
// (split). A take of a partition no record names fails with
// live.ErrNotOwner (answered closed).
func (r *Router) TakeQueued(ctx context.Context, now time.Time, qs []window.EvalQuery, n int64, events []window.QueuedEvent) (bool, []bool, []window.EvalState, error) {
	taken, queued, states, err := r.cfg.Local.TakeQueued(ctx, now, qs, n, events)
	if !errors.Is(err, live.ErrNotOwner) {
		return taken, queued, states, err
	}
	addrs, oerr := r.ownersOf(ctx, qs)
	if oerr != nil {
		r.forwarded.WithLabelValues("no_owner").Inc()
		return false, nil, nil, errors.Join(err, oerr)
	}
	oneOwner := !slices.ContainsFunc(addrs, func(a string) bool { return a != addrs[0] })
	switch {
	case oneOwner && addrs[0] == r.cfg.Self:
		// its records name this member, which just said it does not
		// answer them now (catching up, stopping): nothing to route
		return taken, queued, states, err
	case oneOwner:
		taken, queued, states, err = r.forward(ctx, addrs[0], qs, n, events)
	default:
		taken, queued, states, err = r.split(ctx, now, qs, n, events, addrs)
		if err == nil {
			r.forwarded.WithLabelValues("split").Inc()
			return taken, queued, states, nil
		}
	}
	switch {
	case errors.Is(err, live.ErrNotOwner):
		r.forwarded.WithLabelValues("not_owner").Inc()
	case err != nil:
		r.forwarded.WithLabelValues("failed").Inc()
	default:
		r.forwarded.WithLabelValues("forwarded").Inc()
	}
	return taken, queued, states, err
}

// ownersOf are the members answering each query's partition, as their
// owner records name them (Self for this one). A partition no record names
// fails the take.
func (r *Router) ownersOf(ctx context.Context, qs []window.EvalQuery) ([]string, error) {
	parts := make([]int, len(qs))
	for i, q := range qs {
		p, err := r.cfg.Store.PartitionOf(q.Subject)
		if err != nil {
			return nil, err
		}
		parts[i] = p
	}
	addrs, err := r.lookup(ctx, parts)
	if err != nil {
		return nil, err
	}
	for i, a := range addrs {
		if a == "" {
			return nil, fmt.Errorf("take router: partition %d has no owner record: no member answers it now", parts[i])
		}
	}
	return addrs, nil
}

// lookup reads the owner records of parts, trusting what it read within
// ownerTTL.
func (r *Router) lookup(ctx context.Context, parts []int) ([]string, error) {
	out := make([]string, len(parts))
	var miss []int
	now := time.Now()
	r.mu.Lock()
	for i, p := range parts {
		if c, ok := r.owners[p]; ok && now.Sub(c.at) < ownerTTL {
			out[i] = c.addr
		} else {
			miss = append(miss, i)
		}
	}
	r.mu.Unlock()
	if len(miss) == 0 {
		return out, nil
	}
	keys := make([]string, len(miss))
	for k, i := range miss {
		keys[k] = r.cfg.Store.Keys().TakesOwner(parts[i])
	}
	vals, err := r.cfg.Redis.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, fmt.Errorf("take router: read owner records: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.owners) > 1<<16 {
		clear(r.owners) // partitions are few; bounded anyway
	}
	for k, i := range miss {
		s, _ := vals[k].(string)
		out[i] = s
		r.owners[parts[i]] = cachedOwner{addr: s, at: now}
	}
	return out, nil
}

// wireTake and wireReply are a forwarded take and its answer.
type wireTake struct {
	// Op is "" (a take), or a phase of a take across owners: "reserve"
	// (a take's part, held under the ID answered), "commit" or "release"
	// (of ID).
	Op      string               `json:"op,omitempty"`
	ID      string               `json:"id,omitempty"`
	Queries []window.EvalQuery   `json:"queries"`
	N       int64                `json:"n"`
	Events  []window.QueuedEvent `json:"events"`
}

type wireReply struct {
	ID       string      `json:"id,omitempty"` // a reservation's
	Taken    bool        `json:"taken"`
	Queued   []bool      `json:"queued"`
	States   []wireState `json:"states"`
	Error    string      `json:"error,omitempty"`
	NotOwner bool        `json:"not_owner,omitempty"`
}

// wireState is an owner take's state: sums, retry seconds and a ban (the
// owner reads no deny record).
type wireState struct {
	Sums  []int64         `json:"sums"`
	Until []int64         `json:"until"` // Unix seconds, 0: fits
	Ban   json.RawMessage `json:"ban,omitempty"`
}

func toWire(states []window.EvalState) ([]wireState, error) {
	out := make([]wireState, len(states))
	for i, st := range states {
		out[i] = wireState{Sums: st.Sums, Until: make([]int64, len(st.Until))}
		for k, u := range st.Until {
			if !u.IsZero() {
				out[i].Until[k] = u.Unix()
			}
		}
		if st.Ban != nil {
			b, err := json.Marshal(st.Ban)
			if err != nil {
				return nil, err
			}
			out[i].Ban = b
		}
	}
	return out, nil
}

func fromWire(ws []wireState) ([]window.EvalState, error) {
	out := make([]window.EvalState, len(ws))
	for i, w := range ws {
		out[i] = window.EvalState{Sums: w.Sums, Until: make([]time.Time, len(w.Until))}
		for k, u := range w.Until {
			if u != 0 {
				out[i].Until[k] = time.Unix(u, 0).UTC()
			}
		}
		if len(w.Ban) > 0 {
			b, err := window.ParseBan(w.Ban)
			if err != nil {
				return nil, err
			}
			out[i].Ban = b
		}
	}
	return out, nil
}

// forward sends the take to addr's peer endpoint. An error leaves the take
// uncertain (it may have counted there), as a local one does.
func (r *Router) forward(ctx context.Context, addr string, qs []window.EvalQuery, n int64, events []window.QueuedEvent) (bool, []bool, []window.EvalState, error) {
	rep, states, err := r.call(ctx, addr, wireTake{Queries: qs, N: n, Events: events})
	if err != nil {
		return false, nil, nil, err
	}
	return rep.Taken, rep.Queued, states, nil
}

// call sends one request to addr's peer endpoint and checks its answer:
// states for every query, queued flags for every event of a take.
func (r *Router) call(ctx context.Context, addr string, in wireTake) (wireReply, []window.EvalState, error) {
	body, err := json.Marshal(in)
	if err != nil {
		return wireReply{}, nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.cfg.Scheme+"://"+addr+Path, bytes.NewReader(body))
	if err != nil {
		return wireReply{}, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if r.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+r.cfg.Token)
	}
	resp, err := r.cfg.Client.Do(req)
	if err != nil {
		return wireReply{}, nil, fmt.Errorf("take router: %s to %s: %w", opName(in.Op), addr, err)
	}
	defer func() {
		// read to its end (the encoder's newline), or the connection is
		// not reused
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBodyBytes))
		_ = resp.Body.Close() // the answer is read: closing it says nothing of the take
	}()
	if resp.StatusCode != http.StatusOK {
		// the peer endpoint's refusals (4xx) come before any take, their
		// reason in text; the take is answered closed either way
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, maxRefusalBytes))
		return wireReply{}, nil, fmt.Errorf("take router: %s to %s: %s: %s", opName(in.Op), addr, resp.Status, bytes.TrimSpace(msg))
	}
	var rep wireReply
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxBodyBytes)).Decode(&rep); err != nil {
		return wireReply{}, nil, fmt.Errorf("take router: %s to %s: %s: %w", opName(in.Op), addr, resp.Status, err)
	}
	switch {
	case rep.NotOwner:
		return wireReply{}, nil, fmt.Errorf("take router: %s: %s: %w", addr, rep.Error, live.ErrNotOwner)
	case rep.Error != "":
		return wireReply{}, nil, fmt.Errorf("take router: %s: %s", addr, rep.Error)
	case in.Op == "commit" || in.Op == "release":
		return rep, nil, nil
	}
	states, err := fromWire(rep.States)
	if err != nil {
		return wireReply{}, nil, fmt.Errorf("take router: %s: %w", addr, err)
	}
	if len(states) != len(in.Queries) || ((rep.Taken || rep.ID != "") && len(rep.Queued) != len(in.Events)) {
		return wireReply{}, nil, fmt.Errorf("take router: %s: %d states for %d queries", addr, len(states), len(in.Queries))
	}
	return rep, states, nil
}

func opName(op string) string {
	if op == "" {
		return "forward"
	}
	return op
}

// Handler serves takes forwarded by peers: answered here or not at all
// (never forwarded again). A request without the peer credential gets a
// 401; one out of bounds or malformed a 400, and one whose limits this
// member's rules do not give a 409, each with the reason and before any
// take (peer.go).
func (r *Router) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost {
			http.Error(w, "use POST", http.StatusMethodNotAllowed)
			return
		}
		if r.cfg.Token != "" && subtle.ConstantTimeCompare([]byte(req.Header.Get("Authorization")), []byte("Bearer "+r.cfg.Token)) != 1 {
			r.refuse(w, refusal{http.StatusUnauthorized, reasonUnauthorized, "missing or wrong peer credential (bearer token)"})
			return
		}
		var in wireTake
		if err := json.NewDecoder(http.MaxBytesReader(w, req.Body, maxBodyBytes)).Decode(&in); err != nil {
			r.refuse(w, invalid("%v", err))
			return
		}
		now := r.cfg.Now()
		if ref := r.check(&in, now); ref != nil {
			r.refuse(w, *ref)
			return
		}
		rep, err := r.serve(req.Context(), now, in)
		if err != nil {
			rep = wireReply{Error: err.Error(), NotOwner: errors.Is(err, live.ErrNotOwner)}
		}
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(rep); err != nil {
			// The take stands (taken here, maybe); its sender, without an
			// answer, fails it closed and counts it failed.
			r.log().Warn("take router: the answer to a forwarded take was not delivered", "taken", rep.Taken, "err", err)
		}
	})
}

// serve answers a peer's request, checked, from this process's memory.
func (r *Router) serve(ctx context.Context, now time.Time, in wireTake) (wireReply, error) {
	var rep wireReply
	var states []window.EvalState
	var err error
	switch in.Op {
	case "commit":
		err = r.cfg.Local.Commit(ctx, in.ID)
		return wireReply{Taken: err == nil}, err
	case "release":
		return wireReply{}, r.cfg.Local.Release(in.ID)
	case "reserve":
		// at the owner's clock, which its windows and overlay keep
		rep.ID, rep.Queued, states, err = r.cfg.Local.Reserve(ctx, now, in.Queries, in.N, in.Events)
	default:
		rep.Taken, rep.Queued, states, err = r.cfg.Local.TakeQueued(ctx, now, in.Queries, in.N, in.Events)
	}
	if err == nil {
		rep.States, err = toWire(states)
	}
	return rep, err
}

func (r *Router) log() *slog.Logger {
	if r.cfg.Logger == nil {
		return slog.Default()
	}
	return r.cfg.Logger
}

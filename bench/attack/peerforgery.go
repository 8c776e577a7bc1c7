package attack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/decide"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/stacktest/childproc"
	"github.com/floodgate-dev/floodgate/internal/takeroute"
	"github.com/floodgate-dev/floodgate/internal/window"
)

const peerForgeryRules = `rules:
  - name: password-reset
    action: password_reset
    kinds: [email]
    limits: [1/h]
    strict: true
`

// Secrets of the peer-forgery scenario: what every take client holds, and
// what only the members do.
const (
	publicTakeToken = "attack-public-take-token"
	memberPeerToken = "attack-members-peer-token"
)

// peerForgery: a take client holding the owner takes' public token posts
// takes straight to `aggregator --owner-takes`'s peer endpoint, where
// members forward takes, for a subject at its strict 1/h limit: one with
// a limit of 10⁹, one with n = 2⁶³−1 (the window's sum overflows past the
// limit). Then the same with the members' peer credential, when the
// binary has one. It holds when no forged take is taken.
func peerForgery(ctx context.Context, e *env) (Row, error) {
	row := Row{Tried: "a take client with the owner takes' token posts forged takes to `aggregator --owner-takes`'s peer endpoint for an e-mail at its strict 1/h limit: " +
		"limit 10⁹, and n = 2⁶³−1; then both with the members' peer credential"}
	rulesPath, err := e.writeRules(peerForgeryRules)
	if err != nil {
		return row, err
	}
	public, peer := filepath.Join(e.cfg.WorkDir, e.id+"-takes-token"), filepath.Join(e.cfg.WorkDir, e.id+"-peer-token")
	for path, s := range map[string]string{public: publicTakeToken, peer: memberPeerToken} {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			return row, err
		}
	}
	var addrs [2]string // take surfaces, peer endpoint
	for i := range addrs {
		if addrs[i], err = childproc.FreePort(); err != nil {
			return row, err
		}
	}
	args := []string{"--no-history", "--owner-takes", "--takes-http-addr", addrs[0], "--takes-rls-addr", "off", "--takes-peer-addr", addrs[1], "--takes-auth-token-file", public}
	// A binary from before the peer credential has no such flag: its peer
	// endpoint takes the public token.
	help, _ := exec.CommandContext(ctx, e.cfg.Bin, "aggregator", "--help").CombinedOutput()
	credential := bytes.Contains(help, []byte("--takes-peer-token-file"))
	if credential {
		args = append(args, "--takes-peer-token-file", peer)
	}
	if _, err := e.startAggregator(ctx, rulesPath, args...); err != nil {
		return row, err
	}
	take := func(email string) (int, error) {
		return status(ctx, http.MethodPost, "http://"+addrs[0]+"/v1/take?action=password_reset&email="+email, map[string]string{"Authorization": "Bearer " + publicTakeToken})
	}
	if err := waitFor(ctx, "owner takes answered", 2*time.Minute, func() (bool, error) {
		c, err := take("warmup@example.com")
		return c == http.StatusOK, err
	}); err != nil {
		return row, err
	}
	const victim = "victim@example.com"
	if c, err := take(victim); err != nil || c != http.StatusOK {
		return row, fmt.Errorf("the victim's first take: %d %v", c, err)
	}
	set, err := rules.Parse([]byte(peerForgeryRules))
	if err != nil {
		return row, err
	}
	forge := func(token string, limit, n int64) (string, bool, error) {
		q, err := decide.TakeQuery(set, window.Subject{Action: "password_reset", Kind: "email", Subject: victim}, nil)
		if err != nil {
			return "", false, err
		}
		if limit > 0 {
			q.Limits[0].Limit.Count = limit
		}
		ev := event.Event{V: event.Version, ID: event.NewID(), Action: "password_reset", Kind: "email", Subject: victim, TS: time.Now(), N: 1}
		v, err := event.Encode(ev)
		if err != nil {
			return "", false, err
		}
		body, err := json.Marshal(map[string]any{"queries": []window.EvalQuery{q}, "n": n,
			"events": []window.QueuedEvent{{Key: []byte(ev.Key()), Value: v, ID: ev.ID}}})
		if err != nil {
			return "", false, err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addrs[1]+takeroute.Path, bytes.NewReader(body))
		if err != nil {
			return "", false, err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", false, err
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		var rep struct {
			Taken bool `json:"taken"`
		}
		_ = json.Unmarshal(b, &rep)
		return fmt.Sprint(resp.StatusCode), resp.StatusCode == http.StatusOK && rep.Taken, nil
	}
	type attempt struct {
		what, token string
		limit, n    int64
	}
	tries := []attempt{{"public token, limit 10⁹", publicTakeToken, 1e9, 1}, {"public token, n 2⁶³−1", publicTakeToken, 0, math.MaxInt64}}
	if credential {
		tries = append(tries, attempt{"peer credential, limit 10⁹", memberPeerToken, 1e9, 1}, attempt{"peer credential, n 2⁶³−1", memberPeerToken, 0, math.MaxInt64})
	}
	var answers []string
	taken, publicRefused := 0, 0
	for _, a := range tries {
		code, ok, err := forge(a.token, a.limit, a.n)
		if err != nil {
			return row, fmt.Errorf("%s: %w", a.what, err)
		}
		if ok {
			taken++
			code += " taken"
		}
		if a.token == publicTakeToken && (code == "401" || code == "403") {
			publicRefused++
		}
		answers = append(answers, a.what+" → "+code)
	}
	next, err := take(victim)
	if err != nil {
		return row, err
	}
	row.Pass = credential && taken == 0 && publicRefused == 2 && next == http.StatusTooManyRequests
	row.Held = fmt.Sprintf("%s; forged takes taken %d of %d; the e-mail's next take %d", strings.Join(answers, ", "), taken, len(tries), next)
	if !credential {
		row.Held += "; no peer credential: the endpoint takes the public token"
	}
	return row, nil
}

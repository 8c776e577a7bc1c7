package rlsload

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
)

// HTTPCheck returns the lookup of a shape over floodgate's plain HTTP
// surface: GET base/v1/check?action=<domain>&<kind>=<subject>... on
// keep-alive connections, expecting want (200 allowed, 429 denied).
func HTTPCheck(client *http.Client, base string, s Shape, want int) Op {
	urls := make([]string, max(s.Subjects, 1))
	for i := range urls {
		q := url.Values{"action": {s.Domain}}
		for _, k := range s.Kinds {
			q.Add(k, Subject(k, s.Base+i))
		}
		urls[i] = base + "/v1/check?" + q.Encode()
	}
	return func(ctx context.Context, _ int, rng *rand.Rand) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, urls[rng.IntN(len(urls))], nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return false, err
		}
		// Read the body to the end so that the connection is reused.
		_, err = io.Copy(io.Discard, resp.Body)
		if cerr := resp.Body.Close(); err == nil {
			err = cerr
		}
		return resp.StatusCode == want, err
	}
}

// Package jitter gives the waits between retries. After a Redis failover or
// a broker restart every feed follower, relay and aggregator worker fails at
// the same moment; with a fixed doubling they would all retry in lockstep
// and hit the recovering service together at every step. Drawing each wait
// at random around an exponential interval spreads them out.
package jitter

import (
	"time"

	"github.com/cenkalti/backoff/v5"
)

// spread is the largest randomization factor: a wait is drawn uniformly
// within ±spread of the exponential interval.
const spread = 1.0 / 3

// Backoff gives the waits between the attempts of one retry loop:
// exponential (doubling) with jitter, never below first nor above longest.
// Not safe for concurrent use: each loop holds its own.
type Backoff struct {
	exp            backoff.ExponentialBackOff
	first, longest time.Duration
}

// New returns a Backoff whose waits start within [first, 2*first] and grow
// up to longest. The randomization is sized so that the waits stay within
// [first, longest] without being clipped (clipped waits would be equal
// again): the interval starts at first/(1-r) and stops at longest/(1+r).
// When longest is below 4*first there is no room to grow: the waits are
// then drawn within [first, longest] (equal to first when longest is not
// above it).
//
// It is returned as a value so that a retry loop's Backoff lives on its
// stack: the loops around every Apply and publish allocate nothing.
func New(first, longest time.Duration) Backoff {
	first = max(first, time.Millisecond)
	longest = max(longest, first)
	r := min(spread, float64(longest-first)/float64(longest+first))
	initial := time.Duration(float64(first) / (1 - r))
	b := Backoff{
		exp: backoff.ExponentialBackOff{
			InitialInterval:     initial,
			RandomizationFactor: r,
			Multiplier:          2,
			MaxInterval:         max(time.Duration(float64(longest)/(1+r)), initial),
		},
		first:   first,
		longest: longest,
	}
	b.exp.Reset()
	return b
}

// Next returns the wait before the next attempt.
func (b *Backoff) Next() time.Duration {
	// The clamp only catches rounding: the interval's bounds keep the draw
	// within them.
	return min(max(b.exp.NextBackOff(), b.first), b.longest)
}

// Reset starts over from the first wait, after an attempt succeeded.
func (b *Backoff) Reset() { b.exp.Reset() }

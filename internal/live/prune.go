package live

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// pruneBody removes up to max states that say nothing any more at now from
// a partition's state hash (scored by expiry in the @exp set): no change
// entry, since a reader drops them at the same second on its own.
//
//	KEYS: state key, exp key
//	ARGV: now (Unix s), max
//
// Returns the number removed.
//
//go:embed prune.lua
var pruneBody string

var pruneScript = redis.NewScript("#!lua\n" + pruneBody)

// PrunePage bounds the states one prune script run removes.
const PrunePage = 512

// Prune removes every state of a partition that says nothing any more at
// now, PrunePage a script run, and returns how many. The apply script
// removes a few with every batch; Prune is what reaches the states of a
// partition that no batch touches any more (the live sink runs it on a
// timer for the partitions it owns).
func (s *Applier) Prune(ctx context.Context, partition int, now time.Time) (int, error) {
	k := s.keys
	total := 0
	for {
		n, err := pruneScript.Run(ctx, s.rdb, []string{k.State(partition), k.Exp(partition)}, now.Unix(), PrunePage).Int()
		if err != nil {
			return total, fmt.Errorf("prune partition=%d: %w", partition, err)
		}
		total += n
		if n < PrunePage {
			return total, nil
		}
	}
}

package live

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// resetBody moves a partition's stored offset from ARGV[1] to ARGV[2], only
// when it stands at ARGV[1].
//
//go:embed reset_offset.lua
var resetBody string

// resetMoved is reset_offset.lua's MOVED: the offset stood at from and
// was moved (ELSEWHERE, 0: it stood elsewhere, nothing written).
const resetMoved = 1

var resetScript = redis.NewScript("#!lua\n" + resetBody)

// ResetOffset moves the offset stored for a partition of group back from
// from to to (the topic was recreated; the stored offset lies beyond the new
// log's end). It fails when the stored offset is not from.
func (s *Applier) ResetOffset(ctx context.Context, group, topic string, partition int, from, to int64) error {
	key := s.keys.Offset(group, topic, partition)
	n, err := resetScript.Run(ctx, s.rdb, []string{key, s.keys.Checkpoint(group, topic, partition), s.keys.CheckpointMarks(group, topic, partition)}, strconv.FormatInt(from, 10), strconv.FormatInt(to, 10)).Int()
	if err != nil {
		return fmt.Errorf("reset offset %s from %d to %d: %w", key, from, to, err)
	}
	if n != resetMoved {
		return fmt.Errorf("reset offset %s: it no longer stands at %d", key, from)
	}
	return nil
}

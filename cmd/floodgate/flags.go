package main

import (
	"github.com/floodgate-dev/floodgate/internal/history"
	"github.com/floodgate-dev/floodgate/internal/kafkaconn"
	"github.com/floodgate-dev/floodgate/internal/postgres"
	"github.com/floodgate-dev/floodgate/internal/redisconn"
	"github.com/floodgate-dev/floodgate/internal/tlsfiles"
	"github.com/floodgate-dev/floodgate/internal/topics"
)

// The flag groups the commands share, each kept by the package that uses
// it (so the processes' own packages embed the same ones); embed those a
// command needs. Defaults point at scripts/stack (see `scripts/stack env`).
type (
	KafkaConnFlags  = kafkaconn.Flags
	KafkaFlags      = topics.Flags
	TopicPartitions = topics.CreateFlags
	RedisFlags      = redisconn.Flags
	PostgresFlags   = postgres.Flags
	ListenTLSFlags  = tlsfiles.ListenFlags
	HistoryKeyFlags = history.KeyFlags
	LadderFlags     = history.LadderFlags
)

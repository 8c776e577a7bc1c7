package main

// Connection flags shared by subcommands. Embed the ones a subcommand needs;
// defaults point at scripts/stack (see `scripts/stack env`).

// KafkaFlags locate the Kafka cluster and floodgate's topics.
type KafkaFlags struct {
	Brokers        []string `name:"brokers" env:"FLOODGATE_BROKERS" default:"127.0.0.1:19092" sep:"," help:"Kafka bootstrap brokers, comma separated."`
	Topic          string   `name:"topic" env:"FLOODGATE_TOPIC" default:"floodgate.events" help:"Topic of access events."`
	DLQTopic       string   `name:"dlq-topic" env:"FLOODGATE_DLQ_TOPIC" default:"floodgate.events.dlq" help:"Dead-letter topic for malformed events."`
	DecisionsTopic string   `name:"decisions-topic" env:"FLOODGATE_DECISIONS_TOPIC" default:"floodgate.decisions" help:"Topic where new deny decisions are published."`
}

// RedisFlags locate the Redis server holding live counters and deny records.
type RedisFlags struct {
	RedisAddr string `name:"redis-addr" env:"FLOODGATE_REDIS_ADDR" default:"127.0.0.1:16379" help:"Redis address host:port."`
	RedisDB   int    `name:"redis-db" env:"FLOODGATE_REDIS_DB" default:"0" help:"Redis database number."`
}

// PostgresFlags locate the PostgreSQL database holding history.
type PostgresFlags struct {
	PostgresURL string `name:"postgres-url" env:"FLOODGATE_POSTGRES_URL" default:"postgres://floodgate@127.0.0.1:15432/floodgate?sslmode=disable" help:"PostgreSQL connection URL."`
}

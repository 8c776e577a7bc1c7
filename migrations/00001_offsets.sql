-- Consumer offsets kept next to the data they describe (docs/events.md):
-- a consumer that writes to Postgres commits its Kafka position in the same
-- transaction as its writes, so a restart resumes exactly after the last
-- committed write. next_offset is the offset of the next message to read
-- (Kafka's committed-offset convention: last processed + 1).

-- +goose Up
CREATE SCHEMA IF NOT EXISTS floodgate;

CREATE TABLE floodgate.consumer_offsets (
    consumer_group text        NOT NULL,
    topic          text        NOT NULL,
    "partition"    int         NOT NULL CHECK ("partition" >= 0),
    next_offset    bigint      NOT NULL CHECK (next_offset >= 0),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_group, topic, "partition")
);

COMMENT ON TABLE floodgate.consumer_offsets IS
    'Kafka position of each consumer group and partition, committed in the transaction of its writes';
COMMENT ON COLUMN floodgate.consumer_offsets.next_offset IS
    'offset of the next message to consume (last processed + 1)';

-- +goose Down
DROP TABLE floodgate.consumer_offsets;

package producer_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/topics"
	"github.com/floodgate-dev/floodgate/producer"
)

// Publishing one failed login: one event per feature, synchronously.
func ExamplePublisher_Publish() {
	ctx := context.Background()
	brokers := []string{"127.0.0.1:19092"}
	if _, err := topics.Ensure(ctx, brokers, topics.Defaults("floodgate.events", "floodgate.events.dlq", "floodgate.decisions")...); err != nil {
		fmt.Println("topics:", err)
		return
	}
	p, err := producer.New(producer.Config{Brokers: brokers})
	if err != nil {
		fmt.Println("config:", err)
		return
	}
	evs := event.Split("login_failed", time.Now(), map[string]string{
		"ip":    "203.0.113.7",
		"email": "a@example.com",
	})
	err = p.Publish(ctx, evs...)
	err = errors.Join(err, p.Close())
	if err != nil {
		fmt.Println("publish:", err)
	}
}

package event_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-dev/floodgate/event"
)

func ExampleEncode() {
	e := event.Event{
		ID:      "01hzx3c9v8d2k7q4m6n5p0r1s2",
		Action:  "login_failed",
		Kind:    "ip",
		Subject: "203.0.113.7",
		TS:      time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC),
	}
	value, err := event.Encode(e)
	if err != nil {
		fmt.Println("encode:", err)
		return
	}
	fmt.Println(e.Key())
	fmt.Println(string(value))
	// Output:
	// ip:203.0.113.7
	// {"v":1,"id":"01hzx3c9v8d2k7q4m6n5p0r1s2","action":"login_failed","kind":"ip","subject":"203.0.113.7","ts":1714979289000,"n":1}
}

func ExampleDecode() {
	key := []byte("email:a@example.com")
	value := []byte(`{"v":1,"id":"e-42","action":"login_failed","kind":"email","subject":"a@example.com","ts":"2024-05-06T07:08:09.5Z","future_field":true}`)
	e, err := event.Decode(value)
	if err == nil {
		err = event.CheckKey(key, e)
	}
	if err != nil {
		fmt.Println("reject:", err)
		return
	}
	fmt.Println(e.Action, e.Key(), e.TS.Format(time.RFC3339Nano), e.N)

	_, err = event.Decode([]byte(`{"v":1,"id":"e-43","action":"login_failed","kind":"ip","subject":"203.0.113.7","ts":1714979289}`))
	var ee *event.Error
	if errors.As(err, &ee) {
		fmt.Println(ee.Reason, ee.Field)
	}
	// Output:
	// login_failed email:a@example.com 2024-05-06T07:08:09.5Z 1
	// out_of_range ts
}

func ExampleSplit() {
	ts := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	for _, e := range event.Split("login_failed", ts, map[string]string{
		"ip":    "203.0.113.7",
		"email": "a@example.com",
	}) {
		fmt.Println(e.Key())
	}
	// Output:
	// email:a@example.com
	// ip:203.0.113.7
}

// Package event is floodgate's event contract: the JSON value of every
// message on the floodgate.events topic, its Kafka key, and the limits that a
// message must respect to be counted.
//
// An Event says "Action happened N times to Subject (of Kind) at TS". One
// request with several features (the IP and the e-mail of one login attempt)
// is published as one Event per feature; Split builds them.
//
// Producers build events and Encode them; consumers Decode every message
// value, which validates it, and CheckKey that the message key agrees with
// the value. Every rejection is an *Error whose Reason is a short stable code
// suitable for metrics labels and dead-letter headers.
//
//	e := event.Event{
//		ID:      event.NewID(),
//		Action:  "login_failed",
//		Kind:    "ip",
//		Subject: "203.0.113.7",
//		TS:      time.Now(),
//	}
//	value, err := event.Encode(e) // key: e.Key() == "ip:203.0.113.7"
//
//	got, err := event.Decode(msg.Value)
//	if err == nil {
//		err = event.CheckKey(msg.Key, got)
//	}
//	var ee *event.Error
//	if errors.As(err, &ee) {
//		// send to the DLQ with reason ee.Reason
//	}
//
// A subject (or attr value) that is not valid — too long, control
// characters — is not rejected: Encode, Key and Decode carry it as its
// digest (CanonicalSubject), so an event with a 300-byte e-mail from a form
// is counted under the digest instead of being dead-lettered.
//
// The wire format is documented in docs/events.md.
//
// Public: producers in any process (and consumers other than floodgate's
// own) share this contract with the aggregator, which decodes with the same
// code; it imports nothing else of floodgate.
package event

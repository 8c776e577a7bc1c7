package floodgatev1_test

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"

	floodgatev1 "github.com/floodgate-dev/floodgate/limiter/gen/floodgate/v1"
)

// A check as it crosses the wire; a client in another language builds the
// same message from limiter/proto/floodgate/v1/limiter.proto.
func Example() {
	req := &floodgatev1.CheckRequest{
		Action:   "login_failed",
		Subjects: []*floodgatev1.Subject{{Kind: "ip", Subject: "203.0.113.7"}},
	}
	b, err := protojson.Marshal(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	var back floodgatev1.CheckRequest
	if err := protojson.Unmarshal(b, &back); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(back.GetAction(), back.GetSubjects()[0].GetKind(), back.GetSubjects()[0].GetSubject())
	// Output: login_failed ip 203.0.113.7
}

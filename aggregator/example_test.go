package aggregator_test

import (
	"fmt"

	"github.com/floodgate-dev/floodgate/aggregator"
)

// A program that runs an aggregator configures it as the CLI does, from
// flags (their FLOODGATE_* variables and defaults fill the rest); New
// refuses what cannot run before anything is connected.
func ExampleNew() {
	cfg, err := aggregator.ParseFlags([]string{"--owner-takes", "--checkpoint-interval", "0"})
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = aggregator.New(cfg, nil)
	fmt.Println(err)
	// Output: --owner-takes answers from write-back memory: it needs --checkpoint-interval > 0 and no --evaluate-all
}

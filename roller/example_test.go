package roller_test

import (
	"fmt"

	"github.com/floodgate-dev/floodgate/roller"
)

// A program that rolls history configures the roller as `floodgate roller`
// does; New refuses a ladder it cannot apply before it connects.
func ExampleNew() {
	cfg, err := roller.ParseFlags([]string{"--ladder", "1m:2d,5m:1d"})
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = roller.New(cfg, nil)
	fmt.Println(err)
	// Output: --ladder: ladder: tier 5m horizon 1d must exceed the previous horizon 2d by at least one 5m bucket
}

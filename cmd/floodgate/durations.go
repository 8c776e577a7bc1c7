package main

import (
	"fmt"
	"reflect"
	"time"

	"github.com/alecthomas/kong"

	"github.com/floodgate-dev/floodgate/internal/history"
	"github.com/floodgate-dev/floodgate/internal/timespan"
)

// durationFlags makes every time.Duration flag read the timespan grammar
// (2d, 1w, 1h30m, and all of Go's forms), so a flag reads what a ladder or
// a rules window reads.
var durationFlags = kong.TypeMapper(reflect.TypeOf(time.Duration(0)), kong.MapperFunc(decodeDuration))

func decodeDuration(ctx *kong.DecodeContext, target reflect.Value) error {
	t, err := ctx.Scan.PopValue("duration")
	if err != nil {
		return err
	}
	var d time.Duration
	switch v := t.Value.(type) {
	case string:
		if d, err = timespan.ParseDuration(v); err != nil {
			return err
		}
	case time.Duration:
		d = v
	default:
		// kong's own mapper takes numbers (nanoseconds) from a resolver.
		rv := reflect.ValueOf(v)
		if !rv.CanConvert(target.Type()) || rv.Kind() == reflect.Bool {
			return fmt.Errorf("expected a duration (e.g. 90s, 1h30m, 2d) but got %v", v)
		}
		d = rv.Convert(target.Type()).Interface().(time.Duration) //nolint:forcetypeassert // converted to this type
	}
	target.SetInt(int64(d))
	return nil
}

// historySpan reads a range or a step of history queries: a duration of
// whole minutes.
func historySpan(s string) (time.Duration, error) {
	d, err := timespan.ParseDuration(s)
	if err != nil {
		return 0, err
	}
	return d, history.CheckSpan(d)
}

package window

import _ "embed"

// LuaLib (lib.lua) is the Lua shared by every floodgate script that
// touches a subject's buckets: the aggregator's apply script (live), the
// operators' admin script (operator), the read script and the strict-mode
// take script. Prepend it to a script body; everything is local to the
// script.
//
// Time is in whole Unix seconds. Every key of a script lives in one slot,
// the partition's hash tag ("{fg:p7}", passed as slot), and a subject's keys
// are
//
//	<slot>:<action:kind:subject>:s:<minute>  hash second-of-minute (0-59) -> count
//	<slot>:<action:kind:subject>:m:<hour>    hash minute-of-hour   (0-59) -> count
//	<slot>:<action:kind:subject>:h:<day>     hash hour-of-day      (0-23) -> count
//
// where <minute>, <hour>, <day> are Unix seconds divided by 60, 3600, 86400.
// Every event is added at each level the subject's longest window needs
// (seconds always, minutes for windows longer than a minute, hours for
// windows longer than an hour), so the levels agree. A window of exactly a
// minute or an hour is read from the finer levels: it covers a whole
// minute (hour) only at the one second in 60 (3600) where it is aligned on
// it, which is not worth a write per event.
//
// Functions (c is a per-run read cache of hashes; fg_incr keeps the hashes
// it has cached up to date, so a cache may live across writes):
//
//	fg_key(slot, f, level, n)           -> key of bucket hash n of a level ('s','m','h')
//	fg_hash(c, key)                     -> table field->count of one hash (one HGETALL, cached)
//	fg_split(a, b, w)                   -> segments covering seconds [a, b] in time order,
//	                                       coarsest levels a window of w seconds may use
//	fg_sum(c, slot, f, now, w)          -> events in the window of w seconds ending with second now
//	fg_until(c, slot, f, now, w, excess, ahead)
//	                                    -> first second t > now at which that window, plus
//	                                       the seconds up to now+ahead (events of callers whose
//	                                       clocks run ahead; 0 or nil for none), has dropped
//	                                       excess events (exact to the second)
//	fg_incr(c, slot, f, incs, maxw, now, slack, undo)
//	                                    -> add incs (table second->count) at every level maxw
//	                                       needs; new hashes expire when no window can read them;
//	                                       each write is recorded in undo (a table, or nil)
//	fg_guard(undo, fn)                  -> run fn; on a Redis error undo its writes and return
//	                                       an error reply (nil when fn succeeded); besides the
//	                                       entries the writers below record, undo may hold
//	                                       {'w', args, first, done}: done increments
//	                                       {key, field, n, ttl} of args from args[first] on
//	fg_zseen(key, value, sec, undo)     -> a distinct set saw value at second sec
//	fg_hset(key, field, value, undo)    -> set a bucket's arrival time
//	fg_dcount(key, a, b)                -> distinct values last seen in seconds [a, b]
//	fg_duntil(key, a, b, w, excess)     -> second at which a window [a, b] of w seconds holds
//	                                       excess fewer distinct values (no new ones assumed)
//	fg_fmt_window(w)                    -> "30s", "5m", "1h", "1d"
//	fg_deny_json(rule, limit, w, count, until_ms, message, since_ms)
//	                                    -> deny record JSON (see Deny)
//
//go:embed lib.lua
var LuaLib string

package attack

// inputs is every hostile input floodgate was found open to (issue 25),
// what holds now, and the test that keeps it so: each runs in make test
// against the real stack. It follows the measured table in docs/faults.md.
const inputs = "### Every hostile input, what holds now, and the test that keeps it\n\n" +
	"| tried | what holds now | test |\n|---|---|---|\n" +
	"| An IP over a strict 1/m limit sends a take with a 300-byte e-mail, or one with a TAB, NUL or invalid UTF-8 (HTTP 400, RLS InvalidArgument: a pass to Envoy's default and to limitermw; nothing counted) | " +
	"the request is decided on its valid subjects: 429 / OVER_LIMIT; a subject that is not valid as it stands is decided and counted as its digest `~sha256:<base64url SHA-256>` (`event.CanonicalSubject`) on every path, Kafka included | " +
	"limiter TestOverlongSubjectDoesNotHideADenial, TestInvalidUTF8IsASubjectNotAnError, TestKafkaPathCountsOverlongSubjects |\n" +
	"| Envoy sends a header's bytes as they are: invalid UTF-8 in a descriptor failed the call (Go's protobuf refuses it) | " +
	"the RLS and Connect servers read string fields leniently when the stock decoder refuses them; the value is a subject like any other | limiter TestInvalidUTF8IsASubjectNotAnError |\n" +
	"| A part that is invalid for real (a bad kind, 21 subjects, a bad id, n over the limit) beside an IP over its limit | " +
	"refused (400 / InvalidArgument) only when no valid subject is denied; otherwise 429 / OVER_LIMIT, nothing counted | limiter TestInvalidPartRefusedUnlessDenied, TestTakeMoreThanTheLimitIsInvalid |\n" +
	"| One RLS call of 64 KiB (~3,300 descriptors) beside a denied IP: minutes of a core (each status scanned every subject's limits), past the client's deadline; a 64 KiB POST to /v1/check: every subject decided, MiBs allocated, an answer 10 times the request | " +
	"at most 16 subjects (16 RLS descriptors, 16 entries each) are read, before any work: a denial among them is the answer, else 400 / InvalidArgument; statuses found by index; an ended context decides nothing; at most 32 bytes allocated per request byte and an answer smaller than the request on HTTP, Connect, RLS and admin | " +
	"limiter TestRLSCallCostIsBoundedByItsSize, TestHTTPAndConnectCostIsBoundedByItsSize, TestEndedContextDecidesNothing, FuzzParseQuery, FuzzRLSRequest, FuzzConnectRequest, operator TestAdminRequestCostIsBoundedByItsSize; attack rls-descriptors, http-subjects |\n" +
	"| An empty descriptor value (an `X-User-Email:` header sent empty) beside an IP over a strict limit: the RLS take InvalidArgument, the IP neither decided nor counted | " +
	"an empty subject is no subject on every surface (HTTP, Connect/gRPC, RLS, Go, limitermw): the rest is decided and counted | limiter TestEmptySubjectIsNoSubject; attack rls-empty-value |\n" +
	"| gRPC servers (RLS, owner takes) took any number of concurrent streams per connection | `--max-concurrent-streams` (250) on the RLS and HTTP/2 listeners | limiter TestServersBoundConcurrentStreams |\n" +
	"| limitermw (default `FailClosed: false`) with a request the limiter refuses | 400, the handler not run (`limitapi.ErrRefused`) | limitermw TestRefusedRequestIsNotAPass |\n" +
	"| Redis unreachable or stuck: exact checks (`Floodgate-Exact: 1`) and takes of a banned or denied subject answered allowed (open mode) | " +
	"memory answers first: bans and denials hold (`floodgate_limiter_failure_mode_total{mode=\"memory\"}`) | limiter TestDegradedAnswersHoldBansAndDenials; attack degraded-redis |\n" +
	"| Client `Floodgate-*` headers through nginx's auth_request (Exact on every check, a fixed Event-Id with --dedup) | the example passes none of the client's headers to the limiter; docs/limiter.md \"Trusted headers\" | examples/shortener TestNginxAuthRequest |\n" +
	"| `/readyz` showed Redis's internal address; `/metrics` open with a token set | `not ready: redis`, detail logged; `--metrics-auth` puts the token on /metrics | limiter TestReadyzAndMetricsShowNoInternals |\n" +
	"| One gzip record of 3 MiB (3 KB on the wire) before events over a limit: the DLQ refused its copy forever, the partition stalled, every subject allowed | " +
	"a dead letter over 16 KiB is a stub (first 1 KiB, size, SHA-256, reason); a write the DLQ refuses for good is dropped (ERROR, `floodgate_aggregator_dead_letter_dropped_total`); the events behind are counted and denied | " +
	"cmd/floodgate TestAggregatorGoesOnPastAnOversizedGzipRecord, aggregator TestGroupDropsDeadLettersTheDLQRefuses; attack compressed-record |\n" +
	"| A gzip or zstd bomb OOM-killed the aggregator, which crash-looped on its offset | " +
	"no record batch inflates past 8 MiB; the batch is skipped (ERROR with offsets, `floodgate_aggregator_unreadable_offsets_total`, a DLQ stub); live, history, rebuild and backtest skip the same offsets | " +
	"aggregator TestGroupGoesOnPastOversizedAndBombRecords, recovery TestRebuildSkipsABomb; attack compressed-record |\n" +
	"| Sixty records of 7.5 MiB, a zstd batch each of about 1 KB, each under the batch bound, written while the aggregator lagged: kafka-go's `Client.Fetch` inflated a whole 1 MiB response before handing any record over, 1.8 GB of RSS | " +
	"the Fetcher reads a response as it came and inflates its batches one at a time; a fetch stops before the record that would take it past `--read-ahead-bytes` (cut, never skipped: the next fetch reads on), and a batch gathers fetches only up to that bound: at most 4 × read-ahead + 10 MiB per partition and group (docs/operations.md) | " +
	"aggregator TestFetcherBoundsAFetchOfManyBombs, TestGroupAppliesAFetchOfBombsInBoundedBatches; attack fetch-of-bombs |\n" +
	"| A zstd frame of 21 bytes declaring a 128 MiB window (the broker accepts it): kafka-go's zstd reader allocated the window before the first byte, and its pool kept it; a record of 100 000 empty headers (200 KB, a few hundred bytes of zstd): 40 bytes per header once read | " +
	"zstd batches are inflated whole, within 8 MiB, with no window beside them (a frame declaring more is skipped as a bomb); a record of more than 64 headers is skipped alone (ERROR, metric, DLQ stub), the records around it read | " +
	"aggregator TestFetcherSkipsWhatItCannotReadAlone |\n" +
	"| The events topic took the broker's default message size | created with `max.message.bytes` 1 MiB + 32 KiB, the contract's largest batch | topics TestDefaultsBoundEventBatches |\n" +
	"| An event 5–6 s ahead: DLQ'd live, counted in history | up to `--max-future-skew` (1 m) ahead it is counted at the clock's time on every path (`floodgate_aggregator_clamped_total`) | aggregator TestGroupGoesOnPastOversizedAndBombRecords |\n" +
	"| 1,000,000 invented IPv6 subjects at half a 2/h limit: ~0.9 KB each in every limiter, seconds of blocked Redis on a restart (one HGETALL), pruning 64 a batch, idle partitions never | " +
	"`--state-max-subjects` (200000) caps the state, denials kept first; past it, subjects not held are read from Redis until the left-out states expire; snapshots by HSCAN pages; expired states pruned every 10 s on every owned partition; IPv6 counted by its /64 (`kinds: {ip: {ipv6_prefix: 64}}`) | " +
	"limiter TestStateCapAnswersOverflowExactly, TestIPv6CountedByPrefix, window TestSnapshotInPagesPlusStreamIsExact, TestPruneRemovesExpiredStatesByTime, live TestSinkPrunesAnIdlePartition; attack million-subjects |\n" +
	"| A partition resync deleted its states, then added the snapshot's: a denied subject allowed in between | the snapshot's states go in first, then what it no longer holds is dropped | limiter TestStateResetNeverDropsAHeldSubject |\n" +
	"| Strict takes of `distinct` and `bucket` rules wrote keys with no expiry or trim | trimmed, capped at 10000 values and expired as the aggregator's writes are | window TestStrictTakeKeysExpireAndAreTrimmed |\n" +
	"| `distinct: deny` (or `shadow`, `g`): subject x's distinct set is subject `x:d`'s deny record | those kind names are refused by the rules parser | rules TestParseErrors, window TestReservedDistinctKindsCollide |\n" +
	"| A relay failing one Redis write stopped publishing decisions until the next rebalance | it restarts from its cursor (`floodgate_live_relay_running{partition}`, `_restarts_total`) | live TestRelayRestartsAfterAFailedRedisWrite |\n" +
	"| Backdated events: a 1m partition per distinct day | only days the 1m tier keeps get one; the rest go where the ladder puts them | history TestSinkBackdatedDaysCreateNoPartitions |\n" +
	"| Redis losing its data taken for a new partition; then, reported, the partition went on without what the slot held | the batch or checkpoint that finds the slot gone is refused, and the partition is counted again from the log, the longest window back (ERROR, `floodgate_live_offset_missing_total`, `floodgate_aggregator_recounts_total`); so is a slot found gone at the start (`floodgate_aggregator_sink_offset_missing_total`) | cmd/floodgate TestAggregatorRecountsWhatRedisLost, live TestSinkRecountsASlotRedisLost, aggregator TestGroupRecountsASinkThatLostItsStore, TestGroupReportsASinkThatLostItsOffsets |\n" +
	"| `rebuild --reset` deleted every `<prefix>:*` key of a shared Redis, glob characters included | only floodgate's key shapes, the prefix escaped | recovery TestRebuildResetDeletesOnlyFloodgateKeys, window TestKeysOwnsOnlyTheirShapes |\n" +
	"| docker-compose.yml published Redis, Kafka, PostgreSQL and the limiter on every interface without passwords | ports bound to 127.0.0.1, passwords and a limiter token set; the limiter warns when it listens beyond loopback without a token | deploy TestComposePublishesOnLoopback, cmd/floodgate TestLimiterWarnsWithoutTokenBeyondLoopback |\n" +
	"| A take client with the owner takes' token posts to `aggregator --owner-takes`'s peer endpoint a take with a limit of 10⁹, or n = 2⁶³−1 (the window's sum overflows: taken, and every take of the subject after it) | " +
	"the peer endpoint requires the members' own credential (`--takes-peer-token-file`, never the take surfaces' token: 401); the owner plans the limits from its rules (others: 409), bounds n to 1..10⁶ and holds subjects and events to the event contract (400), before any take | " +
	"cmd/floodgate TestOwnerTakesPeerEndpointRefusesForgeries, TestOwnerTakesPeerCredentialRequired, takeroute TestPeerEndpointRefusesForgedTakes; attack peer-forgery |\n" +
	"| An attacker varies an e-mail's case and white space (`Victim@x.example`, `VICTIM@X.example`, ` victim@x.example `, a trailing TAB) or writes an IP as IPv4-mapped IPv6: each spelling a fresh counter (RLS takes against a strict 1/m at 36c81e2: OK to all 6) | " +
	"subjects normalized per kind (`kinds:` `normalize:`; email trim and lower, ip trim and canonical form by default; `none` opts out) on every path: limiter, aggregator counting, operator commands, erase, history, backtest | " +
	"rules TestStepsApply, limiter TestSpellingsOfASubjectAreOneSubject, live TestApplyCountsSpellingsAsOneSubject, operator TestOperatorActsOnTheSubjectCounted, history TestSinkStoresSubjectsNormalized, backtest TestBacktestFromHistoryCountsSpellingsAsOneSubject, cmd/floodgate TestEraseAndQueryNormalizeTheSubject; attack email-case |\n"

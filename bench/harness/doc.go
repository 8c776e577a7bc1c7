// Package harness holds what only the benchmark, fault and attack suites
// share: Redis INFO readings (commands, CPU, memory) and live-subject
// counts, the CPU time of a process, Kafka's own Java performance tools,
// the description of the machine measured, the statistics and units of
// their reports, and the blocks they rewrite in docs/*.md.
//
// What tests need as well (running a child process, waiting for its HTTP
// endpoint, scraping its metrics, reading topics back, paced load with an
// acknowledged tally) lives under stacktest/ (childproc, promtext,
// kafkatopics, pacedload), which the suites use too: test code never
// imports bench/, and nothing in floodgate's runtime depends on either.
package harness

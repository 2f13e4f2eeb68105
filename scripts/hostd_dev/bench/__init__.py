"""`scripts/bench`: hostd's data path measured against the physical limit (a bare pipe).

One module per scenario (`throughput`, `latency`, `ttft`, `cli`, `memory`, `store_lag`,
`claude_ttft`), each with `GOAL` and `run(ctx) -> Result`; `runner` parses the command line
and prints the table; `procs` starts the daemon, the bare driver and the windows process;
`stats` has the percentiles. docs/benchmarks.md describes the method and the latest results.
"""

"""Developer tools, not shipped with hostd: `hostd_dev.bench` (scripts/bench),
`hostd_dev.stress` (scripts/stress), `hostd_dev.bench_ttft`. Installed editable by
scripts/setup from scripts/pyproject.toml (distribution "hostd-dev")."""

# Tidemark: the two commands a newcomer needs are `make run` and `make test`.
SHELL := /bin/bash
CARGO ?= cargo

# AWS SAM CLI and cargo-lambda live in .venv/ (installed from PyPI on first use).
TOOLS = $(shell scripts/sam-tools.sh)
export SAM_CLI_TELEMETRY = 0
export SAM_CLI_BETA_RUST_CARGO_LAMBDA = 1

.PHONY: run run-signin bootstrap test soak services stop status clean-local validate build deploy watch invoke-ingest invoke-aggregator invoke-api invoke-watchdog invoke-exporter events sam-local heat bench bench-quick

## run: the whole pipeline locally: emulators, table and stream, ingest and aggregator behind
## emulated event-source mappings, the API on 127.0.0.1:3000, a simulated fleet (TIDEMARK_SIM=0
## turns it off). Ctrl-C stops it, and stops the emulators only if this run started them.
run:
	@before="$$(scripts/services.sh status)"; \
	scripts/services.sh start || exit $$?; \
	trap ':' INT TERM; \
	$(CARGO) run --quiet -p tidemark-devstack -- run; rc=$$?; \
	for s in dynamodb-local kinesis-mock moto-s3; do \
	  if grep -q "^$$s: stopped" <<<"$$before"; then scripts/services.sh stop $$s; fi; \
	done; \
	exit $$rc

## run-signin: `make run` behind a JWT authorizer (API Gateway's checks), the dashboard signing
## in at a local OpenID provider on 127.0.0.1:3002 (log in as `operator`: read, write, admin;
## or `viewer`: read only; any password). The provider stops with the run.
run-signin:
	@provider="$$(scripts/oidc.sh)" || exit $$?; \
	mkdir -p .local/logs; \
	OIDC_PORT=3002 OIDC_REDIRECT_URIS=http://127.0.0.1:$${TIDEMARK_API_PORT:-3000}/ui/ \
	  node "$$provider" >.local/logs/oidc.log 2>&1 & idp=$$!; \
	trap "kill $$idp 2>/dev/null" EXIT; \
	UI_AUTH=jwt JWT_ISSUER=http://127.0.0.1:3002 JWT_AUDIENCE=urn:tidemark:api \
	  UI_OIDC_CLIENT_ID=dashboard $(MAKE) --no-print-directory run

## bootstrap: start the emulators, create the table and the stream, print the endpoints
bootstrap:
	scripts/services.sh start
	$(CARGO) run --quiet -p tidemark-devstack -- bootstrap

## test: format check, clippy (warnings denied), unit, property and integration tests
test:
	scripts/test.sh

## soak: the never-stall property (tests/tests/it/never_stall, the module `never_stall` of the
## tests binary `it`) with SOAK_CASES cases a property
## (`make test` runs 1000); a failure prints its seed, TIDEMARK_SEED=<seed> replays it
SOAK_CASES ?= 20000
soak:
	TIDEMARK_SOAK_CASES=$(SOAK_CASES) $(CARGO) test -p tidemark-tests --test it never_stall

## services: start (or reuse) the local emulators only
services:
	scripts/services.sh start

## stop: stop the emulators this checkout started
stop:
	scripts/services.sh stop

status:
	scripts/services.sh status

## clean-local: stop the emulators and remove their installation under .local/
clean-local: stop
	rm -rf .local

## validate: sam validate --lint (cfn-lint included), then checkov's security scan of the
## template: any finding not skipped in the template (with its reason, next to the resource)
## fails
validate:
	PATH="$(TOOLS):$$PATH" sam validate --lint
	$(TOOLS)/../checkov/bin/checkov -f template.yaml --framework cloudformation --compact --quiet --skip-download

## build: sam build: every function (ingest, both aggregator roles, API, watchdog, exporter) as arm64 `bootstrap` binaries under .aws-sam/
build:
	PATH="$(TOOLS):$$PATH" sam build --beta-features

## deploy: build, then a guided deploy into the AWS account of your credentials
deploy: build
	PATH="$(TOOLS):$$PATH" sam deploy --guided

## watch: serve the functions locally for `make invoke-*` (cargo lambda watch)
watch:
	TIDEMARK_LOCAL=1 PATH="$(TOOLS):$$PATH" cargo lambda watch

## invoke-<function>: send the sample events dated now (`make events`) to a running `make watch`
invoke-ingest: events
	PATH="$(TOOLS):$$PATH" cargo lambda invoke tidemark-ingest --data-file events/fresh/kinesis-readings.json
invoke-aggregator: events
	PATH="$(TOOLS):$$PATH" cargo lambda invoke tidemark-aggregator --data-file events/fresh/ddb-stream-readings.json
invoke-api: events
	PATH="$(TOOLS):$$PATH" cargo lambda invoke tidemark-api --data-file events/fresh/apigw-get-device.json
invoke-watchdog: events
	PATH="$(TOOLS):$$PATH" cargo lambda invoke tidemark-watchdog --data-file events/fresh/scheduled-watchdog.json
invoke-exporter: events
	PATH="$(TOOLS):$$PATH" cargo lambda invoke tidemark-exporter --data-file events/fresh/scheduled-exporter.json

## events: sample Lambda events dated now, into events/fresh/ (git-ignored), for
## `sam local invoke` and `cargo lambda invoke` (events/*.json are test fixtures of 2026-04-20)
events:
	$(CARGO) run --quiet -p tidemark-devstack -- events events/fresh

## sam-local: the functions under `sam local invoke` and `sam local start-api` in Docker,
## against DynamoDB Local, outputs checked (scripts/sam-local.sh; starts and stops its own
## Docker daemon when none is running, which needs root)
sam-local: build
	scripts/sam-local.sh

## heat: partition-heat simulator: hottest partition key's writes/s with and without sharding,
## and with the hot device packed (HEAT_ARGS="--slot 1 --window 1")
heat:
	$(CARGO) run --quiet -p tidemark-schema --example partition_heat -- $(HEAT_ARGS)

## bench-quick: the main comparison (write units per reading, readings/s, API latency) on small
## fleets, in the debug build `make test` shares; no release build; its report goes to target/bench-quick/REPORT.md, never over the committed one
bench-quick:
	scripts/services.sh start
	$(CARGO) run -p tidemark-bench -- --quick

## bench: cost and speed on the local stack, side by side with the textbook design, in release
## builds (the two offline benchmarks alone take about half an hour); writes bench/REPORT.md and bench/report.json,
## the time from a breach (a threshold's, and a window rule's) entering Kinesis to its alert
## event into bench/ALERTS.md, what 2 window rules add per reading into bench/RULES.md, what
## judging a group rule over 10,000 devices reads into bench/GROUP_RULES.md, one
## aggregator invocation on the worst cases of bounded work into bench/WORST_CASE.md, what
## DynamoDB Local lets each way of writing readings reach into bench/CEILING.md, packed
## readings against single items at four ingest windows into bench/PACKING.md, what reading
## rollups costs with open days into bench/ROLLUP_READS.md, what the series route costs
## against raw readings and what quantile sketches cost and save into bench/SERIES.md, what a
## group series over 10,000 devices and fleet latest of 5,000 cost, and what group rollups add
## to the write bill and the busiest key's write rate, into bench/FLEETS.md, what the
## Parquet export reads per second and writes per reading into bench/EXPORT.md, what offline
## detection costs (the alerts role's deadline upkeep per reading, the watchdog's runs over
## 100,000 devices) into bench/OFFLINE.md, how soon a silent device's offline alert is
## published and its return resolves it into bench/OFFLINE_LATENCY.md, what a million devices
## do to the keys the fleet shares (the busiest second of each, through an outage, a top of
## the hour and a threshold storm, simulated) into bench/SCALE.md, then the dashboard's
## time to a drawn page and asset size into bench/DASHBOARD.md
bench:
	scripts/services.sh start
	$(CARGO) run --release -p tidemark-bench -- $(BENCH_ARGS)
	$(CARGO) run --release -p tidemark-bench --example alert_latency
	$(CARGO) run --release -p tidemark-bench --example worst_case
	$(CARGO) run --release -p tidemark-bench --example write_ceiling
	$(CARGO) run --release -p tidemark-bench --example packing
	$(CARGO) run --release -p tidemark-bench --example rollup_reads
	$(CARGO) run --release -p tidemark-bench --example series_reads
	$(CARGO) run --release -p tidemark-bench --example fleet_reads
	$(CARGO) run --release -p tidemark-bench --example group_writes
	$(CARGO) run --release -p tidemark-bench --example export
	$(CARGO) run --release -p tidemark-bench --example offline
	$(CARGO) run --release -p tidemark-bench --example offline_latency
	$(CARGO) run --release -p tidemark-bench --example rule_cost
	$(CARGO) run --release -p tidemark-bench --example group_rule_cost
	$(CARGO) run --release -p tidemark-bench --example scale
	scripts/browser.sh
	$(CARGO) run --release -p tidemark-devstack --example dashboard_speed

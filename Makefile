# Tidemark: the two commands a newcomer needs are `make run` and `make test`.
SHELL := /bin/bash
CARGO ?= cargo

.PHONY: run test services stop status clean-local

## run: start DynamoDB Local and kinesis-mock, create the table and the stream, print endpoints
run:
	scripts/services.sh start
	$(CARGO) run --quiet -p tidemark-devstack -- bootstrap

## test: format check, clippy (warnings denied), unit, property and integration tests
test:
	scripts/test.sh

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

# Two commands set everything up: `make demo` and `make test`. Each installs what is missing first.
SWIFT ?= swift
APT_PACKAGES := libsqlite3-dev liblz4-dev libmicrohttpd-dev pkg-config ffmpeg lz4 sqlite3 curl
SWIFT_FORMAT_PATHS := Package.swift Sources Tests Migrations

.PHONY: deps build release demo test test-tsan lint format bench clean

deps:
	@missing=""; \
	for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		sudo=""; [ "$$(id -u)" = 0 ] || sudo=sudo; \
		$$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing \
			</dev/null || { echo "could not install:$$missing (apt-get failed)" >&2; exit 1; }; \
	fi

build: deps
	$(SWIFT) build

release: deps
	$(SWIFT) build -c release --product rewind

demo: release
	.build/release/rewind demo

lint:
	$(SWIFT) format lint --strict --recursive $(SWIFT_FORMAT_PATHS)

format:
	$(SWIFT) format format --in-place --recursive $(SWIFT_FORMAT_PATHS)

test: deps lint
	$(SWIFT) build --build-tests
	$(SWIFT) test --skip-build --disable-xctest

test-tsan: deps
	$(SWIFT) test --sanitize=thread --scratch-path .build/tsan --filter "RewindCoreTests|pairedDecoding|damagedFrameFromIndex|Y4MWriterTests|RecorderControlTests|HTTPTransportTests|MarkerTests|aSlowQuery|SegmentSalvageTests|SmallRingTests|FileSystemFaultTests"

bench: release
	.build/release/rewind bench

clean:
	rm -rf .build

# Two commands set everything up: `make demo` and `make test`. Each installs what is missing first.
SWIFT ?= swift
APT_PACKAGES := libsqlite3-dev liblz4-dev libturbojpeg0-dev zlib1g-dev libmicrohttpd-dev pkg-config ffmpeg lz4 sqlite3 \
	systemd curl chromium chromium-driver python3-selenium python3-venv faketime
SWIFT_FORMAT_PATHS := Package.swift Sources Tests Migrations
PREFIX ?= /usr/local
BINDIR := $(PREFIX)/bin
UNITDIR := $(PREFIX)/lib/systemd/system
DOCDIR := $(PREFIX)/share/rewind

.PHONY: deps build release demo test test-tsan test-asan fuzz lint format bench clean install

# schemathesis (PyPI), which checks a live recorder's answers against its OpenAPI document, in a virtual environment
# of Debian's Python: Tests/API/requirements.txt pins it and everything it needs.
API_VENV := .build/venv
API_TESTER := $(API_VENV)/installed

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

$(API_TESTER): Tests/API/requirements.txt | deps
	rm -rf $(API_VENV)
	/usr/bin/python3 -m venv $(API_VENV)
	$(API_VENV)/bin/pip install --quiet --disable-pip-version-check --no-input -r Tests/API/requirements.txt
	$(API_VENV)/bin/st --version
	touch $@

build: deps
	$(SWIFT) build

release: deps
	$(SWIFT) build -c release --product rewind

# The Swift standard library and Foundation linked in: the installed binary needs only libsqlite3 and liblz4 (and
# libc) at run time, no Swift toolchain. Its own build folder, so it never mixes with the debug or release builds.
install: deps
	$(SWIFT) build -c release --static-swift-stdlib --product rewind --scratch-path .build/static
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(DOCDIR)
	install -m 0755 .build/static/release/rewind $(DESTDIR)$(BINDIR)/rewind
	install -m 0644 Sources/RewindControl/API/openapi.json $(DESTDIR)$(DOCDIR)/openapi.json
	sed 's|@BINDIR@|$(BINDIR)|g' contrib/rewind@.service > $(DESTDIR)$(UNITDIR)/rewind@.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/rewind@.service
	@echo "installed $(DESTDIR)$(BINDIR)/rewind, $(DESTDIR)$(UNITDIR)/rewind@.service and $(DESTDIR)$(DOCDIR)/openapi.json"

demo: release
	.build/release/rewind demo

lint:
	$(SWIFT) format lint --strict --recursive $(SWIFT_FORMAT_PATHS)

format:
	$(SWIFT) format format --in-place --recursive $(SWIFT_FORMAT_PATHS)

test: deps lint $(API_TESTER)
	$(SWIFT) build --build-tests
	$(SWIFT) test --skip-build --disable-xctest

# Every test under ThreadSanitizer but those that hold a process to a memory or address-space limit (the
# sanitizer's shadow memory counts in RSS, and it needs terabytes of address space), and the one of glibc's malloc
# giving its free holes back (a sanitizer's allocator is its own), and those of a process under `faketime`
# (libfaketime's clock_gettime looks its symbols up with dlsym, which allocates: called by the sanitizer's allocator
# while it holds its own lock, the process deadlocks at its first allocation of a new size), and the one of exports
# under a file size limit (ThreadSanitizer's runtime faults, SIGBUS, in a process under RLIMIT_FSIZE).
TSAN_SKIP := RewindCLITests\.SoakTests|AddressSpaceLimitTests|aSoakOnADiskThatFillsUpByItselfFails
TSAN_SKIP := $(TSAN_SKIP)|sigtermEndsASoakWaitingForASlowDisk|a1080p60SoakWith64MiBPassesThroughCriticalPressure
TSAN_SKIP := $(TSAN_SKIP)|trimmingTheHeapGivesBackTheHolesFreedBuffersLeave|WallClockRangeTests
TSAN_SKIP := $(TSAN_SKIP)|writesThatFailPartWayEndWithAnError

test-tsan: deps $(API_TESTER)
	$(SWIFT) build --build-tests --sanitize=thread --scratch-path .build/tsan
	$(SWIFT) test --skip-build --disable-xctest --sanitize=thread --scratch-path .build/tsan --skip "$(TSAN_SKIP)"

# Every test under AddressSanitizer with LeakSanitizer (a leak ends the process that has it with status 23) but
# those of TSAN_SKIP and the thread-limit tests (LeakSanitizer needs a thread of its own at exit).
ASAN_SKIP := $(TSAN_SKIP)|ThreadLimitTests

test-asan: deps $(API_TESTER)
	$(SWIFT) build --build-tests --sanitize=address --scratch-path .build/asan
	LSAN_OPTIONS=suppressions=$(CURDIR)/.ci/lsan.supp $(SWIFT) test --skip-build --disable-xctest --sanitize=address \
		--scratch-path .build/asan --skip "$(ASAN_SKIP)"

# Each fuzz target of FUZZ_TARGETS (`rewind-fuzz --list`) under libFuzzer for FUZZ_SECONDS, with AddressSanitizer,
# starting from its seeds, the reproducers the tests replay, and what earlier runs found (.build/fuzz/corpus). An
# input that breaks a target is kept in .build/fuzz/crashes and fails the run: add it to the target's reproducers.
FUZZ_TARGETS ?= segment payload codec journal y4m values request api query
FUZZ_SECONDS ?= 60
FUZZ_RUNTIME = $(firstword $(wildcard $(dir $(realpath $(shell command -v swiftc)))../lib/clang/*/lib/linux/libclang_rt.fuzzer_no_main-$(shell uname -m).a))
FUZZ_REPRODUCERS := Tests/RewindFuzzingTests/Reproducers

fuzz: deps
	@[ -n "$(FUZZ_RUNTIME)" ] || { echo "libFuzzer's runtime (libclang_rt.fuzzer_no_main) is not in this Swift toolchain" >&2; exit 1; }
	$(SWIFT) build -c release --product rewind-fuzz --scratch-path .build/fuzz \
		-Xswiftc -sanitize=address -Xswiftc -sanitize-coverage=edge,inline-8bit-counters,pc-table,trace-cmp \
		-Xlinker -u -Xlinker LLVMFuzzerRunDriver -Xlinker $(FUZZ_RUNTIME) -Xlinker -lstdc++
	@mkdir -p .build/fuzz/crashes; status=0; \
	for t in $(FUZZ_TARGETS); do \
		mkdir -p .build/fuzz/corpus/$$t; kept=$(FUZZ_REPRODUCERS)/$$t; [ -d $$kept ] || kept=; \
		.build/fuzz/release/rewind-fuzz $$t --seeds .build/fuzz/seeds/$$t || exit 1; \
		echo "fuzzing $$t for $(FUZZ_SECONDS) s"; \
		LSAN_OPTIONS=suppressions=$(CURDIR)/.ci/lsan.supp .build/fuzz/release/rewind-fuzz $$t --fuzz -max_total_time=$(FUZZ_SECONDS) -timeout=20 -rss_limit_mb=4096 \
			-max_len=65536 -print_final_stats=1 -artifact_prefix=.build/fuzz/crashes/$$t- \
			.build/fuzz/corpus/$$t .build/fuzz/seeds/$$t $$kept > .build/fuzz/$$t.log 2>&1 \
			|| { status=1; echo "$$t: an input broke it (.build/fuzz/$$t.log, .build/fuzz/crashes/)"; }; \
		grep -E '^stat::(number_of_executed_units|new_units_added)|^#[0-9]+.*DONE' .build/fuzz/$$t.log | tail -3; \
	done; exit $$status

bench: release
	.build/release/rewind bench

clean:
	rm -rf .build

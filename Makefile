# Two commands on a fresh machine (see README.md):
#   make demo   installs what is missing, builds, runs a demo capacity test and its Spark report
#   make test   installs what is missing, builds, runs the test suite
# Everything Python goes into .venv; system packages (a C compiler, a Java 17+ runtime for Spark,
# and libzmq's headers for the C peers of tests/ and bench/: the engine's build needs none) are
# installed with apt-get when possible, otherwise named in one line.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
DEMO   ?= runs/demo
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all prereqs test-prereqs venv build demo test test-system test-fast browser engine-debug test-engine-debug typecheck lint docs scenarios bench bench-smoke faults deploys fuzz clean

all: build

# apt-get installs the packages named in $$missing where it can (root or sudo), else names them
APT_INSTALL = if [ -n "$$missing" ]; then \
	  if command -v apt-get >/dev/null 2>&1 && { [ "$$(id -u)" = 0 ] || sudo -n true 2>/dev/null; }; then \
	    echo "installing:$$missing"; \
	    $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing >/dev/null || exit 1; \
	  else \
	    echo "zmqload: please install:$$missing  (Debian/Ubuntu: sudo apt-get install$$missing)"; exit 1; \
	  fi; \
	fi

# What zmqload needs: Java for the report, a venv and a C compiler. No libzmq: the engine loads
# pyzmq's (or the system's, or a file's: --libzmq) when it runs.
prereqs:
	@missing=""; \
	jv=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1); \
	if [ -z "$$jv" ] || [ "$$jv" -lt 17 ]; then missing="$$missing openjdk-17-jre-headless"; fi; \
	$(PYTHON) -c "import venv, ensurepip" 2>/dev/null || missing="$$missing python3-venv"; \
	command -v cc >/dev/null 2>&1 || missing="$$missing build-essential"; \
	$(APT_INSTALL)

# What the tests need beside: libzmq's headers and the system's libzmq, for the C peers that the
# tests and benchmarks compile the way their users write them (#include <zmq.h>, -lzmq) and for
# the runs on `--libzmq system`; Debian's Prometheus server, which scrapes a run's --metrics in
# tests/test_metrics_export.py.
test-prereqs:
	@missing=""; \
	pkg-config --exists libzmq 2>/dev/null || missing="$$missing libzmq3-dev pkg-config"; \
	command -v prometheus >/dev/null 2>&1 || missing="$$missing prometheus"; \
	$(APT_INSTALL)

$(VENV)/.installed: pyproject.toml setup.py
	@$(MAKE) --no-print-directory prereqs
	@echo "zmqload: 1/3 making $(VENV) (its own Python packages, nothing installed system-wide)"
	@$(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip
	@echo "zmqload: 2/3 build tools (Cython, numpy)"
	@$(PY) -m pip install -q "setuptools>=64" wheel "Cython>=3.0" "numpy>=1.24"
	@echo "zmqload: 3/3 zmqload and what it uses (pyzmq, pyarrow, pyspark for the report, matplotlib, pytest): about 1.4 GB, a few minutes the first time"
	@$(PY) -m pip install -q --no-build-isolation -e ".[test,report,remote]"
	@touch $@

venv: $(VENV)/.installed

# Rebuild the extension when the Cython or C sources change; archive Spark's classes once for
# the report's JVM (zmqload/analysis/class_archive.py; what it saves: docs/REPORT.md).
build: venv
	@$(PY) setup.py -q build_ext --inplace 2>&1 | grep -v -e "^running" -e "^copying" -e "Warning" -e "warnings.warn" || true
	@$(PY) -c "import zmqload._engine as e; print('zmqload engine built; it runs libzmq', '.'.join(map(str, e.libzmq_version())), '(--libzmq: another)')"
	@$(PY) -m zmqload.analysis.make_class_archive

# The demo: a capacity search (1 s probes, about a minute) for a pub-sub consumer doing 20 us
# of work per message, an unpaced max-throughput run, and the report, which opens with the
# search's answer in one sentence. HWM 1000 (libzmq's default), not 100: with 100 the PUB's pipe
# overflows on a few ms of scheduling stall at any rate, and the answer measured that jitter
# instead of the consumer (docs/CAPACITY.md). A loose p99 SLO (50 ms): the question is what the consumer
# carries, and the answer states the p99 it costs (the report judges its runs by the same SLO).
demo: build
	@rm -rf $(DEMO)
	@echo "zmqload demo 1/3: a capacity search of a pub-sub consumer doing 20 µs of work per message (about a minute)"
	$(PY) -m zmqload capacity --pattern pub-sub --transport tcp --size 256 --rcvhwm 1000 --sndhwm 1000 --consumer-delay-us 20 --slo-p99-us 50000 --start-rate 20k --probe-duration 1 --out $(DEMO)/capacity
	@echo "zmqload demo 2/3: an unpaced push-pull run of 2,000,000 messages (its max throughput)"
	$(PY) -m zmqload run --pattern push-pull --transport tcp --size 64 --count 2000000 --out $(DEMO)/max
	@echo "zmqload demo 3/3: the report (Spark; the first one starts a JVM)"
	$(PY) -m zmqload report $(DEMO)/capacity $(DEMO)/max --out report
	@echo "report: file://$$(pwd)/report/index.html"
	@$(PY) -c "from zmqload.report.server import status_line; print(status_line())"

# Two workers (pytest-xdist), a test file each at a time: the suite's runs wait on sockets, JVMs and
# clocks much of the time, so two share this 2-core machine's CPUs well (three were no faster).
# `make test` is every test but the system tests (clusters, faults, scenarios, the browser:
# tests/conftest.py SYSTEM_FILES), which `make test-system` runs; CI runs both. The files go out in
# conftest's order, the slow ones first (--no-loadscope-reorder): xdist's own, most tests first, left
# the long files of few tests (a capacity search, a sweep and its report) to start last.
TEST_WORKERS ?= 2
test: build test-prereqs
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=30 -m "not system" tests

# The system set's workers on their own, for a bigger machine: here three took 686 s instead of
# ~750, but two timing-bound tests failed under that load, so two it is.
SYSTEM_TEST_WORKERS ?= $(TEST_WORKERS)
test-system: build browser test-prereqs
	$(PY) -m pytest -q -n $(SYSTEM_TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=30 -m system tests

# A headless browser for tests/analysis/test_page.py (it renders the report's page and measures it):
# Debian's chromium, installed with apt-get when possible; never a failure (the test skips without it).
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	if command -v apt-get >/dev/null 2>&1 && { [ "$$(id -u)" = 0 ] || sudo -n true 2>/dev/null; }; then \
	  echo "installing: chromium (for the report page's test)"; \
	  { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium >/dev/null; } \
	    || echo "zmqload: chromium not installed; tests/analysis/test_page.py will skip"; \
	else \
	  echo "zmqload: no chromium (sudo apt-get install chromium); tests/analysis/test_page.py will skip"; \
	fi

# A developer's loop (a few minutes): every test but those marked slow (Spark reports, scenarios,
# capacity searches; tests/conftest.py SLOW_FILES) and the system tests. CI runs `make test`
# and `make test-system`.
test-fast: build test-prereqs
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not slow and not system" tests

# The checked engine (ZMQLOAD_DEBUG=1, setup.py): Cython bounds/wraparound/initialized checks,
# -O0 -g, AddressSanitizer and UBSan. It is built with a copy of the package into
# build/debug/lib, never in place, so the optimised engine next to the sources stays as is.
DEBUG_LIB    := build/debug/lib
ENGINE_TESTS := tests/test_engine.py tests/test_contract.py tests/test_records.py tests/test_runs.py
# Rate accuracy is a property of the optimised build; the checked one is slow by design.
DEBUG_SKIP   := not hits_target_rate

engine-debug: venv
	@mkdir -p build
	@ZMQLOAD_DEBUG=1 $(PY) setup.py -q build_py build_ext >build/debug.log 2>&1 || { cat build/debug.log; exit 1; }

# The engine tests against the checked engine; any ASan or UBSan finding aborts the run.
# Python is not instrumented, so the extension's own libasan is preloaded; CPython leaks by
# design (detect_leaks=0); PYTHONMALLOC=malloc puts Python's objects where ASan can see
# them; --capture=sys leaves file descriptor 2 alone, so a sanitizer report that kills the
# process is still shown. Run from build/debug/lib: `zmqload` is the copy next to the checked engine.
test-engine-debug: engine-debug
	cd $(DEBUG_LIB) && \
	asan="$$(ldd zmqload/_engine.*.so | awk '/libasan/ {print $$3}')" && test -n "$$asan" && \
	LD_PRELOAD="$$asan" ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	PYTHONMALLOC=malloc $(abspath $(PY)) -m pytest -q -p no:cacheprovider --capture=sys -k "$(DEBUG_SKIP)" \
	  $(addprefix $(CURDIR)/,$(ENGINE_TESTS))

# Types: mypy on what pyproject.toml's [tool.mypy] lists, then the engine's stub against the
# built extension (stubtest: every public name and parameter, nothing missing or extra).
typecheck: build
	@$(PY) -m mypy --version >/dev/null 2>&1 || $(PY) -m pip install -q mypy
	$(PY) -m mypy
	$(PY) -m mypy.stubtest zmqload._engine --mypy-config-file pyproject.toml --allowlist .ci/stubtest-allowlist

# The linter (ruff, pyproject.toml [tool.ruff]) over the package, the tests and the benchmarks.
lint: venv
	$(VENV)/bin/ruff check zmqload tests bench setup.py
	$(VENV)/bin/ruff format --check -q zmqload tests bench setup.py

# The option reference, docs/OPTIONS.md, generated from the option tables that `zmqload COMMAND --help`
# is built from (zmqload/cli/options_doc.py); tests/test_options.py fails when the page is stale. And the
# records' field tables in docs/RECORDS.md, docs/CAPACITY.md and docs/SWEEPS.md, from their types
# (zmqload/cli/records_doc.py); tests/test_run_record.py and tests/test_search_record.py hold them.
docs: build
	$(PY) -m zmqload.cli.options_doc docs/OPTIONS.md
	$(PY) -m zmqload.cli.records_doc run_record docs/RECORDS.md
	$(PY) -m zmqload.cli.records_doc search_record docs/CAPACITY.md
	$(PY) -m zmqload.cli.records_doc sweep_record docs/SWEEPS.md

# Every scenario in full form (not CI; `zmqload scenario list` says how long): regenerates
# docs/HWM-VERDICTS.md whole, its header naming this command, the date and the libzmq.
scenarios: build
	$(PY) -m zmqload scenario run --all --out runs/scenarios --markdown docs/HWM-VERDICTS.md

bench: build test-prereqs
	@mkdir -p .benchmarks
	$(PY) -m pytest bench -o python_files="bench_*.py" -s --benchmark-only --benchmark-columns=median,min,max,rounds --benchmark-json=.benchmarks/latest.json

# Faults injected into real runs (killed workers and controller, a full 5 MiB tmpfs when
# root), each checked against its records with numpy: the table of docs/RELIABILITY.md.
faults: build
	$(PY) tests/fault_table.py $(FAULTS_ARGS)

# Rolling restarts at 50k msg/s (consumers in turn, or the producer), each row's loss checked
# against numpy over the records: the table of docs/DEPLOYS.md (~3 min).
deploys: build
	$(PY) tests/deploy_table.py $(DEPLOYS_ROWS)

# Every parser of bytes from outside (control messages, the worker spec, run.json and the other records,
# --size @FILE, --payload, CURVE key files, sweep files, option values, and the receiver's header and
# frames) fuzzed for FUZZ_SECONDS each, randomized: tests/test_fuzz_inputs.py and
# tests/test_fuzz_receiver.py, whose short derandomized runs are part of `make test`. Each
# target's executions and seconds go to build/fuzz-log.tsv; a finding fails its test with the shrunk
# input, which becomes an @example there once the parser is fixed (docs/FUZZING.md).
FUZZ_SECONDS ?= 150
fuzz: build
	@mkdir -p build && rm -f build/fuzz-log.tsv
	ZMQLOAD_FUZZ_SECONDS=$(FUZZ_SECONDS) ZMQLOAD_FUZZ_LOG=$(CURDIR)/build/fuzz-log.tsv \
	  $(PY) -m pytest -q -p no:cacheprovider tests/test_fuzz_inputs.py tests/test_fuzz_receiver.py; status=$$?; \
	  printf 'target\texamples\tseconds\n' | cat - build/fuzz-log.tsv; exit $$status

# Runs every benchmark once with tiny sizes so benchmark code cannot rot (CI).
bench-smoke: build test-prereqs
	ZMQLOAD_BENCH_SMOKE=1 $(PY) -m pytest -q bench -o python_files="bench_*.py" --benchmark-disable

clean:
	rm -rf build $(VENV) zmqload/*.c zmqload/*.so *.egg-info .pytest_cache .benchmarks

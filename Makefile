# taskmill - native task worker daemon.

VERSION := 0.1.0
PREFIX ?= /usr/local
DESTDIR ?=
BINDIR = $(PREFIX)/bin
LIBDIR = $(PREFIX)/lib
INCDIR = $(PREFIX)/include
PLUGINDIR = $(LIBDIR)/taskmill/plugins
SYSCONFDIR ?= /etc
UNITDIR ?= $(PREFIX)/lib/systemd/system
PKGCONFIGDIR = $(LIBDIR)/pkgconfig

BUILD ?= build
# make V=1 shows the full commands
ifeq ($(V),1)
Q =
else
Q = @
endif
CC ?= cc
PKG_CONFIG ?= pkg-config
USE_WERROR ?= 1
SANITIZER ?=

WARNINGS = -Wall -Wextra -Wformat=2 -Wstrict-prototypes -Wwrite-strings \
	-Wmissing-prototypes -Wshadow -Wvla
ifeq ($(USE_WERROR),1)
WARNINGS += -Werror
endif

OPTIMIZATION ?= -O2
DEBUG ?= -g
REAL_CFLAGS = -std=c11 -D_GNU_SOURCE $(OPTIMIZATION) $(DEBUG) $(WARNINGS) \
	-pthread -DTM_VERSION='"$(VERSION)"' \
	-DTM_DEFAULT_CONFIG='"$(SYSCONFDIR)/taskmill/taskmill.yaml"' $(CFLAGS)
REAL_LDFLAGS = -pthread $(LDFLAGS)

ifneq ($(SANITIZER),)
ifeq ($(SANITIZER),address)
SAN_FLAGS = -fsanitize=address,undefined
else ifeq ($(SANITIZER),undefined)
SAN_FLAGS = -fsanitize=undefined
else ifeq ($(SANITIZER),thread)
SAN_FLAGS = -fsanitize=thread
else
$(error SANITIZER must be address, undefined or thread, not '$(SANITIZER)')
endif
REAL_CFLAGS += $(SAN_FLAGS) -fno-sanitize-recover=all -fno-omit-frame-pointer
REAL_LDFLAGS += $(SAN_FLAGS)
endif

# librabbitmq and openssl: headers only; the daemon opens them when a
# configuration names their broker (src/util/dlib.h), so it never links them
DL_PKGS = librabbitmq openssl libcurl
DEP_PKGS = hiredis libcjson yaml-0.1 libmicrohttpd libprotobuf-c
DEP_CFLAGS := $(shell $(PKG_CONFIG) --cflags $(DEP_PKGS) $(DL_PKGS) 2>/dev/null)
DEP_LIBS := $(shell $(PKG_CONFIG) --libs $(DEP_PKGS) 2>/dev/null)
CHECK_CFLAGS := $(shell $(PKG_CONFIG) --cflags check 2>/dev/null)
CHECK_LIBS := $(shell $(PKG_CONFIG) --libs check 2>/dev/null)

# the core: src/*.c and one level of subdirectories (src/redis/, ...)
CORE_SRCS = $(filter-out src/cli/main.c,$(wildcard src/*.c src/*/*.c))
CORE_OBJS = $(CORE_SRCS:src/%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/console_assets.o \
	$(OTLP_OBJS)
# The OTLP trace export's wire format: the official OpenTelemetry protos,
# vendored in vendor/opentelemetry-proto/ (its README names the version),
# compiled by protoc-c at build time into $(BUILD)/gen/. Generated, not
# checked in: the .proto files are the one source, and protoc-c
# (protobuf-c-compiler) is a build dependency like the libraries, so a
# generated file can never drift from its definition or from the
# libprotobuf-c it runs against. The objects live in $(BUILD)/gen/, outside
# $(BUILD)/obj/: they belong to no layer of src/.
OTLP_PROTO_DIR = vendor/opentelemetry-proto
OTLP_PROTOS = opentelemetry/proto/common/v1/common.proto \
	opentelemetry/proto/resource/v1/resource.proto \
	opentelemetry/proto/trace/v1/trace.proto \
	opentelemetry/proto/collector/trace/v1/trace_service.proto
OTLP_GEN_SRCS = $(OTLP_PROTOS:%.proto=$(BUILD)/gen/%.pb-c.c)
OTLP_GEN_HDRS = $(OTLP_PROTOS:%.proto=$(BUILD)/gen/%.pb-c.h)
OTLP_OBJS = $(OTLP_PROTOS:%.proto=$(BUILD)/gen/%.pb-c.o)
PROTOC_C ?= protoc-c
# the console's page, style and script, compiled in as byte arrays
CONSOLE_FILES = src/console/index.html src/console/console.css \
	src/console/console.js
PLUGINS = noop add sleep fail journal exec
# The language hosts: lua (liblua5.4-dev) and python (python3-dev) are
# built when pkg-config finds them; USE_LUA / USE_PYTHON = yes|no|auto.
USE_LUA ?= auto
USE_PYTHON ?= auto
HAVE_LUA := $(shell $(PKG_CONFIG) --exists lua5.4 2>/dev/null && echo yes)
HAVE_PYTHON := $(shell $(PKG_CONFIG) --exists python3-embed 2>/dev/null && echo yes)
ifeq ($(USE_LUA),yes)
ifneq ($(HAVE_LUA),yes)
$(error USE_LUA=yes but pkg-config finds no lua5.4 (apt-get install liblua5.4-dev))
endif
endif
ifeq ($(USE_PYTHON),yes)
ifneq ($(HAVE_PYTHON),yes)
$(error USE_PYTHON=yes but pkg-config finds no python3-embed (apt-get install python3-dev))
endif
endif
ifneq ($(USE_LUA),no)
ifeq ($(HAVE_LUA),yes)
PLUGINS += lua
endif
endif
ifneq ($(USE_PYTHON),no)
ifeq ($(HAVE_PYTHON),yes)
PLUGINS += python
endif
endif
PLUGIN_SOS = $(PLUGINS:%=$(BUILD)/plugins/%.so)
TEST_PLUGIN_SRCS = $(wildcard tests/plugins/*.c)
TEST_PLUGIN_SOS = $(TEST_PLUGIN_SRCS:tests/plugins/%.c=$(BUILD)/test-plugins/%.so)
UNIT_SRCS = $(wildcard tests/unit/test_*.c)
UNIT_BINS = $(UNIT_SRCS:tests/unit/%.c=$(BUILD)/tests/%)

.PHONY: all deps deps-demo check check-layers check-unit check-integration \
	check-asan check-cluster check-tsan check-soak demo bench install clean plugins \
	test-plugins unit-bins

all: $(BUILD)/taskmill $(PLUGIN_SOS)
	@$(if $(and $(filter auto,$(USE_LUA)),$(if $(HAVE_LUA),,x)),echo "note: lua.so not built: liblua5.4-dev missing (make deps installs it)",:)

plugins: $(PLUGIN_SOS)

deps:
	@scripts/install-deps.sh

# only what the demo needs: the build dependencies, redis-server, curl
deps-demo:
	@scripts/install-deps.sh --demo

$(BUILD)/obj/%.o: src/%.c $(wildcard include/*.h src/*/*.h) $(OTLP_GEN_HDRS) | $(BUILD)/obj
	@$(if $(Q),echo "  CC      $<")
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(REAL_CFLAGS) $(DEP_CFLAGS) -Iinclude -Isrc -I$(BUILD)/gen -c -o $@ $<

# One protoc-c run writes every generated file (the protos import each
# other); the stamp stands for them all.
$(OTLP_GEN_SRCS) $(OTLP_GEN_HDRS): $(BUILD)/gen/otlp.stamp
$(BUILD)/gen/otlp.stamp: $(addprefix $(OTLP_PROTO_DIR)/,$(OTLP_PROTOS))
	@$(if $(Q),echo "  PROTOC  $(OTLP_PROTO_DIR)")
	@mkdir -p $(dir $@)
	$(Q)$(PROTOC_C) --proto_path=$(OTLP_PROTO_DIR) --c_out=$(BUILD)/gen \
		$(OTLP_PROTOS) && touch $@

# generated code: the project's warnings are not protoc-c's
$(BUILD)/gen/%.pb-c.o: $(BUILD)/gen/%.pb-c.c $(OTLP_GEN_HDRS)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) -std=c11 $(OPTIMIZATION) $(DEBUG) $(SAN_FLAGS) -pthread \
		$(CFLAGS) $(DEP_CFLAGS) -I$(BUILD)/gen -c -o $@ $<

$(BUILD)/gen/console_assets.c: $(CONSOLE_FILES) scripts/embed-console.sh
	@$(if $(Q),echo "  EMBED   $@")
	@mkdir -p $(dir $@)
	$(Q)scripts/embed-console.sh $(CONSOLE_FILES) >$@.tmp && mv $@.tmp $@

$(BUILD)/obj/console_assets.o: $(BUILD)/gen/console_assets.c src/http/console_private.h | $(BUILD)/obj
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(REAL_CFLAGS) -Iinclude -Isrc -c -o $@ $<

$(BUILD)/taskmill: $(BUILD)/obj/cli/main.o $(CORE_OBJS)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(REAL_LDFLAGS) -rdynamic -o $@ $^ $(DEP_LIBS) -ldl -lm

# The example plugins include taskmill.h alone, as an installed plugin
# does: no private helpers.
$(BUILD)/plugins/%.so: plugins/%/*.c include/taskmill.h | $(BUILD)/plugins
	@$(if $(Q),echo "  PLUGIN  $@")
	$(Q)$(CC) $(REAL_CFLAGS) $(PLUGIN_CFLAGS) -fPIC -shared -Iinclude -Isrc -o $@ \
		$(filter %.c,$^) $(PLUGIN_LIBS)
	@chmod go-w $@

# fail's crash mode writes through NULL on purpose: a sanitizer build must
# let it die of SIGSEGV like any crashing task code, not report it
$(BUILD)/plugins/fail.so: PLUGIN_CFLAGS = $(if $(SANITIZER),-fno-sanitize=null)

# The language hosts' own libraries; only the descriptor is exported, so
# their internal names never meet the daemon's (-rdynamic) or a library's.
$(BUILD)/plugins/exec.so: $(wildcard plugins/exec/*.h)
$(BUILD)/plugins/exec.so: PLUGIN_CFLAGS = -fvisibility=hidden $(shell $(PKG_CONFIG) --cflags libcjson)
$(BUILD)/plugins/exec.so: PLUGIN_LIBS = $(shell $(PKG_CONFIG) --libs libcjson)
$(BUILD)/plugins/lua.so: $(wildcard plugins/lua/*.h)
$(BUILD)/plugins/lua.so: PLUGIN_CFLAGS = -fvisibility=hidden $(shell $(PKG_CONFIG) --cflags lua5.4 libcjson)
$(BUILD)/plugins/lua.so: PLUGIN_LIBS = $(shell $(PKG_CONFIG) --libs lua5.4 libcjson) -lm
$(BUILD)/plugins/python.so: $(wildcard plugins/python/*.h)
# -z nodelete: the interpreter and its threads outlive a reload's dlclose
$(BUILD)/plugins/python.so: PLUGIN_CFLAGS = -fvisibility=hidden $(shell $(PKG_CONFIG) --cflags python3-embed libcjson)
$(BUILD)/plugins/python.so: PLUGIN_LIBS = $(shell $(PKG_CONFIG) --libs python3-embed libcjson) -ldl -Wl,-z,nodelete

# Test plugins, test tools and unit tests include headers of their own
# directory (tests/plugins/*.h, tests/unit/*.h) and the daemon's
# (include/taskmill.h, src/*/*.h): the
# compiler lists those it read in a dependency file next to the output
# (-MMD; -MP adds a rule per header, so a removed header is no error), and
# the files included below make a changed header rebuild them. Compiling
# and linking in one step, the file and its target are named explicitly.
# include/taskmill.h stays a prerequisite of its own: every test plugin
# includes it, also one built before it had a dependency file.
TEST_DEPFLAGS = -MMD -MP -MF $(basename $@).d -MT $@

$(BUILD)/test-plugins/%.so: tests/plugins/%.c include/taskmill.h | $(BUILD)/test-plugins
	@$(if $(Q),echo "  PLUGIN  $@")
	$(Q)$(CC) $(REAL_CFLAGS) $(TEST_DEPFLAGS) -fPIC -shared -Iinclude -Isrc -o $@ $<
	@chmod go-w $@

# Test tools (tests/tools/*.c: fault proxy, load clients): one binary
# each in $(BUILD)/test-tools/, built with the test plugins.
TEST_TOOL_SRCS = $(wildcard tests/tools/*.c)
TEST_TOOLS = $(TEST_TOOL_SRCS:tests/tools/%.c=$(BUILD)/test-tools/%)

$(BUILD)/test-tools/%: tests/tools/%.c | $(BUILD)/test-tools
	@$(if $(Q),echo "  TOOL    $@")
	$(Q)$(CC) $(REAL_CFLAGS) $(TEST_DEPFLAGS) -o $@ $< $(REAL_LDFLAGS)

-include $(TEST_PLUGIN_SOS:.so=.d) $(TEST_TOOLS:=.d)

test-plugins: $(TEST_PLUGIN_SOS) $(TEST_TOOLS)

$(BUILD)/tests/%: tests/unit/%.c $(CORE_OBJS) | $(BUILD)/tests
	@$(if $(Q),echo "  TEST    $@")
	$(Q)$(CC) $(REAL_CFLAGS) $(DEP_CFLAGS) $(CHECK_CFLAGS) $(TEST_DEPFLAGS) \
		-Iinclude -Isrc -o $@ $< \
		$(CORE_OBJS) $(REAL_LDFLAGS) $(DEP_LIBS) $(CHECK_LIBS) -ldl -lm
-include $(UNIT_BINS:=.d)

# The Lua host's JSON bridge, tested with the daemon's builder, and the
# fuzzer of the host's boundary (the whole host compiled in).
ifneq ($(and $(filter lua,$(PLUGINS)),yes),yes)
UNIT_BINS := $(filter-out $(BUILD)/tests/test_host_lua_json \
	$(BUILD)/tests/test_host_lua_fuzz,$(UNIT_BINS))
endif
# Two sources in one step leave no dependency file of the test's own
# (-MF would hold json_lua.c's): the tests/unit header it includes is
# named here.
$(BUILD)/tests/test_host_lua_json: tests/unit/test_host_lua_json.c \
		tests/unit/unit_main.h plugins/lua/json_lua.c \
		$(wildcard plugins/lua/*.h) $(CORE_OBJS) | $(BUILD)/tests
	@$(if $(Q),echo "  TEST    $@")
	$(Q)$(CC) $(REAL_CFLAGS) $(DEP_CFLAGS) $(CHECK_CFLAGS) \
		$(shell $(PKG_CONFIG) --cflags lua5.4) -Iinclude -Isrc -Iplugins/lua -o $@ \
		$< plugins/lua/json_lua.c $(CORE_OBJS) $(REAL_LDFLAGS) $(DEP_LIBS) \
		$(CHECK_LIBS) $(shell $(PKG_CONFIG) --libs lua5.4) -ldl -lm

LUA_HOST_SRCS = plugins/lua/state.c plugins/lua/json_lua.c \
	plugins/lua/pattern.c
$(BUILD)/tests/test_host_lua_fuzz: tests/unit/test_host_lua_fuzz.c \
		tests/unit/unit_main.h $(LUA_HOST_SRCS) \
		$(wildcard plugins/lua/*.h) $(CORE_OBJS) | $(BUILD)/tests
	@$(if $(Q),echo "  TEST    $@")
	$(Q)$(CC) $(REAL_CFLAGS) $(DEP_CFLAGS) $(CHECK_CFLAGS) \
		$(shell $(PKG_CONFIG) --cflags lua5.4) -Iinclude -Isrc -Iplugins/lua -o $@ \
		$< $(LUA_HOST_SRCS) $(CORE_OBJS) $(REAL_LDFLAGS) $(DEP_LIBS) \
		$(CHECK_LIBS) $(shell $(PKG_CONFIG) --libs lua5.4) -ldl -lm

unit-bins: $(UNIT_BINS)

$(BUILD)/obj $(BUILD)/plugins $(BUILD)/test-plugins $(BUILD)/tests \
		$(BUILD)/test-tools:
	@mkdir -p $@ && chmod go-w $@ $(BUILD)

# Unit tests: each binary is a check suite; they find the build through
# TM_BUILD (plugins, test plugins) and the sources through TM_SRCDIR.
# TM_FUZZ_SECONDS: how long each host's fuzzer runs in check-unit (a few
# seconds, so that make check, which runs check-unit plain, under ASan and
# under TSan, stays bounded; check-soak runs them longer).
TM_FUZZ_SECONDS ?= 8
check-unit: all test-plugins unit-bins
	@set -e; for t in $(UNIT_BINS); do \
		echo "== $$t"; TM_BUILD=$(abspath $(BUILD)) TM_SRCDIR=$(CURDIR) \
		TM_FUZZ_SECONDS=$(TM_FUZZ_SECONDS) CK_FORK=yes $$t; done

# Integration tests: real redis-server (and later rabbitmq-server) started
# by the harness on loopback ports in a scratch directory, TM_TEST_JOBS
# tests at a time (lanes, each with its own redis-server; see
# tests/README.md). 1 runs them one after another.
TM_TEST_JOBS ?= 3
check-integration: all test-plugins
	@TM_TEST_JOBS=$(TM_TEST_JOBS) TM_BUILD=$(abspath $(BUILD)) \
		tests/integration/run.sh

# The sanitizer pass: the same suites against an ASan+UBSan build.
check-asan:
	@$(MAKE) --no-print-directory BUILD=build-asan SANITIZER=address \
		OPTIMIZATION=-O1 check-unit check-integration

# ThreadSanitizer: the unit tests and a subset of the integration tests
# against a TSan build in build-tsan; a report fails the test (run.sh scans
# the logs). The subset (a few minutes): both brokers (redis_*, amqp_*),
# both pools (fork_*), reloads by SIGHUP and by plugin_watch with HTTP
# reading during them (ops_reload*, redis_retry_reload), and every way of
# stopping: drained, abandoned, second signal (ops_lifecycle, *sigterm);
# the schedule firing thread across a reload (schedule_reload); hostile
# task code in the thread pool (host_lua_hostile); the thread
# pool's watchdog settling and replacing stuck runs, and a reload keeping
# the old configuration until they return (thread_stuck,
# thread_late, thread_stuck_reload, thread_stuck_refill, amqp_thread_late,
# host_python_stuck); a Python run that catches Stopped (host_python_stopped);
# the fork pool's zygote restarted and a reload's cb_init run once
# (fork_zygote_restart, fork_reload_init); concurrency shared by two
# generations of a task across a reload (reload_concurrency); HTTP
# readers holding generations across 20 quick reloads (http_reload_hammer);
# the autoscaling gauges read by HTTP while the main loop samples the pool
# and the refresher reads the broker (scale_redis, scale_saturation); the
# history the settle threads write, the fleet thread sends and the admin
# API reads (redis_fleet_history).
# gcc's TSan runtime aborts with "unexpected memory mapping" on kernels
# whose mmap randomisation (vm.mmap_rnd_bits) exceeds what it maps: then
# everything runs under `setarch -R` (no ASLR, inherited by the children).
TSAN_TESTS = happy_path journal_once ops_reload ops_reload_running \
	ops_reload_status ops_lifecycle sigterm http_endpoints http_burst \
	redis_retry redis_retry_reload redis_restart amqp_ack amqp_retry_dlq \
	amqp_sigterm fork_thread_parity fork_sigterm fork_zygote schedule_reload \
	fork_ring_edges fork_pack_slow host_lua_hostile thread_stuck thread_late \
	thread_stuck_reload thread_stuck_refill amqp_thread_late \
	host_python_stuck \
	host_python_stopped fork_reload_init fork_zygote_restart reload_concurrency \
	http_reload_hammer scale_redis scale_saturation redis_fleet_history
TSAN_UNIT_OPTIONS = halt_on_error=0:second_deadlock_stack=1:history_size=4
check-tsan:
	@$(MAKE) --no-print-directory BUILD=build-tsan SANITIZER=thread \
		OPTIMIZATION=-O1 all test-plugins unit-bins
	@wrap=; \
	if build-tsan/taskmill --version 2>&1 | \
		grep -q 'unexpected memory mapping'; then \
		wrap="setarch $$(uname -m) -R"; \
		echo "# TSan cannot map its shadow with ASLR here: using $$wrap"; \
	fi; \
	TSAN_OPTIONS=$(TSAN_UNIT_OPTIONS) $$wrap $(MAKE) --no-print-directory \
		BUILD=build-tsan SANITIZER=thread OPTIMIZATION=-O1 check-unit && \
	TM_BUILD=$(abspath build-tsan) $$wrap tests/integration/run.sh \
		$(TSAN_TESTS)

# The exec host's fuzzer (tests/integration/test_host_exec_fuzz.sh): its
# TM_FUZZ_SECONDS is 20 in check-integration, and in check-tsan (a
# thread-pool daemon), and 600 in check-soak.
TSAN_TESTS += host_exec_fuzz
.PHONY: check-soak-exec-fuzz
check-soak: check-soak-exec-fuzz
check-soak-exec-fuzz: all test-plugins
	@TM_FUZZ_SECONDS=600 TM_TEST_TIMEOUT=$${TM_TEST_TIMEOUT:-900} \
		TM_BUILD=$(abspath $(BUILD)) tests/integration/run.sh host_exec_fuzz

# The soak test at full size (tests/integration/test_soak.sh; make check
# runs it with 20,000 messages): 200,000 messages through 2 daemons under
# random faults; the summary (counts, duplicate rate, time) is printed at
# the end.
# Then the Lua host's fuzzer for TM_SOAK_FUZZ_SECONDS (10 minutes).
TM_SOAK_FUZZ_SECONDS ?= 600
check-soak: all test-plugins unit-bins
	@rm -f $(abspath $(BUILD))/soak-report.txt; \
	rc=0; SOAK=1 SOAK_REPORT=$(abspath $(BUILD))/soak-report.txt \
		TM_TEST_TIMEOUT=$${TM_TEST_TIMEOUT:-1800} \
		TM_BUILD=$(abspath $(BUILD)) tests/integration/run.sh \
		tests/integration/test_soak.sh || rc=$$?; \
	cat $(abspath $(BUILD))/soak-report.txt 2>/dev/null; \
	$(if $(filter lua,$(PLUGINS)),TM_FUZZ_SECONDS=$(TM_SOAK_FUZZ_SECONDS) \
		CK_FORK=yes $(BUILD)/tests/test_host_lua_fuzz || rc=$$?;) \
	exit $$rc

# The Python host's fuzzer (test_fuzz_python.sh) for 10 minutes; `make
# check` runs it for 20 s.
check-soak: check-soak-fuzz-python
check-soak-fuzz-python: all test-plugins
	@TM_FUZZ_SECONDS=$${TM_FUZZ_SECONDS:-600} \
		TM_TEST_TIMEOUT=$${TM_TEST_TIMEOUT:-900} \
		TM_BUILD=$(abspath $(BUILD)) tests/integration/run.sh fuzz_python
.PHONY: check-soak-fuzz-python

# The operators' soak (tests/integration/test_soak_ops.sh; make check
# runs it for 35 s): 3 Redis daemons, one under a skewed clock, through
# refused and applied reloads, concurrent CLI and API replays, a schedule
# with dedup_ttl, kill -9 and broker cuts, for TM_SOAK_OPS_SECONDS (10
# minutes); the summary is printed at the end.
TM_SOAK_OPS_SECONDS ?= 600
.PHONY: check-soak-ops
check-soak: check-soak-ops
check-soak-ops: all test-plugins
	@rm -f $(abspath $(BUILD))/soak-ops-report.txt; \
	rc=0; SOAK_OPS_SECONDS=$(TM_SOAK_OPS_SECONDS) \
		SOAK_REPORT=$(abspath $(BUILD))/soak-ops-report.txt \
		TM_TEST_TIMEOUT=$${TM_TEST_TIMEOUT:-$$(($(TM_SOAK_OPS_SECONDS) + 300))} \
		TM_BUILD=$(abspath $(BUILD)) tests/integration/run.sh soak_ops || rc=$$?; \
	cat $(abspath $(BUILD))/soak-ops-report.txt 2>/dev/null; \
	exit $$rc

# The RabbitMQ cluster tests at full size (test_amqp_cluster_*: three
# nodes on loopback; the failover test with 50,000 messages instead of
# the 5,000 of check-integration).
check-cluster: all test-plugins
	@TM_CLUSTER_FULL=1 TM_TEST_TIMEOUT=$${TM_TEST_TIMEOUT:-900} \
		TM_BUILD=$(abspath $(BUILD)) tests/integration/run.sh \
		$(patsubst tests/integration/test_%.sh,%,$(wildcard tests/integration/test_amqp_cluster_*.sh))

# make check builds every language host: USE_LUA / USE_PYTHON auto become
# yes, so a missing library fails the build naming its package (make deps,
# which runs first, installs them); an explicit no still leaves one out.
CHECK_HOSTS = USE_LUA=$(if $(filter auto,$(USE_LUA)),yes,$(USE_LUA)) \
	USE_PYTHON=$(if $(filter auto,$(USE_PYTHON)),yes,$(USE_PYTHON))
# Each folder of src/ is a layer that includes and calls only the layers
# below it, with at most the one cycle its header names
# (docs/development.md, "Layers and map"); a few seconds.
check-layers: all
	@python3 scripts/check-layers.py $(BUILD)

check: deps
	@$(MAKE) --no-print-directory $(CHECK_HOSTS) check-layers
	@$(MAKE) --no-print-directory $(CHECK_HOSTS) check-unit
	@$(MAKE) --no-print-directory $(CHECK_HOSTS) check-integration
	@$(MAKE) --no-print-directory $(CHECK_HOSTS) check-asan
	@$(MAKE) --no-print-directory $(CHECK_HOSTS) check-tsan

demo: deps-demo
	@$(MAKE) --no-print-directory all
	@scripts/demo.sh $(abspath $(BUILD))

bench: deps
	@$(MAKE) --no-print-directory all bench-bins
	@scripts/bench.sh $(abspath $(BUILD))

# ---- benchmark helpers: bench/*.c -> $(BUILD)/bench/ (used by make bench)
BENCH_SRCS = $(wildcard bench/*.c)
BENCH_BINS = $(BENCH_SRCS:bench/%.c=$(BUILD)/bench/%)
BENCH_CFLAGS := $(shell $(PKG_CONFIG) --cflags librabbitmq hiredis 2>/dev/null)
BENCH_LIBS := $(shell $(PKG_CONFIG) --libs librabbitmq hiredis 2>/dev/null)

.PHONY: bench-bins
bench-bins: $(BENCH_BINS) $(BUILD)/bench/http_floor

$(BUILD)/bench/%: bench/%.c $(wildcard bench/*.h) | $(BUILD)/bench
	@$(if $(Q),echo "  BENCH   $@")
	$(Q)$(CC) $(REAL_CFLAGS) $(BENCH_CFLAGS) -o $@ $< $(REAL_LDFLAGS) \
		$(BENCH_LIBS) -lm

# The idle-memory floor of the HTTP library (bench/floor/http_floor.c):
# linked with libmicrohttpd alone, so nothing else of the daemon's counts.
$(BUILD)/bench/http_floor: bench/floor/http_floor.c | $(BUILD)/bench
	@$(if $(Q),echo "  BENCH   $@")
	$(Q)$(CC) $(REAL_CFLAGS) $(shell $(PKG_CONFIG) --cflags libmicrohttpd) \
		-o $@ $< $(REAL_LDFLAGS) $(shell $(PKG_CONFIG) --libs libmicrohttpd)

$(BUILD)/bench:
	@mkdir -p $@
# ---- end of benchmark helpers

# ---- make bench-peers: taskmill next to Celery, redis-py, BullMQ, pika and
# amqplib on the same pre-loaded queues (scripts/bench-peers.sh, bench/peers/)
.PHONY: bench-peers
bench-peers: deps
	@scripts/install-peers.sh
	@$(MAKE) --no-print-directory all bench-bins $(BUILD)/bench/peers/peer_measure
	@scripts/bench-peers.sh $(abspath $(BUILD))

$(BUILD)/bench/peers/peer_measure: bench/peers/peer_measure.c $(wildcard bench/*.h)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  BENCH   $@")
	$(Q)$(CC) $(REAL_CFLAGS) $(BENCH_CFLAGS) -o $@ $< $(REAL_LDFLAGS) \
		$(BENCH_LIBS)
# ---- end of make bench-peers

DOCDIR = $(PREFIX)/share/doc/taskmill

# install puts the binary, plugins, the public header, the pkg-config file,
# the example config and the systemd unit under $(DESTDIR)$(PREFIX) (the
# config under $(DESTDIR)$(SYSCONFDIR)); paths inside the unit and the
# example config follow PREFIX.
install: all
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(PLUGINDIR) \
		$(DESTDIR)$(INCDIR) $(DESTDIR)$(PKGCONFIGDIR) \
		$(DESTDIR)$(SYSCONFDIR)/taskmill $(DESTDIR)$(UNITDIR) \
		$(DESTDIR)$(DOCDIR)
	install -m 0755 $(BUILD)/taskmill $(DESTDIR)$(BINDIR)/taskmill
	install -m 0755 $(PLUGIN_SOS) $(DESTDIR)$(PLUGINDIR)/
	install -m 0644 include/taskmill.h $(DESTDIR)$(INCDIR)/taskmill.h
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' \
		scripts/taskmill.pc.in > $(DESTDIR)$(PKGCONFIGDIR)/taskmill.pc
	sed -e 's|^plugin_dir: .*|plugin_dir: $(PLUGINDIR)|' \
		-e 's|/usr/local/share/doc/taskmill|$(DOCDIR)|g' conf/taskmill.yaml \
		> $(DESTDIR)$(SYSCONFDIR)/taskmill/taskmill.yaml.example
	sed -e 's|/usr/local|$(PREFIX)|g' \
		-e 's|/etc/taskmill|$(SYSCONFDIR)/taskmill|g' \
		systemd/taskmill.service > $(DESTDIR)$(UNITDIR)/taskmill.service
	install -m 0644 README.md $(DESTDIR)$(DOCDIR)/README.md
	install -d $(DESTDIR)$(DOCDIR)/docs
	install -m 0644 docs/*.md $(DESTDIR)$(DOCDIR)/docs/
	install -d $(DESTDIR)$(DOCDIR)/plugin-template
	install -m 0644 plugins/template/hello.c plugins/template/Makefile \
		plugins/template/taskmill.yaml $(DESTDIR)$(DOCDIR)/plugin-template/
	install -m 0644 docs/languages.md $(DESTDIR)$(DOCDIR)/languages.md
	install -d $(DESTDIR)$(DOCDIR)/examples/python \
		$(DESTDIR)$(DOCDIR)/examples/lua $(DESTDIR)$(DOCDIR)/examples/exec
	install -m 0644 examples/README.md $(DESTDIR)$(DOCDIR)/examples/
	install -m 0644 examples/python/*.py $(DESTDIR)$(DOCDIR)/examples/python/
	install -m 0644 examples/lua/*.lua $(DESTDIR)$(DOCDIR)/examples/lua/
	install -m 0755 examples/exec/*.sh $(DESTDIR)$(DOCDIR)/examples/exec/

clean:
	rm -rf build build-asan build-tsan

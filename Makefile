# qkv - build, test, install. See README.md.
#
#   make                 library (static + shared), the qkv program, examples
#   make test            Check suites, float32 and double builds
#   make asan / SAN=1    the same suites under ASan + UBSan
#   make run             the main job: train, measure, plot
#   make bench           the benchmark; bench-compare and bench-pairs set it
#                        against PyTorch (bench-pairs: ROUNDS=3, TABLES=...)
#   make install PREFIX=/usr/local

CC      ?= cc
PREFIX  ?= /usr/local
BUILD   ?= build
# The version and the interface version (the soname's major number) come
# from include/qkv/base.h, where the ABI check reads them too.
VERSION := $(shell sed -n 's/^\#define QKV_VERSION "\(.*\)"/\1/p' include/qkv/base.h)
SOMAJOR := $(shell sed -n 's/^\#define QKV_ABI_VERSION //p' include/qkv/base.h)

WARN    := -std=c11 -Wall -Wextra -Wpedantic -Werror
# No fused multiply-adds the source did not write: gcc in ISO C mode does
# not contract a*b + c, clang does, and the kernels promise the same bits
# on every compiler (FMAs are spelled out as intrinsics where wanted).
FP      := -ffp-contract=off
# The thread pool (src/util/threads.c); in glibc 2.34 and later this is libc.
PTHREAD := -pthread
OPT     ?= -O3 -g
CPPFLAGS += -Iinclude -Isrc -D_POSIX_C_SOURCE=200809L
CFLAGS  ?=
ifeq ($(SAN),1)
  BUILD  := build/san
  OPT    := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
  LDSAN  := -fsanitize=address,undefined
endif
ifeq ($(SAN),fuzz)
  BUILD  := build/fuzz
  OPT    := -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined \
            -fno-sanitize-recover=all
  LDSAN  := -fsanitize=address,undefined
endif
ifeq ($(SAN),thread)
  BUILD  := build/tsan
  OPT    := -O1 -g -fno-omit-frame-pointer -fsanitize=thread
  LDSAN  := -fsanitize=thread
endif
ifeq ($(DOUBLE),1)
  BUILD  := $(BUILD)/double
  CPPFLAGS += -DQKV_DOUBLE
  PC_CFLAGS := -DQKV_DOUBLE
endif
ALLCFLAGS = $(WARN) $(FP) $(PTHREAD) $(OPT) $(CFLAGS)
LDLIBS  := -lm -pthread

# The library, bottom layer first (see README "Layout"); then the apps built
# on it, and the program.
LIB_DIRS := util kernels core ops train layers
LIB_SRC  := $(foreach d,$(LIB_DIRS),$(wildcard src/$(d)/*.c))
APP_SRC  := $(wildcard src/apps/*/*.c)
CLI_SRC  := $(wildcard src/cli/*.c)
TEST_SRC := $(wildcard tests/*.c)
EX_SRC   := $(wildcard examples/*.c)
PRIV_H   := $(wildcard src/*/*.h)
PUB_H    := include/qkv.h $(wildcard include/qkv/*.h)
APP_H    := $(wildcard include/apps/*.h include/apps/*/*.h)

LIB_OBJ  := $(LIB_SRC:src/%.c=$(BUILD)/obj/%.o)
APP_OBJ  := $(APP_SRC:src/%.c=$(BUILD)/obj/%.o)
CLI_OBJ  := $(CLI_SRC:src/cli/%.c=$(BUILD)/obj/cli/%.o)
CLI_LIBOBJ := $(filter-out $(BUILD)/obj/cli/main.o,$(CLI_OBJ))
TEST_OBJ := $(TEST_SRC:tests/%.c=$(BUILD)/obj/tests/%.o)
EXAMPLES := $(EX_SRC:examples/%.c=$(BUILD)/examples/%)

STATIC := $(BUILD)/libqkv.a
SHARED := $(BUILD)/libqkv.so.$(VERSION)
APPS   := $(BUILD)/libqkvapps.a
QKV    := $(BUILD)/qkv
TESTS  := $(BUILD)/qkv_tests

# The per-instruction-set kernel files are compiled for their instruction
# set; dispatch.c runs them only on a CPU that has it (x86-64 only).
ifneq ($(filter x86_64 i%86,$(shell uname -m)),)
$(BUILD)/obj/kernels/avx2_norm.o: ISA := -mavx2 -mfma
$(BUILD)/obj/kernels/avx512_norm.o: ISA := -mavx512f
$(BUILD)/obj/kernels/avx2.o $(BUILD)/obj/kernels/avx2_math.o: ISA := -mavx2 -mfma
$(BUILD)/obj/kernels/avx2_gemm.o $(BUILD)/obj/kernels/avx2_attn.o: ISA := -mavx2 -mfma
$(BUILD)/obj/kernels/avx512.o $(BUILD)/obj/kernels/avx512_attn.o: ISA := -mavx512f
$(BUILD)/obj/kernels/avx512_math.o: ISA := -mavx512f
$(BUILD)/obj/kernels/avx512_gemm.o: ISA := -mavx512f
endif

# Debian's Python, where python3-numpy goes (the interop test and bench
# scripts), unless PYTHON names another
PYTHON ?= $(if $(wildcard /usr/bin/python3),/usr/bin/python3,python3)
CHECK_CFLAGS = $(shell pkg-config --cflags check 2>/dev/null)
CHECK_LIBS   = $(shell pkg-config --libs check 2>/dev/null)

.PHONY: all lib test test-float test-double asan tsan tsan-run clean install deps run plots
.PHONY: bench bench-compare bench-pairs fuzz fuzz-run valgrind
.DEFAULT_GOAL := all

all: lib $(QKV) $(EXAMPLES)
lib: $(STATIC) $(SHARED)

$(BUILD)/obj/%.o: src/%.c $(PUB_H) $(APP_H) $(PRIV_H) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(ALLCFLAGS) $(ISA) -fPIC -c $< -o $@

$(BUILD)/obj/tests/%.o: tests/%.c $(PUB_H) $(APP_H) $(PRIV_H) $(wildcard tests/*.h) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -DQKV_TEST_DATA='"$(CURDIR)/tests/data"' -DQKV_BIN='"$(CURDIR)/$(QKV)"' \
	    -DQKV_LDSAN='"$(LDSAN)"' -DQKV_SCRIPTS='"$(CURDIR)/scripts"' -DQKV_PYTHON='"$(PYTHON)"' \
	    $(ALLCFLAGS) $(CHECK_CFLAGS) -c $< -o $@

$(STATIC): $(LIB_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

# The shared library exports the functions the public headers declare and
# nothing else: the library's own helpers (qkv_gemm, qkv_malloc, ...) share
# the qkv_ prefix but are no part of the interface (scripts/exports.sh).
$(BUILD)/libqkv.map: $(LIB_OBJ) $(PUB_H) scripts/exports.sh
	sh scripts/exports.sh --public "$(CC) $(CPPFLAGS)" >$@.pub
	nm -g --defined-only $(LIB_OBJ) | awk 'NF == 3 { print $$3 }' | LC_ALL=C sort -u | \
	    LC_ALL=C comm -12 - $@.pub | \
	    awk 'BEGIN { print "{ global:" } { print "  " $$0 ";" } END { print "  local: *;\n};" }' >$@
	@rm -f $@.pub

$(SHARED): $(LIB_OBJ) $(BUILD)/libqkv.map
	$(CC) -shared -Wl,-soname,libqkv.so.$(SOMAJOR) -Wl,--version-script=$(BUILD)/libqkv.map \
	    $(LDSAN) -o $@ $(LIB_OBJ) $(LDLIBS)
	ln -sf libqkv.so.$(VERSION) $(BUILD)/libqkv.so.$(SOMAJOR)
	ln -sf libqkv.so.$(VERSION) $(BUILD)/libqkv.so

$(APPS): $(APP_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

$(QKV): $(CLI_OBJ) $(APPS) $(STATIC)
	$(CC) $(LDSAN) -o $@ $(CLI_OBJ) $(APPS) $(STATIC) $(LDLIBS)

$(BUILD)/examples/%: examples/%.c $(APPS) $(STATIC) $(PUB_H) $(APP_H)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(ALLCFLAGS) $(LDSAN) -o $@ $< $(APPS) $(STATIC) $(LDLIBS)

# The cli and faults suites run the program and the examples: built with
# the suites (order-only: a rebuilt program does not relink the suites).
$(TESTS): $(TEST_OBJ) $(CLI_LIBOBJ) $(APPS) $(STATIC) | $(QKV) $(EXAMPLES)
	$(CC) $(LDSAN) -o $@ $(TEST_OBJ) $(CLI_LIBOBJ) $(APPS) $(STATIC) $(CHECK_LIBS) $(LDLIBS)

deps:
	@sh scripts/deps.sh

# The float32 suites, then the double build's (where gradient checks are
# strict). CK_FORK stays on so one crashing test cannot hide the others.
test: deps
	@$(MAKE) --no-print-directory test-float
	@$(MAKE) --no-print-directory DOUBLE=1 test-float

test-float: $(TESTS) $(QKV) $(EXAMPLES)
	@sh scripts/suites.sh $(TESTS)

# the double-precision build's suites alone (in build/double)
test-double:
	@$(MAKE) --no-print-directory DOUBLE=1 test-float

asan: deps
	@$(MAKE) --no-print-directory SAN=1 test-float

# ThreadSanitizer: the suites that use threads, and a training run whose
# attention items are split across 4 threads (d_k 512 gives them the work).
# Any report fails the run.
TSAN_SUITES := threads attention coref_model
TSAN_ENV    := TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
tsan: deps
	@$(MAKE) --no-print-directory SAN=thread tsan-run

tsan-run: $(TESTS) $(QKV)
	@for s in $(TSAN_SUITES); do \
	    echo "== tsan: suite $$s"; \
	    CK_RUN_SUITE=$$s $(TSAN_ENV) $(TESTS) || exit 1; \
	done
	@echo "== tsan: qkv train on 4 threads"
	QKV_THREADS=4 $(TSAN_ENV) $(QKV) train --quiet --d-k 512 --steps 20 \
	    --log $(BUILD)/tsan-train.csv --save $(BUILD)/tsan-train.safetensors

# The main job: train, measure, plot (see scripts/run.sh).
run: deps all
	@sh scripts/run.sh

# Every plot from whatever CSV files exist under out/.
plots: deps
	@sh scripts/plots.sh out out/plots

# valgrind (memcheck): errors and leaks, "possibly lost" included, on the
# suites that run in seconds under it and own memory the others build on
# (kernels, attention and coref_model take minutes, and gradcheck, rng,
# coref_data and faults added a minute to CI's run on a slow VM; ASan
# covers them all) and on a training run whose attention is split over
# two threads, with each kernel set valgrind can decode (it has no
# AVX-512).
VG_SUITES := tensor tape ops threads optim coref_checkpoint
VG := valgrind -q --error-exitcode=9 --leak-check=full --show-leak-kinds=definite,possible \
      --errors-for-leak-kinds=definite,possible
VG_SETS := portable $(if $(shell grep -qw avx2 /proc/cpuinfo 2>/dev/null && echo y),avx2)
# The kernel sets run side by side (each one's suites in turn), one per core.
valgrind: deps $(TESTS) $(QKV)
	@pids=; for k in $(VG_SETS); do \
	    ( for s in $(VG_SUITES); do \
	        out=$(BUILD)/vg-$$k-$$s.out; \
	        if CK_FORK=no CK_RUN_SUITE=$$s QKV_KERNELS=$$k $(VG) $(TESTS) >$$out 2>&1; \
	        then echo "== valgrind ($$k): suite $$s: $$(tail -1 $$out)"; \
	        else echo "== valgrind ($$k): suite $$s failed"; cat $$out; exit 1; fi; \
	      done ) & pids="$$pids $$!"; \
	done; rc=0; for p in $$pids; do wait $$p || rc=1; done; exit $$rc
	@echo "== valgrind (avx2 where the CPU has it): qkv train on 2 threads"
	QKV_KERNELS=$(lastword $(VG_SETS)) $(VG) $(QKV) train --quiet --threads 2 --d-k 512 \
	    --steps 3 --log $(BUILD)/vg-train.csv --save $(BUILD)/vg-train.safetensors

# Fuzzing (libFuzzer, clang): every loader and parser, each for FUZZ_TIME
# seconds from its committed seed corpus (copied, so runs never change it).
# FUZZ_RUNS=N runs each for N inputs instead.
FUZZ_TARGETS := checkpoint safetensors json tokenizer numbers options
FUZZ_TIME    ?= 30
FUZZ_CC      ?= clang
FUZZ_BINS    := $(FUZZ_TARGETS:%=$(BUILD)/fuzz/fuzz_%)
FUZZ_LIMIT    = $(if $(FUZZ_RUNS),-runs=$(FUZZ_RUNS),-max_total_time=$(FUZZ_TIME))

fuzz: deps
	@$(MAKE) --no-print-directory SAN=fuzz CC=$(FUZZ_CC) fuzz-run

$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(CLI_LIBOBJ) $(APPS) $(STATIC)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(ALLCFLAGS) -fsanitize=fuzzer,address,undefined -o $@ $< \
	    $(CLI_LIBOBJ) $(APPS) $(STATIC) $(LDLIBS)

# Two targets at a time, one per core; each prints its report when it ends.
fuzz-run: $(FUZZ_BINS)
	@printf '%s\n' $(FUZZ_TARGETS) | xargs -P 2 -I{} sh -c ' \
	    t={}; \
	    rm -rf $(BUILD)/corpus/$$t && mkdir -p $(BUILD)/corpus/$$t && \
	    cp tests/fuzz/corpus/$$t/* $(BUILD)/corpus/$$t/ && \
	    if $(BUILD)/fuzz/fuzz_$$t $(FUZZ_LIMIT) -print_final_stats=1 \
	        -artifact_prefix=$(BUILD)/fuzz/$$t- $(BUILD)/corpus/$$t >$(BUILD)/fuzz/$$t.log 2>&1; \
	    then echo "== fuzz: $$t"; \
	        grep -E "^(#[0-9]+ +DONE|stat::number|stat::new)" $(BUILD)/fuzz/$$t.log; \
	    else echo "== fuzz: $$t"; tail -40 $(BUILD)/fuzz/$$t.log; echo "fuzz: $$t failed"; \
	        exit 1; fi'

# Benchmarks: never part of the test suite.
$(BUILD)/bench: tests/bench/bench.c $(APPS) $(STATIC)
	$(CC) $(CPPFLAGS) $(ALLCFLAGS) -o $@ $< $(APPS) $(STATIC) $(LDLIBS) -ldl

bench: $(BUILD)/bench $(QKV)
	$(BUILD)/bench $(QKV) out/bench.csv

bench-compare: $(BUILD)/bench $(QKV)
	@sh scripts/bench_compare.sh $(BUILD)/bench $(QKV)

# qkv's and PyTorch's tables measured in pairs, ROUNDS times
ROUNDS ?= 3
TABLES ?= steps ops block rnn
bench-pairs: $(BUILD)/bench
	@sh scripts/bench_pairs.sh $(BUILD)/bench "$(ROUNDS)" "$(TABLES)"

clean:
	rm -rf build

# Installs the library (headers, static and shared) and the program, and
# qkv.pc for pkg-config; a double build (DOUBLE=1) writes -DQKV_DOUBLE into
# qkv.pc's Cflags so that programs match it. Into the system's own
# directories (no DESTDIR, run as root), it then runs ldconfig, so programs
# find libqkv.so without an rpath (see README "Using the library").
install: lib $(QKV)
	install -d $(DESTDIR)$(PREFIX)/include/qkv $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 644 include/qkv.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 include/qkv/*.h $(DESTDIR)$(PREFIX)/include/qkv/
	install -m 644 $(STATIC) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(SHARED) $(DESTDIR)$(PREFIX)/lib/
	ln -sf libqkv.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libqkv.so.$(SOMAJOR)
	ln -sf libqkv.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libqkv.so
	install -m 755 $(QKV) $(DESTDIR)$(PREFIX)/bin/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' -e 's|@CFLAGS@|$(PC_CFLAGS)|' \
	    qkv.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/qkv.pc
	@case "$(PREFIX)" in /usr|/usr/|/usr/local|/usr/local/) sys=1;; *) sys=0;; esac; \
	if [ $$sys = 1 ] && [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && \
	    command -v ldconfig >/dev/null; then echo "ldconfig"; ldconfig; fi

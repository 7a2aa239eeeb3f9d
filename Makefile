# hearth — GNU Makefile.  make | make test | make asan | make run | make bench | make fuzz
# Sources are found by wildcard: adding a .c file under src/ adds it to libhearth,
# adding tests/unit/test_*.c adds a test binary.  Files named *_avx2.c / *_avx512.c
# get ISA flags of their own; everything else is built for baseline x86-64 so the
# binary runs anywhere and picks its kernel variant at start-up (cpuid).

CC      ?= gcc
BUILD   ?= build
OPT     ?= -O2
SAN     ?=
CFLAGS_BASE = -std=gnu11 $(OPT) -g -Wall -Wextra -ffp-contract=off -fno-fast-math \
              -fno-strict-aliasing -pthread -Iinclude -Isrc $(SAN)
CFLAGS  ?=
ALL_CFLAGS = $(CFLAGS_BASE) $(CFLAGS)
LDLIBS  = -ljansson -lonig -lmicrohttpd -lxxhash -ledit -lm -pthread

AVX2_FLAGS   = -mavx2 -mfma -mf16c
AVX512_FLAGS = -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16 -mfma -mf16c

LIB_SRCS  := $(shell find src -name '*.c' ! -path 'src/cli/*' | sort)
CLI_SRCS  := $(sort $(wildcard src/cli/*.c))
TEST_SRCS := $(sort $(wildcard tests/unit/test_*.c))
TEST_HELPERS := $(filter-out tests/unit/test_%.c,$(wildcard tests/unit/*.c))

LIB_OBJS  := $(LIB_SRCS:%.c=$(BUILD)/%.o)
CLI_OBJS  := $(CLI_SRCS:%.c=$(BUILD)/%.o)
HELPER_OBJS := $(TEST_HELPERS:%.c=$(BUILD)/%.o)
TEST_BINS := $(TEST_SRCS:tests/unit/%.c=$(BUILD)/tests/%)
DEPS_STAMP := $(BUILD)/.deps-ok

.PHONY: all test asan run bench fuzz clean deps testdata
# Keep the test objects (make would delete them as intermediates and relink every time).
.SECONDARY:
all: $(BUILD)/hearth

$(DEPS_STAMP): scripts/deps.sh
	@mkdir -p $(BUILD)
	@bash scripts/deps.sh
	@touch $@

$(BUILD)/%_avx2.o: %_avx2.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(AVX2_FLAGS) -MMD -MP -c $< -o $@
$(BUILD)/%_avx512.o: %_avx512.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(AVX512_FLAGS) -MMD -MP -c $< -o $@
$(BUILD)/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/libhearth.a: $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/hearth: $(CLI_OBJS) $(BUILD)/libhearth.a
	$(CC) $(ALL_CFLAGS) -o $@ $(CLI_OBJS) $(BUILD)/libhearth.a $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/tests/unit/%.o $(HELPER_OBJS) $(BUILD)/libhearth.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(HELPER_OBJS) $(BUILD)/libhearth.a $(LDLIBS)

testdata: | $(DEPS_STAMP)
	@bash scripts/testdata.sh

test: $(BUILD)/hearth $(TEST_BINS) testdata
	@HEARTH_BIN=$(BUILD)/hearth bash tests/run.sh $(BUILD) $(TEST_BINS)

asan:
	@$(MAKE) --no-print-directory BUILD=build-asan OPT=-O1 \
	  SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" test

run: $(BUILD)/hearth
	@bash scripts/run.sh $(BUILD)/hearth

bench: $(BUILD)/hearth
	@bash bench/run.sh $(BUILD)/hearth

fuzz:
	@bash tests/fuzz/build.sh

clean:
	rm -rf build build-asan build-fuzz

-include $(LIB_OBJS:.o=.d) $(CLI_OBJS:.o=.d) $(HELPER_OBJS:.o=.d) $(TEST_BINS:$(BUILD)/tests/%=$(BUILD)/tests/unit/%.d)

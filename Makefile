# hearth — GNU Makefile.  make | make test | make asan | make test-long | make run | make bench | make fuzz | make fuzz-long
# Sources are found by wildcard: adding a .c file under src/ adds it to libhearth,
# adding tests/unit/test_*.c adds a test binary.  Files named *_avx2.c / *_avx512.c
# get ISA flags of their own; everything else is built for baseline x86-64 so the
# binary runs anywhere and picks its kernel variant at start-up (cpuid).

CC      ?= gcc
BUILD   ?= build
OPT     ?= -O2
SAN     ?=
CFLAGS_BASE = -std=gnu11 $(OPT) -g -Wall -Wextra -ffp-contract=off -fno-fast-math \
              -fno-strict-aliasing -pthread -Iinclude -Isrc
CFLAGS  ?=
ALL_CFLAGS = $(CFLAGS_BASE) $(SAN) $(CFLAGS)
# The sanitizer flags of the ISA kernel variants (*_avx2.c, *_avx512.c): SAN's unless
# set, less ASan's use-after-scope checks, whose scope marks keep a tile's accumulator
# and weight-vector arrays in memory instead of registers (the tiny test model's
# 151,669-row lm_head took twice as long under make asan, the servers' tokens 6.2 ->
# 3.3 ms); the kernels' heap, stack and global bounds stay checked.  The fuzz build
# (tests/fuzz/build.sh) leaves UBSan out of them: no fuzz target runs a kernel, and
# clang's ASan + UBSan spends over a minute on the AVX-512 GEMM tiles.
SAN_ISA ?= $(SAN)$(if $(findstring address,$(SAN)), -fno-sanitize-address-use-after-scope)
ISA_CFLAGS = $(CFLAGS_BASE) $(SAN_ISA) $(CFLAGS)
LDLIBS  = -ljansson -lonig -lmicrohttpd -lxxhash -ledit -lm -pthread

# CUDA kernels (src/kernels/cuda/*.cu): built when nvcc is found (PATH, then
# /usr/local/cuda/bin); CUDA=0 turns them off.  The variant sources are compiled
# twice, sm90a (Hopper SASS) and sm80 (compute_80 PTX + sm_80 SASS: portable, and
# JIT-compiled by the driver on later cards, so an H200 runs both); each copy lives in
# its own namespace.  The runtime is linked statically: a machine without a driver
# gets an error from cuda_dev_init, not a missing library at start-up.
CUDA    ?= 1
ifneq ($(CUDA),0)
ifeq ($(origin NVCC),undefined)
NVCC    := $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
endif
endif
# The toolkit's root is where nvcc itself runs from (nvcc -dryrun says so as _HERE_):
# an nvcc on PATH may be a wrapper script elsewhere (/usr/local/bin/nvcc exec'ing the
# real one), so neither its own path nor its realpath names the toolkit.
ifneq ($(strip $(NVCC)),)
ifeq ($(origin CUDA_HOME),undefined)
CUDA_HOME   := $(realpath $(shell $(NVCC) -dryrun -c -x cu /dev/null -o /dev/null 2>&1 | sed -n 's/^\#\$$ _HERE_=//p' | head -n1)/..)
endif
ifeq ($(wildcard $(CUDA_HOME)/lib64/libcudart_static.a),)
$(warning nvcc found ($(NVCC)) but no $(CUDA_HOME)/lib64/libcudart_static.a: building without CUDA (set CUDA_HOME, or CUDA=0 to silence))
NVCC :=
endif
endif
ifneq ($(strip $(NVCC)),)
CUDA_BUILD  ?= build-cuda
NVCC_FLAGS  = -std=c++17 -O3 -g -lineinfo --fmad=false -Iinclude -Isrc \
              -Xcompiler -fno-strict-aliasing,-ffp-contract=off,-Wall,-Wextra -Xptxas -warn-spills
CU_ALL      := $(sort $(wildcard src/kernels/cuda/*.cu))
# dev*.cu (the device seen from C: memory, timers, the copy stream) are compiled once.
CU_ONCE     := $(sort $(wildcard src/kernels/cuda/dev*.cu))
CU_VARIANT  := $(filter-out $(CU_ONCE),$(CU_ALL))
CU_OBJS     := $(CU_ONCE:src/kernels/cuda/%.cu=$(CUDA_BUILD)/%.o) $(CU_VARIANT:src/kernels/cuda/%.cu=$(CUDA_BUILD)/sm90a/%.o) \
               $(CU_VARIANT:src/kernels/cuda/%.cu=$(CUDA_BUILD)/sm80/%.o)
CFLAGS_BASE += -DHEARTH_CUDA=1
LDLIBS  += -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lstdc++
GENCODE_sm90a = -gencode=arch=compute_90a,code=sm_90a -DCUK_HOPPER=1
GENCODE_sm80  = -gencode=arch=compute_80,code=[sm_80,compute_80]
endif

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

.PHONY: all test asan test-long run bench fuzz fuzz-long clean deps testdata print-cflags
# Keep the test objects (make would delete them as intermediates and relink every time).
.SECONDARY:
all: $(BUILD)/hearth

$(DEPS_STAMP): scripts/deps.sh
	@mkdir -p $(BUILD)
	@bash scripts/deps.sh
	@touch $@

# Every object's compiler messages are also kept beside it, in OBJ.log after the command
# (scripts/cc-log.sh): test_warnings.sh reads those of make test's build.
CC_LOG = sh scripts/cc-log.sh $@.log
$(BUILD)/%_avx2.o: %_avx2.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC_LOG) $(CC) $(ISA_CFLAGS) $(AVX2_FLAGS) -MMD -MP -c $< -o $@
$(BUILD)/%_avx512.o: %_avx512.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC_LOG) $(CC) $(ISA_CFLAGS) $(AVX512_FLAGS) -MMD -MP -c $< -o $@
$(BUILD)/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC_LOG) $(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

# The compile flags of the three kinds of object (plain, AVX2, AVX-512), one line each:
# test_warnings.sh checks that make test's build used gcc's -Werror build's (less -Werror).
print-cflags:
	@echo '$(ALL_CFLAGS)'; echo '$(ISA_CFLAGS) $(AVX2_FLAGS)'; echo '$(ISA_CFLAGS) $(AVX512_FLAGS)'

ifneq ($(strip $(NVCC)),)
$(CUDA_BUILD)/dev.o: src/kernels/cuda/dev.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) $(GENCODE_sm90a) $(GENCODE_sm80) -MMD -MP -c $< -o $@
$(CUDA_BUILD)/dev_%.o: src/kernels/cuda/dev_%.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) $(GENCODE_sm90a) $(GENCODE_sm80) -MMD -MP -c $< -o $@
$(CUDA_BUILD)/sm90a/%.o: src/kernels/cuda/%.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) -DCUK_VARIANT=sm90a $(GENCODE_sm90a) -MMD -MP -c $< -o $@
$(CUDA_BUILD)/sm80/%.o: src/kernels/cuda/%.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) -DCUK_VARIANT=sm80 $(GENCODE_sm80) -MMD -MP -c $< -o $@
-include $(CU_OBJS:.o=.d)
endif

$(BUILD)/libhearth.a: $(LIB_OBJS) $(CU_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/hearth: $(CLI_OBJS) $(BUILD)/libhearth.a
	$(CC) $(ALL_CFLAGS) -o $@ $(CLI_OBJS) $(BUILD)/libhearth.a $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/tests/unit/%.o $(HELPER_OBJS) $(BUILD)/libhearth.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(HELPER_OBJS) $(BUILD)/libhearth.a $(LDLIBS)

testdata: | $(DEPS_STAMP)
	@bash scripts/testdata.sh

# The CUDA kernel benchmark (bench/cuda_kernels.sh); built with the tests so that CI
# compiles and links it.
CUDA_BENCH := $(if $(strip $(NVCC)),$(BUILD)/cuda_bench)
$(BUILD)/cuda_bench: $(BUILD)/bench/cuda_bench.o $(BUILD)/libhearth.a
	$(CC) $(ALL_CFLAGS) -o $@ $< $(BUILD)/libhearth.a $(LDLIBS)

test: $(BUILD)/hearth $(TEST_BINS) $(CUDA_BENCH) testdata
	@HEARTH_BIN=$(BUILD)/hearth bash tests/run.sh $(BUILD) $(TEST_BINS)

# AddressSanitizer + UBSan at -O2, as the release build: the same instrumentation, and
# the tests 20% faster (CI simulation: the pass's tests 389 -> 312 s; test_forward 137 ->
# 103 s), for a longer build (the library 27 -> 52 s on 2 cores).
asan:
	@$(MAKE) --no-print-directory BUILD=build-asan OPT=-O2 \
	  SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" test

# make test, then make asan, with TEST_LONG=1: every repetition at its full count, where
# the default suite trims one under the sanitizers (README, Testing).  Not part of CI.
test-long:
	@TEST_LONG=1 $(MAKE) --no-print-directory test
	@TEST_LONG=1 $(MAKE) --no-print-directory asan

run: $(BUILD)/hearth
	@bash scripts/run.sh $(BUILD)/hearth

bench: $(BUILD)/hearth
	@bash bench/run.sh $(BUILD)/hearth

fuzz:
	@bash tests/fuzz/build.sh

# Every fuzz target for FUZZ_LONG_SECONDS each (default 600; not part of CI).
FUZZ_LONG_SECONDS ?= 600
fuzz-long:
	@bash tests/fuzz/build.sh $(FUZZ_LONG_SECONDS)

clean:
	rm -rf build build-asan build-fuzz build-cuda

-include $(LIB_OBJS:.o=.d) $(CLI_OBJS:.o=.d) $(HELPER_OBJS:.o=.d) $(TEST_BINS:$(BUILD)/tests/%=$(BUILD)/tests/unit/%.d) $(BUILD)/bench/cuda_bench.d

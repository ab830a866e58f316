# pptrain — build, test, run, bench.  `make V=1` shows commands, `make DEBUG=1` builds
# with ASan/UBSan into build/debug. CUDA code is built when nvcc is found.

CC      ?= cc
NVCC    ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
BLASDIR := /usr/lib/x86_64-linux-gnu/openblas-openmp
ARCH    := $(shell grep -qw avx2 /proc/cpuinfo 2>/dev/null && grep -qw fma /proc/cpuinfo && echo -mavx2 -mfma)

ifeq ($(DEBUG),1)
  OPT   := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer
  BUILD := build/debug
else
  OPT   := -O3 -g $(ARCH)
  BUILD := build/cpu
endif

# No -ffast-math: the CPU backend is the numerical reference. -fno-math-errno and
# -fno-trapping-math change no result; they let sqrtf and the clamped exp vectorize.
CFLAGS  += -std=gnu11 -fopenmp -fno-math-errno -fno-trapping-math -Wall -Wextra -Wno-unused-parameter -Wshadow -MMD -MP \
           -I$(BLASDIR:/usr/lib/%=/usr/include/%) -iquote src $(OPT) \
           $(shell pkg-config --cflags yaml-0.1 zlib 2>/dev/null)
LDFLAGS += -fopenmp $(filter -fsanitize=%,$(OPT)) -L$(BLASDIR) -Wl,-rpath,$(BLASDIR)
LDLIBS  += -lopenblas -lyaml -lz -lm -lpthread
CHECK_LIBS := $(shell pkg-config --libs check 2>/dev/null)

ifeq ($(V),1)
  Q :=
else
  Q := @
endif

SRC      := $(wildcard src/*.c)
LIB_OBJ  := $(patsubst src/%.c,$(BUILD)/%.o,$(filter-out src/main.c,$(SRC)))
MAIN_OBJ := $(BUILD)/main.o
TEST_SRC := $(wildcard test/test_*.c)
TESTS    := $(patsubst test/%.c,$(BUILD)/test/%,$(TEST_SRC))
TEST_UTIL:= $(patsubst test/%.c,$(BUILD)/test/%.o,$(filter-out $(TEST_SRC),$(wildcard test/*.c)))

.PHONY: all deps run test unit-tests bench clean data cuda-note
.SECONDARY:  # keep the test objects between runs

all: cuda-note pptrain

cuda-note:
ifneq ($(NVCC),)
	@echo "make: nvcc found at $(NVCC); no CUDA sources to build yet (CPU build only)"
else
	@echo "make: nvcc not found: CPU-only build"
endif

pptrain: $(LIB_OBJ) $(MAIN_OBJ)
	@echo "  LD    $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/%.o: src/%.c Makefile
	@mkdir -p $(dir $@)
	@echo "  CC    $<"
	$(Q)$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/test/%.o: test/%.c Makefile
	@mkdir -p $(dir $@)
	@echo "  CC    $<"
	$(Q)$(CC) $(CFLAGS) $(shell pkg-config --cflags check 2>/dev/null) -c -o $@ $<

$(BUILD)/test/test_%: $(BUILD)/test/test_%.o $(TEST_UTIL) $(LIB_OBJ)
	@echo "  LD    $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(CHECK_LIBS) $(LDLIBS)

deps:
	@scripts/install-deps

# The small dataset the default config trains on, generated here (no download).
data: data/tiny/train.bin
data/tiny/train.bin: data/tiny.txt pptrain
	$(Q)./pptrain prepare-data --text data/tiny.txt --out data/tiny/train.bin --val-fraction 0.1

run: deps
	$(Q)$(MAKE) --no-print-directory all data
	rm -rf runs/gpt-tiny  # the demo starts afresh (pptrain refuses to overwrite a run's checkpoints)
	scripts/pprun --nproc-per-node 2 ./pptrain --config configs/gpt-tiny.yaml

unit-tests: all data $(TESTS)
	@set -e; fail=0; for t in $(TESTS); do \
	  echo "== $$t"; $$t || fail=1; \
	done; \
	for s in test/*.sh; do [ -e "$$s" ] || continue; \
	  echo "== $$s"; PPTRAIN=./pptrain bash $$s || fail=1; \
	done; \
	if [ $$fail -ne 0 ]; then echo "make test: FAILED"; exit 1; fi; echo "make test: all passed"

test: deps
	$(Q)$(MAKE) --no-print-directory unit-tests

bench: deps
	$(Q)$(MAKE) --no-print-directory all data $(BUILD)/bench_gemm $(BUILD)/bench_ckpt
	bash bench/run.sh $(BUILD)

$(BUILD)/bench_ckpt: bench/bench_ckpt.c $(LIB_OBJ)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/bench_gemm: bench/bench_gemm.c
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LDLIBS)

clean:
	rm -rf build pptrain

-include $(wildcard $(BUILD)/*.d $(BUILD)/test/*.d)

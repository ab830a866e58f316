# pptrain — build, test, run, bench.  `make V=1` shows commands. `make DEBUG=1` builds
# with ASan/UBSan into build/debug (the binary is build/debug/pptrain; ./pptrain stays the
# release build) and `make test DEBUG=1` runs the suite against it; a sanitizer finding
# ends the program with an error. CUDA code is built when nvcc is found.

CC      ?= cc
NVCC    ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
BLASDIR := /usr/lib/x86_64-linux-gnu/openblas-openmp
ARCH    := $(shell grep -qw avx2 /proc/cpuinfo 2>/dev/null && grep -qw fma /proc/cpuinfo && echo -mavx2 -mfma)

ifeq ($(DEBUG),1)
  OPT   := -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
  BUILD := build/debug
  BIN   := $(BUILD)/pptrain
else
  OPT   := -O3 -g $(ARCH)
  BUILD := build/cpu
  BIN   := pptrain
endif
# the binary as a command (data, run, and PPTRAIN for the test scripts)
EXE := ./$(BIN)

# No -ffast-math: the CPU backend is the numerical reference. -fno-math-errno and
# -fno-trapping-math change no result; they let sqrtf and the clamped exp vectorize.
CFLAGS  += -std=gnu11 -fopenmp -fno-math-errno -fno-trapping-math -Wall -Wextra -Wno-unused-parameter -Wshadow -MMD -MP \
           -I$(BLASDIR:/usr/lib/%=/usr/include/%) -iquote src $(OPT) \
           $(shell pkg-config --cflags yaml-0.1 zlib libcrypto 2>/dev/null)
LDFLAGS += -fopenmp $(filter -fsanitize=%,$(OPT)) -L$(BLASDIR) -Wl,-rpath,$(BLASDIR)
LDLIBS  += -lopenblas -lyaml -lz $(shell pkg-config --libs libcrypto 2>/dev/null || echo -lcrypto) -lm -lpthread
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
# Keep the test objects between runs (they are made by a chain of pattern rules, which
# would make them intermediate). Named: an empty .SECONDARY would make every file
# secondary, and a binary would then count as up to date while its objects are missing.
.SECONDARY: $(TESTS:=.o) $(TEST_UTIL)

all: cuda-note $(BIN)

cuda-note:
ifneq ($(NVCC),)
	@echo "make: nvcc found at $(NVCC); no CUDA sources to build yet (CPU build only)"
else
	@echo "make: nvcc not found: CPU-only build"
endif

$(BIN): $(LIB_OBJ) $(MAIN_OBJ)
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
data/tiny/train.bin: data/tiny.txt $(BIN)
	$(Q)$(EXE) prepare-data --text data/tiny.txt --out data/tiny/train.bin --val-fraction 0.1

run: deps
	$(Q)$(MAKE) --no-print-directory all data
	rm -rf runs/gpt-tiny  # the demo starts afresh (pptrain refuses to overwrite a run's checkpoints)
	scripts/pprun --nproc-per-node 2 $(EXE) --config configs/gpt-tiny.yaml

# The skip protocol: a test program (a Check binary or a test/*.sh script) passes with
# exit 0, is skipped with exit 77 (automake's convention), and fails otherwise. A script
# writes one line per skipped check, whether all of it or a part, saying what and why, to
# the file $PP_TEST_SKIPS. The summary lists those lines and counts the programs:
# "make test: N passed, N skipped", adding "(K of them in part)" when K of the passed
# scripts skipped some checks; any failure fails make and is named.
SKIPS := $(BUILD)/test/skips.txt
REPORT := $(BUILD)/test/skips-report.txt
unit-tests: all data $(TESTS)
	@pass=0; skip=0; part=0; failed=; : >$(REPORT); \
	for t in $(TESTS) test/*.sh; do [ -e "$$t" ] || continue; \
	  echo "== $$t"; : >$(SKIPS); \
	  case $$t in *.sh) PPTRAIN=$(EXE) PP_TEST_SKIPS=$(SKIPS) bash $$t;; *) $$t;; esac; rc=$$?; \
	  if [ $$rc -eq 77 ]; then skip=$$((skip + 1)); \
	    [ -s $(SKIPS) ] || echo "no reason given" >$(SKIPS); \
	    sed "s|^|make test: skipped $$t: |" $(SKIPS) >>$(REPORT); \
	  elif [ $$rc -ne 0 ]; then failed="$$failed $$t"; \
	  else pass=$$((pass + 1)); \
	    if [ -s $(SKIPS) ]; then part=$$((part + 1)); \
	      sed "s|^|make test: $$t passed, but skipped: |" $(SKIPS) >>$(REPORT); fi; \
	  fi; \
	done; \
	cat $(REPORT); sum="$$pass passed"; \
	[ $$part -eq 0 ] || sum="$$sum ($$part of them in part)"; sum="$$sum, $$skip skipped"; \
	if [ -n "$$failed" ]; then set -- $$failed; echo "make test: FAILED: $$# failed ($$*), $$sum"; exit 1; fi; \
	echo "make test: $$sum"

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

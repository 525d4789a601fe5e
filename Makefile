# torchprobe: non-recursive build. Everything lands in build/.
#   make          build/torchprobe
#   make test     unit + privileged + PyTorch tests (GoogleTest)
#   make bench    cost ratios against baselines measured in the same run
#   make demo     trace the bundled training script and print the report
#   make clean
.DELETE_ON_ERROR:
.SUFFIXES:
.SECONDARY:
MAKEFLAGS += --jobs=$(shell nproc)

BUILD   ?= build
CXX     ?= g++
CLANG   ?= clang
BPFTOOL ?= bpftool
PROTOC  ?= protoc
PYTHON  ?= /usr/bin/python3
LLVM_CONFIG ?= llvm-config
VERSION ?= 0.2.0-$(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)

ifeq ($(V),1)
Q :=
msg :=
else
Q := @
msg = @printf '  %-8s %s\n' "$(1)" "$(2)";
endif

CXXFLAGS ?= -O2 -g
CXXFLAGS += -std=c++20 -isystem $(shell $(LLVM_CONFIG) --includedir) -Wall -Wextra -Wno-unused-parameter -I. -I$(BUILD) -I$(BUILD)/gen -MMD -MP
# LLVM: its disassembler finds the return instructions to probe. RE2: the
# agent's filters run on text any process chooses, in linear time.
# Only the disassembler's LLVM components, linked statically: the shared
# libLLVM costs ~70 ms of relocation and static constructors at every start,
# and the agent starts a record for each window and trigger.
LLVM_LIBS := $(shell $(LLVM_CONFIG) --link-static --libs x86disassembler x86desc x86info mcdisassembler mc support)
LDLIBS   += -lbpf -lelf -lz -lprotobuf -lre2 -L$(shell $(LLVM_CONFIG) --libdir) -Wl,-Bstatic $(LLVM_LIBS) -Wl,-Bdynamic -ltinfo -lpthread
BPF_CFLAGS := -g -O2 -target bpf -D__TARGET_ARCH_x86 -I. -Ivmlinux -Wall

# The CUPTI collector is a library of its own, loaded into the target.
CUPTI_COLLECTOR_SRC := userspace/cupti/collector.cc
CUPTI_COLLECTOR     := $(BUILD)/libtorchprobe_cupti.so
# CUPTI's headers: the toolkit's where given (CUPTI_INCLUDE=/usr/local/cuda/include),
# else Debian's libcupti-dev, with our declarations of the driver types it names.
CUPTI_INCLUDE ?=
CUPTI_CFLAGS ?=   # e.g. -DTPC_KERNEL_RECORD=CUpti_ActivityKernel10 (see collector.cc)
# Without CUPTI's headers (tools/install-deps installs them) the collector
# and its fake CUPTI are not built, and the tests that need them skip.
HAVE_CUPTI := $(if $(CUPTI_INCLUDE),$(wildcard $(CUPTI_INCLUDE)/cupti_activity.h),$(wildcard /usr/include/cupti_activity.h))
CUPTI_BUILT := $(if $(HAVE_CUPTI),$(CUPTI_COLLECTOR))
# The record layouts the collector reads: the newest each header declares
# (CUPTI hands out its newest; 13.x dropped 11.8's Memcpy5 from its header).
CUPTI_HEADER := $(firstword $(HAVE_CUPTI))
cupti_newest = $(shell grep -oE '^\} *CUpti_Activity$(1)[0-9]*;' $(CUPTI_HEADER) 2>/dev/null | tr -d '}; ' | sort -V | tail -1)
CUPTI_RECORDS = $(foreach r,KERNEL:Kernel MEMCPY:Memcpy MEMSET:Memset SYNC:Synchronization,\
    $(if $(call cupti_newest,$(word 2,$(subst :, ,$(r)))),-DTPC_$(word 1,$(subst :, ,$(r)))_RECORD=$(call cupti_newest,$(word 2,$(subst :, ,$(r))))))
# Two BPF objects, a skeleton each: the agent's, from its one file, and
# torchprobe's, linked from one file per capability (bpf/README.md).
AGENT_BPF_SRC := bpf/agent.bpf.c
TP_BPF_SRCS := $(filter-out $(AGENT_BPF_SRC),$(wildcard bpf/*.bpf.c))
TP_BPF_PARTS := $(patsubst bpf/%.bpf.c,$(BUILD)/bpf/parts/%.bpf.o,$(TP_BPF_SRCS))
BPF_SKELS  := $(BUILD)/torchprobe.skel.h $(BUILD)/agent.skel.h
PROTOS     := $(wildcard schemas/*.proto)
PROTO_CC   := $(patsubst %.proto,$(BUILD)/gen/%.pb.cc,$(PROTOS))
PROTO_H    := $(PROTO_CC:.cc=.h)
LIB_SRCS   := $(filter-out userspace/main.cc $(CUPTI_COLLECTOR_SRC),$(shell find userspace -name '*.cc' | sort))
LIB_OBJS   := $(patsubst %.cc,$(BUILD)/obj/%.o,$(LIB_SRCS)) $(patsubst %.cc,%.o,$(PROTO_CC))
MAIN_OBJ   := $(BUILD)/obj/userspace/main.o
TEST_SRCS  := $(wildcard tests/*.cc)
TEST_OBJS  := $(patsubst %.cc,$(BUILD)/obj/%.o,$(TEST_SRCS))
FIXTURES   := $(BUILD)/fixtures/libtorch_cpu.so $(BUILD)/fixtures/op_storm \
              $(BUILD)/fixtures/many/libtorch_cpu.so $(BUILD)/fixtures/many/op_spin \
              $(BUILD)/fixtures/few/libtorch_cpu.so $(BUILD)/fixtures/few/op_spin \
              $(BUILD)/fixtures/some/libtorch_cpu.so $(BUILD)/fixtures/some/op_spin \
              $(BUILD)/fixtures/throwing/libtorch_cpu.so $(BUILD)/fixtures/throwing/throw_torture \
              $(BUILD)/fixtures/nesting/libtorch_cpu.so $(BUILD)/fixtures/nesting/throw_depth \
              $(BUILD)/fixtures/cudamem/libc10.so $(BUILD)/fixtures/cudamem/libcudart.so \
              $(BUILD)/fixtures/cudamem/device_storm \
              $(BUILD)/fixtures/cuda/cuda_loop $(if $(HAVE_CUPTI),$(BUILD)/fixtures/cuda/cupti_loop $(CUPTI_COLLECTOR)) \
              $(BUILD)/fixtures/inject/inject_loop $(BUILD)/fixtures/inject/libinject_marker.so \
              $(BUILD)/fixtures/fake_target

.PHONY: all test bench demo clean device
# torchprobe and a collector (this machine's CUPTI headers) to carry to a GPU
# machine; tools/gpu-device-run rebuilds the collector there with its toolkit.
device: $(BUILD)/device/torchprobe $(if $(HAVE_CUPTI),$(BUILD)/device/libtorchprobe_cupti.so)
$(BUILD)/device/libtorchprobe_cupti.so: $(CUPTI_COLLECTOR)
	$(Q)mkdir -p $(@D) && cp $< $@
all: $(BUILD)/torchprobe $(CUPTI_BUILT)

# No link to libcupti: the collector finds the target's own at run time.
$(CUPTI_COLLECTOR): $(CUPTI_COLLECTOR_SRC) userspace/cupti/record_stream.h
	$(call msg,CXX,$@)
	$(Q)$(CXX) -O2 -g -std=c++17 -Wall -Wextra -Wno-unused-parameter -fPIC -shared -fvisibility=hidden \
	    -I. $(if $(CUPTI_INCLUDE),-I$(CUPTI_INCLUDE)) -idirafter userspace/cupti/compat $(CUPTI_RECORDS) $(CUPTI_CFLAGS) \
	    -o $@ $< -ldl -lpthread

$(BUILD)/torchprobe: $(MAIN_OBJ) $(LIB_OBJS)
	$(call msg,LINK,$@)
	$(Q)$(CXX) $(CXXFLAGS) -o $@ $^ $(LDLIBS)

# For a machine without libbpf, libelf, protobuf or LLVM (the GPU machine):
# those linked in, glibc left dynamic; debug info dropped, symbols kept
# (torchprobe probes its own calibration function by name).
DEVICE_LIBS = -static-libstdc++ -static-libgcc -L$(shell $(LLVM_CONFIG) --libdir) -Wl,-Bstatic -lbpf \
    $(LLVM_LIBS) -lprotobuf -lre2 -lelf -lz -ltinfo -Wl,-Bdynamic -lpthread -ldl -lrt -lm
$(BUILD)/device/torchprobe: $(MAIN_OBJ) $(LIB_OBJS)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) $(CXXFLAGS) -o $@.full $^ $(DEVICE_LIBS)
	$(Q)strip --strip-debug -o $@ $@.full && rm -f $@.full

$(BUILD)/torchprobe_tests: $(TEST_OBJS) $(LIB_OBJS)
	$(call msg,LINK,$@)
	$(Q)$(CXX) $(CXXFLAGS) -o $@ $^ -lgtest $(LDLIBS)

# Every C++ object may include a skeleton or a generated proto header.
$(BUILD)/obj/%.o: %.cc $(BPF_SKELS) $(PROTO_H)
	$(call msg,CXX,$<)
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) $(CXXFLAGS) -c -o $@ $<

$(MAIN_OBJ): CXXFLAGS += -DTORCHPROBE_VERSION='"$(VERSION)"'

$(BUILD)/gen/%.pb.o: $(BUILD)/gen/%.pb.cc
	$(call msg,CXX,$<)
	$(Q)$(CXX) $(CXXFLAGS) -Wno-extra -c -o $@ $<

$(BUILD)/gen/%.pb.cc $(BUILD)/gen/%.pb.h: %.proto
	$(call msg,PROTOC,$<)
	$(Q)mkdir -p $(BUILD)/gen
	$(Q)$(PROTOC) --cpp_out=$(BUILD)/gen $<

BPF_HEADERS := bpf/events.h $(wildcard bpf/*.bpf.h) $(wildcard vmlinux/*.h)
$(BUILD)/bpf/parts/%.bpf.o: bpf/%.bpf.c $(BPF_HEADERS)
	$(call msg,BPF,$<)
	$(Q)mkdir -p $(@D)
	$(Q)$(CLANG) $(BPF_CFLAGS) -c $< -o $@

# The capabilities' files, linked: their shared maps (__weak in
# bpf/common.bpf.h) become one of each.
$(BUILD)/bpf/torchprobe.bpf.o: $(TP_BPF_PARTS)
	$(call msg,BPFLINK,$@)
	$(Q)$(BPFTOOL) gen object $@ $^

$(BUILD)/bpf/agent.bpf.o: $(AGENT_BPF_SRC) $(BPF_HEADERS)
	$(call msg,BPF,$<)
	$(Q)mkdir -p $(@D)
	$(Q)$(CLANG) $(BPF_CFLAGS) -c $< -o $@.tmp.o
	$(Q)$(BPFTOOL) gen object $@ $@.tmp.o
	$(Q)rm -f $@.tmp.o

$(BUILD)/%.skel.h: $(BUILD)/bpf/%.bpf.o
	$(call msg,SKEL,$@)
	$(Q)$(BPFTOOL) gen skeleton $< name $(subst -,_,$*)_bpf > $@

# A fake libtorch_cpu.so and a program that calls its ops in a tight loop.
$(BUILD)/fixtures/libtorch_cpu.so: tests/fixtures/fake_torch.c
	$(call msg,CC,$<)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) -O1 -g -shared -fPIC -o $@ $<

$(BUILD)/fixtures/op_storm: tests/fixtures/op_storm.c $(BUILD)/fixtures/libtorch_cpu.so
	$(call msg,CC,$<)
	$(Q)$(CC) -O1 -g -o $@ $< -L$(BUILD)/fixtures -ltorch_cpu -Wl,-rpath,'$$ORIGIN'

# Not PyTorch, yet a target of the agent: a FIFO beside its libtorch, or a file cut short while mapped.
$(BUILD)/fixtures/fake_target: tests/fixtures/fake_target.c
	$(call msg,CC,$<)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) -O1 -g -o $@ $< -ldl

# 200 ops, of which the loop calls two: the per-symbol fallback's removal.
$(BUILD)/fixtures/many/libtorch_cpu.so: tests/fixtures/fake_torch_many.c
	$(call msg,CC,$<)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) -O1 -g -shared -fPIC -o $@ $<

$(BUILD)/fixtures/many/op_spin: tests/fixtures/op_spin.c $(BUILD)/fixtures/many/libtorch_cpu.so
	$(call msg,CC,$<)
	$(Q)$(CC) -O1 -g -o $@ $< -L$(BUILD)/fixtures/many -ltorch_cpu -Wl,-rpath,'$$ORIGIN'

# The same with 3 ops (one never called): a keeper that lingers on an unused
# probe, but comes off in a moment (the keeper tests that need no crowd).
$(BUILD)/fixtures/few/libtorch_cpu.so: tests/fixtures/fake_torch_many.c
	$(call msg,CC,$<)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) -O1 -g -shared -fPIC -DFAKE_TORCH_FEW -o $@ $<

$(BUILD)/fixtures/few/op_spin: tests/fixtures/op_spin.c $(BUILD)/fixtures/few/libtorch_cpu.so
	$(call msg,CC,$<)
	$(Q)$(CC) -O1 -g -o $@ $< -L$(BUILD)/fixtures/few -ltorch_cpu -Wl,-rpath,'$$ORIGIN'

# 40 ops: probes that linger for a few seconds, not twenty (keeper tests).
$(BUILD)/fixtures/some/libtorch_cpu.so: tests/fixtures/fake_torch_many.c
	$(call msg,CC,$<)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) -O1 -g -shared -fPIC -DFAKE_TORCH_SOME -o $@ $<

$(BUILD)/fixtures/some/op_spin: tests/fixtures/op_spin.c $(BUILD)/fixtures/some/libtorch_cpu.so
	$(call msg,CC,$<)
	$(Q)$(CC) -O1 -g -o $@ $< -L$(BUILD)/fixtures/some -ltorch_cpu -Wl,-rpath,'$$ORIGIN'

$(BUILD)/fixtures/throwing/libtorch_cpu.so: tests/fixtures/throwing_torch.cc
	$(call msg,CXX,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) -O2 -g -shared -fPIC -fvisibility=hidden -o $@ $<

$(BUILD)/fixtures/throwing/throw_torture: tests/fixtures/throw_torture.cc $(BUILD)/fixtures/throwing/libtorch_cpu.so
	$(call msg,CXX,$@)
	$(Q)$(CXX) -O2 -g -std=c++17 -o $@ $< -L$(BUILD)/fixtures/throwing -ltorch_cpu -lpthread -Wl,-rpath,'$$ORIGIN'

# One recursive op that throws from its bottom: the bench's cost of a throw.
$(BUILD)/fixtures/nesting/libtorch_cpu.so: tests/fixtures/nested_torch.cc
	$(call msg,CXX,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) -O2 -g -shared -fPIC -fvisibility=hidden -o $@ $<

$(BUILD)/fixtures/nesting/throw_depth: tests/fixtures/throw_depth.cc $(BUILD)/fixtures/nesting/libtorch_cpu.so
	$(call msg,CXX,$@)
	$(Q)$(CXX) -O2 -g -std=c++17 -o $@ $< -L$(BUILD)/fixtures/nesting -ltorch_cpu -Wl,-rpath,'$$ORIGIN'
# A fake libc10 and CUDA runtime with the entry points --memory probes, and
# a program that plays CUDA's caching allocator through them.
$(BUILD)/fixtures/cudamem/libc10.so: tests/fixtures/fake_c10.c
	$(call msg,CC,$<)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) -O1 -g -shared -fPIC -o $@ $<

$(BUILD)/fixtures/cudamem/libcudart.so: tests/fixtures/fake_cudart.c
	$(call msg,CC,$<)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) -O1 -g -shared -fPIC -o $@ $<

$(BUILD)/fixtures/cudamem/device_storm: tests/fixtures/device_storm.c $(BUILD)/fixtures/cudamem/libc10.so \
                                     $(BUILD)/fixtures/cudamem/libcudart.so $(BUILD)/fixtures/libtorch_cpu.so
	$(call msg,CC,$<)
	$(Q)$(CC) -O1 -g -o $@ $< -L$(BUILD)/fixtures/cudamem -lc10 -lcudart -L$(BUILD)/fixtures -ltorch_cpu \
	    -Wl,-rpath,'$$ORIGIN:$$ORIGIN/..'

# The PyTorch 2.x root that the 2.x tests trace (tools/torch2-root): built
# once (about 70-190 s, 1.4 GB), found in ~2 s after. TORCH2_ROOT=skip does
# not build it; where it cannot be built, the 2.x tests skip and say why.
TORCH2_ROOT ?=
# Fake CUDA runtime, driver and NCCL (their sonames, their signatures), a
# CUDA libtorch calling them from its ops, and a loop calling those ops.
# No identical-code folding: each fake call stays its own function.
FAKE_CUDA_CFLAGS := -O1 -g -fno-ipa-icf -shared -fPIC
$(BUILD)/fixtures/cuda/libcudart.so.13: tests/fixtures/fake_cudart.c
	$(call msg,CC,$<)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(FAKE_CUDA_CFLAGS) -Wl,-soname,libcudart.so.13 -o $@ $<

$(BUILD)/fixtures/cuda/libcuda.so.1: tests/fixtures/fake_cuda_driver.c
	$(call msg,CC,$<)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(FAKE_CUDA_CFLAGS) -Wl,-soname,libcuda.so.1 -o $@ $<

$(BUILD)/fixtures/cuda/libnccl.so.2: tests/fixtures/fake_nccl.c
	$(call msg,CC,$<)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(FAKE_CUDA_CFLAGS) -Wl,-soname,libnccl.so.2 -o $@ $<

$(BUILD)/fixtures/cuda/libtorch_cpu.so: tests/fixtures/fake_torch_cuda.c $(BUILD)/fixtures/cuda/libcudart.so.13 $(BUILD)/fixtures/cuda/libcuda.so.1
	$(call msg,CC,$<)
	$(Q)$(CC) $(FAKE_CUDA_CFLAGS) -o $@ $< -L$(@D) -l:libcudart.so.13 -l:libcuda.so.1 -Wl,-rpath,'$$ORIGIN'

$(BUILD)/fixtures/cuda/cuda_loop: tests/fixtures/cuda_loop.c $(BUILD)/fixtures/cuda/libtorch_cpu.so $(BUILD)/fixtures/cuda/libnccl.so.2
	$(call msg,CC,$<)
	$(Q)$(CC) -O1 -g -o $@ $< -L$(@D) -ltorch_cpu -l:libcudart.so.13 -l:libnccl.so.2 -Wl,-rpath,'$$ORIGIN' \
	    -Wl,--no-as-needed -lgcc_s  # the C++ unwinder a PyTorch process maps: returns by uretprobe

# A fake CUPTI (the calls the collector makes, CUPTI 11.8's record layouts)
# and a loop that injects the collector as the driver would and launches.
# The injector's target and the library its test loads into it.
$(BUILD)/fixtures/inject/inject_loop: tests/fixtures/inject_loop.c
	$(call msg,CC,$<)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) -O1 -g -o $@ $< -lpthread

$(BUILD)/fixtures/inject/libinject_marker.so: tests/fixtures/inject_marker.c
	$(call msg,CC,$<)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) -O1 -g -shared -fPIC -o $@ $<

$(BUILD)/fixtures/cuda/libcupti.so.13: tests/fixtures/fake_cupti.c
	$(call msg,CC,$<)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(FAKE_CUDA_CFLAGS) -idirafter userspace/cupti/compat -Wl,-soname,libcupti.so.13 -o $@ $< -lpthread

$(BUILD)/fixtures/cuda/cupti_loop: tests/fixtures/cupti_loop.c $(BUILD)/fixtures/cuda/libtorch_cpu.so $(BUILD)/fixtures/cuda/libcupti.so.13
	$(call msg,CC,$<)
	$(Q)$(CC) -O1 -g -o $@ $< -L$(@D) -ltorch_cpu -l:libcudart.so.13 -l:libcupti.so.13 -ldl -Wl,-rpath,'$$ORIGIN' \
	    -Wl,--no-as-needed -lgcc_s

test: $(BUILD)/torchprobe $(BUILD)/torchprobe_tests $(FIXTURES)
ifneq ($(TORCH2_ROOT),skip)
	$(Q)tools/torch2-root >/dev/null || echo "  torch2-root: no PyTorch 2.x root (its tests will skip)"
endif
	$(Q)TORCHPROBE=$(BUILD)/torchprobe PYTHON=$(PYTHON) $(BUILD)/torchprobe_tests $(TEST_ARGS)

# The event-rate generator: the pipeline of `record` fed by a BPF burst program.
$(BUILD)/bench_pipeline: $(BUILD)/obj/tools/bench_pipeline.o $(LIB_OBJS)
	$(call msg,LINK,$@)
	$(Q)$(CXX) $(CXXFLAGS) -o $@ $^ $(LDLIBS)

# Export time, bytes per slice and peak RSS of each writer on >= 1 M slices.
$(BUILD)/bench_writers: $(BUILD)/obj/tools/bench_writers.o $(LIB_OBJS)
	$(call msg,LINK,$@)
	$(Q)$(CXX) $(CXXFLAGS) -o $@ $^ $(LDLIBS)

bench: $(BUILD)/torchprobe $(BUILD)/bench_pipeline $(BUILD)/bench_writers $(FIXTURES)
	$(Q)$(PYTHON) tools/bench.py --torchprobe $(BUILD)/torchprobe

demo: $(BUILD)/torchprobe
	$(Q)$(BUILD)/torchprobe record -o $(BUILD)/demo.pftrace -- $(PYTHON) tests/fixtures/train.py --steps 20
	$(Q)$(BUILD)/torchprobe report $(BUILD)/demo.pftrace

clean:
	$(call msg,CLEAN,$(BUILD))
	$(Q)rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

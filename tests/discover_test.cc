// The discover stage: mangled at::_ops names, schema re-printing, name
// resolution on synthetic string tables, ELF address -> file offset, /proc
// parsing on this very process, and, when Debian's python3-torch is
// installed, the whole probe plan of the real libtorch_cpu.so checked
// against the schemas torch itself prints.
#include <dlfcn.h>
#include <elf.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "tests/test_support.h"
#include "userspace/base/proc_maps.h"
#include "userspace/base/unobserved_ops.h"
#include "userspace/discover/collective_probes.h"
#include "userspace/discover/elf_symbols.h"
#include "userspace/discover/op_names.h"
#include "userspace/discover/op_probes.h"
#include "userspace/discover/op_symbols.h"
#include "userspace/discover/return_sites.h"
#include "userspace/discover/schema_format.h"
#include "userspace/discover/schema_strings.h"

namespace torchprobe {
namespace {

constexpr const char* kDebianLibtorch = "/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13.0";

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// --- mangled names -------------------------------------------------------

TEST(DiscoverOpSymbols, ParsesCallAndRedispatch) {
  auto call = ParseOpsSymbol("_ZN2at4_ops15sum_dim_IntList4callERKNS_6TensorEN3c1016OptionalArrayRefIlEEb");
  ASSERT_TRUE(call.has_value());
  EXPECT_EQ(call->struct_name, "sum_dim_IntList");
  EXPECT_EQ(call->member, "call");
  EXPECT_TRUE(IsOpCallSymbol("_ZN2at4_ops10mul_Tensor4callERKNS_6TensorES4_"));

  auto redispatch = ParseOpsSymbol("_ZN2at4_ops10add_Tensor10redispatchEN3c1014DispatchKeySetERKNS_6TensorE");
  ASSERT_TRUE(redispatch.has_value());
  EXPECT_EQ(redispatch->member, "redispatch");
  EXPECT_FALSE(IsOpCallSymbol("_ZN2at4_ops10add_Tensor10redispatchEN3c1014DispatchKeySetERKNS_6TensorE"));

  auto schema = ParseOpsSymbol("_ZN2at4_ops15sum_dim_IntList10schema_strE");
  ASSERT_TRUE(schema.has_value());
  EXPECT_EQ(schema->member, "schema_str");
}

TEST(DiscoverOpSymbols, RejectsWhatIsNotAnEntryPoint) {
  EXPECT_FALSE(IsOpCallSymbol("_ZN2at4_ops3foo3bar4callEv"));           // nested deeper
  EXPECT_FALSE(IsOpCallSymbol("_ZZN2at4_ops3cos4callERKNS_6TensorEE2op"));  // local static
  EXPECT_FALSE(IsOpCallSymbol("_ZN2at4_ops3cos4callERKNS_6TensorE.cold"));  // clone
  EXPECT_FALSE(IsOpCallSymbol("_ZN2at6native3cos4callERKNS_6TensorE"));     // other namespace
  EXPECT_FALSE(IsOpCallSymbol("_ZN2at4_ops99cos4callE"));                   // length past the end
  EXPECT_FALSE(IsOpCallSymbol("_ZN2at4_ops3cos4callx"));                    // unterminated
  EXPECT_FALSE(IsOpCallSymbol("malloc"));
}

TEST(DiscoverOpSymbols, CandidateSplits) {
  std::vector<NameSplit> splits = CandidateSplits("sum_dim_IntList");
  ASSERT_EQ(splits.size(), 3u);
  EXPECT_EQ(splits[0].name, "sum_dim_IntList");
  EXPECT_EQ(splits[0].overload, "");
  EXPECT_EQ(splits[1].name, "sum");
  EXPECT_EQ(splits[1].overload, "dim_IntList");
  EXPECT_EQ(splits[2].name, "sum_dim");
  EXPECT_EQ(splits[2].overload, "IntList");

  // In-place ops end in "_": add_.Tensor is the struct add__Tensor.
  std::vector<NameSplit> inplace = CandidateSplits("add__Tensor");
  bool found = false;
  for (const NameSplit& s : inplace) found |= s.name == "add_" && s.overload == "Tensor";
  EXPECT_TRUE(found);
  for (const NameSplit& s : CandidateSplits("_foo_")) {
    EXPECT_FALSE(s.name.empty());
    if (s.name != "_foo_") {
      EXPECT_FALSE(s.overload.empty());
    }
  }
}

TEST(DiscoverOpSymbols, ArgKindsFromSignatures) {
  auto kinds = CallArgKinds("_ZN2at4_ops3cos4callERKNS_6TensorE");
  ASSERT_TRUE(kinds.has_value());
  EXPECT_EQ(*kinds, std::vector<ArgKind>{ArgKind::kTensor});
  auto params = ParamListKinds(
      "(c10::ArrayRef<at::Tensor>, c10::optional<at::Tensor> const&, "
      "c10::List<c10::optional<at::Tensor> > const&, at::TensorOptions, long, std::pair<int, int>)");
  ASSERT_TRUE(params.has_value());
  EXPECT_EQ(*params, (std::vector<ArgKind>{ArgKind::kTensorList, ArgKind::kTensor, ArgKind::kTensorList,
                                           ArgKind::kOther, ArgKind::kOther, ArgKind::kOther}));
  EXPECT_EQ(ParamListKinds("()")->size(), 0u);
  EXPECT_FALSE(CallArgKinds("not mangled").has_value());
}

// --- schema text as PyTorch prints it ------------------------------------

TEST(DiscoverSchemaFormat, Doubles) {
  EXPECT_EQ(FormatDouble(1.0), "1.");
  EXPECT_EQ(FormatDouble(0.0), "0.");
  EXPECT_EQ(FormatDouble(-0.0), "-0.");
  EXPECT_EQ(FormatDouble(-2.0), "-2.");
  EXPECT_EQ(FormatDouble(0.5), "0.5");
  EXPECT_EQ(FormatDouble(1e-05), "1.0000000000000001e-05");
  EXPECT_EQ(FormatDouble(1e-08), "1e-08");
  EXPECT_EQ(FormatDouble(0.3333333333333333), "0.33333333333333331");
}

TEST(DiscoverSchemaFormat, PrintsLikeFunctionSchema) {
  // Each pair: the text in libtorch's rodata, then torch's str(schema).
  const std::pair<const char*, const char*> kCases[] = {
      {"sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
       "aten::sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"},
      {"all.dimname(Tensor self, Dimname dim, bool keepdim=False) -> Tensor",
       "aten::all.dimname(Tensor self, str dim, bool keepdim=False) -> Tensor"},
      {"rename_(Tensor(a!) self, Dimname[]? names) -> Tensor(a!)",
       "aten::rename_(Tensor(a!) self, str[]? names) -> Tensor(a!)"},
      {"allclose(Tensor self, Tensor other, float rtol=1e-05, float atol=1e-08, bool equal_nan=False) -> bool",
       "aten::allclose(Tensor self, Tensor other, float rtol=1.0000000000000001e-05, float atol=1e-08, "
       "bool equal_nan=False) -> bool"},
      {"kl_div(Tensor self, Tensor target, int reduction=Mean, *, bool log_target=False) -> Tensor",
       "aten::kl_div(Tensor self, Tensor target, int reduction=1, *, bool log_target=False) -> Tensor"},
      {"conv1d(Tensor input, Tensor weight, Tensor? bias=None, int[1] stride=1, int[1] padding=0) -> Tensor",
       "aten::conv1d(Tensor input, Tensor weight, Tensor? bias=None, int[1] stride=[1], int[1] padding=[0]) -> "
       "Tensor"},
      {"conv2d(Tensor input, Tensor weight, Tensor? bias=None, int[2] stride=1, int[2] padding=0) -> Tensor",
       "aten::conv2d(Tensor input, Tensor weight, Tensor? bias=None, int[2] stride=1, int[2] padding=0) -> Tensor"},
      {"rot90(Tensor self, int k=1, int[] dims=[0,1]) -> Tensor",
       "aten::rot90(Tensor self, int k=1, int[] dims=[0, 1]) -> Tensor"},
      {"gelu(Tensor self, *, str approximate='none') -> Tensor",
       "aten::gelu(Tensor self, *, str approximate=\"none\") -> Tensor"},
      {"contiguous(Tensor(a) self, *, MemoryFormat memory_format=contiguous_format) -> Tensor(a)",
       "aten::contiguous(Tensor(a) self, *, MemoryFormat memory_format=0) -> Tensor(a)"},
      {"randint(int high, int[] size, *, ScalarType? dtype=long) -> Tensor",
       "aten::randint(int high, int[] size, *, ScalarType? dtype=4) -> Tensor"},
      {"add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
       "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"},
      {"rrelu(Tensor self, Scalar upper=0.3333333333333333) -> Tensor",
       "aten::rrelu(Tensor self, Scalar upper=0.33333333333333331) -> Tensor"},
      {"max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
       "aten::max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)"},
      {"unbind.int(Tensor(a -> *) self, int dim=0) -> Tensor(a)[]",
       "aten::unbind.int(Tensor(a -> *) self, int dim=0) -> Tensor(a)[]"},
      {"_assert_async(Tensor self) -> ()", "aten::_assert_async(Tensor self) -> ()"},
  };
  for (const auto& [source, printed] : kCases) {
    std::optional<std::string> formatted = FormatSchema("aten", source);
    ASSERT_TRUE(formatted.has_value()) << source;
    EXPECT_EQ(*formatted, printed);
  }
  EXPECT_EQ(QuoteString("\"'\\"), "\"\\\"\\'\\\\\"");
  EXPECT_EQ(FormatArgument("str a=\"\\\"'\\\\\""), "str a=\"\\\"\\'\\\\\"");
  EXPECT_FALSE(FormatSchema("aten", "not a schema").has_value());
  EXPECT_FALSE(FormatSchema("aten", "f(Tensor x) - > Tensor").has_value());
}

TEST(DiscoverSchemaFormat, ArgKinds) {
  auto schema = SplitSchema("f.out(Tensor[] a, Tensor? b, *, int c=1, Tensor(a!) out, Tensor?[] d) -> ()");
  ASSERT_TRUE(schema.has_value());
  EXPECT_EQ(schema->key, "f.out");
  EXPECT_EQ(SchemaArgKinds(*schema), (std::vector<ArgKind>{ArgKind::kTensorList, ArgKind::kTensor, ArgKind::kOther,
                                                            ArgKind::kTensor, ArgKind::kTensorList}));
}

// --- resolution ------------------------------------------------------------

SchemaStringIndex IndexOf(const std::vector<std::string>& strings) {
  static std::vector<std::string> keep;  // the index holds views
  std::string bytes(1, '\0');
  for (const std::string& s : strings) bytes += s + '\0';
  keep.push_back(bytes);
  SchemaStringIndex index;
  index.AddStrings(keep.back());
  return index;
}

TEST(DiscoverOpNames, SplitsByTheStringThatExists) {
  SchemaStringIndex index = IndexOf({
      "sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
      "not a schema -> at all",
      "mul.Tensor(Tensor self, Tensor other) -> Tensor",
  });
  auto sum = ResolveFromSchemaStrings("sum_dim_IntList", std::nullopt, index);
  ASSERT_TRUE(sum.has_value());
  EXPECT_EQ(sum->name, "aten::sum");
  EXPECT_EQ(sum->overload, "dim_IntList");
  auto mul = ResolveFromSchemaStrings("mul_Tensor", std::vector<ArgKind>{ArgKind::kTensor, ArgKind::kTensor}, index);
  ASSERT_TRUE(mul.has_value());
  EXPECT_EQ(mul->name, "aten::mul");
  EXPECT_EQ(mul->overload, "Tensor");
  EXPECT_EQ(mul->schema, "aten::mul.Tensor(Tensor self, Tensor other) -> Tensor");
  // The signature must agree: a one-argument call is not mul.Tensor.
  EXPECT_FALSE(ResolveFromSchemaStrings("mul_Tensor", std::vector<ArgKind>{ArgKind::kTensor}, index).has_value());
  EXPECT_FALSE(ResolveFromSchemaStrings("div_Tensor", std::nullopt, index).has_value());
}

TEST(DiscoverOpNames, TailMergedStrings) {
  // The linker kept "cos(Tensor self) -> Tensor" only as the tail of acos's
  // schema; _foreach_cos and quantized::cos share the key but not the op.
  SchemaStringIndex index = IndexOf({
      "acos(Tensor self) -> Tensor",
      "arccos(Tensor self) -> Tensor",
      "_foreach_cos(Tensor[] self) -> Tensor[]",
      "quantized::cos(Tensor qx, float scale) -> Tensor",
      "quantized::cos(Tensor qx, float scale) -> Tensor",
      "quantized::cos(Tensor qx, float scale) -> Tensor",
      "aten::cos(Tensor self) -> (Tensor)",
  });
  auto cos = ResolveFromSchemaStrings("cos", std::vector<ArgKind>{ArgKind::kTensor}, index);
  ASSERT_TRUE(cos.has_value());
  EXPECT_EQ(cos->name, "aten::cos");
  EXPECT_EQ(cos->overload, "");
  EXPECT_EQ(cos->schema, "aten::cos(Tensor self) -> Tensor");
  auto list = ResolveFromSchemaStrings("cos", std::vector<ArgKind>{ArgKind::kTensorList}, index);
  ASSERT_TRUE(list.has_value());
  EXPECT_EQ(list->schema, "aten::cos(Tensor[] self) -> Tensor[]");
}

TEST(DiscoverOpNames, ConstantsWin) {
  OpConstants constants;
  constants.name = "aten::add";
  constants.overload_name = "Tensor";
  constants.schema_str = "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1.0) -> Tensor";
  auto op = ResolveFromConstants(constants);
  ASSERT_TRUE(op.has_value());
  EXPECT_EQ(op->name, "aten::add");
  EXPECT_EQ(op->overload, "Tensor");
  EXPECT_EQ(op->schema, "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1.) -> Tensor");
  EXPECT_FALSE(ResolveFromConstants(OpConstants{}).has_value());
}

TEST(DiscoverOpNames, GuessesWhenUnresolved) {
  std::set<std::string> known = {"aten::sum", "aten::sum_dim"};
  OpInfo a = GuessOpInfo("sum_dim_Foo", known);
  EXPECT_EQ(a.name, "aten::sum_dim");
  EXPECT_EQ(a.overload, "Foo");
  EXPECT_EQ(a.schema, "");
  OpInfo b = GuessOpInfo("frobnicate_out", {});
  EXPECT_EQ(b.name, "aten::frobnicate");
  EXPECT_EQ(b.overload, "out");
  OpInfo c = GuessOpInfo("frobnicate", {});
  EXPECT_EQ(c.name, "aten::frobnicate");
  EXPECT_EQ(c.overload, "");
}

// --- ELF -------------------------------------------------------------------

TEST(DiscoverElf, VaddrToFileOffset) {
  std::vector<LoadSegment> segments = {
      {0x0, 0x0, 0x1000, 0x1000, PF_R},
      {0x201000, 0x1000, 0x500, 0x2000, PF_R | PF_X},  // placed 2 MB away from its file bytes
  };
  EXPECT_EQ(VaddrToFileOffset(segments, 0x10), 0x10u);
  EXPECT_EQ(VaddrToFileOffset(segments, 0x201010), 0x1010u);
  EXPECT_EQ(VaddrToFileOffset(segments, 0x2014ff), 0x14ffu);
  EXPECT_FALSE(VaddrToFileOffset(segments, 0x201500).has_value());  // .bss: no file bytes
  EXPECT_FALSE(VaddrToFileOffset(segments, 0x5000).has_value());
}

TEST(DiscoverElf, OffsetsMatchWhereTheLoaderPutLibc) {
  // The offset we compute must be the one the kernel maps: check getpid's
  // run-time address against this process's own mapping of libc.
  StatusOr<MappedImage> libc = FindMappedImage(static_cast<uint32_t>(getpid()), "libc.so");
  ASSERT_TRUE(libc.ok()) << libc.status().message();
  StatusOr<uint64_t> offset = FindFunctionOffset(libc->host_path, "getpid");
  ASSERT_TRUE(offset.ok()) << offset.status().message();
  uint64_t address = reinterpret_cast<uint64_t>(dlsym(RTLD_DEFAULT, "getpid"));
  bool checked = false;
  for (const MapEntry& m : libc->mappings) {
    if (address >= m.start && address < m.end) {
      EXPECT_EQ(*offset, address - m.start + m.offset);
      checked = true;
    }
  }
  EXPECT_TRUE(checked);
  EXPECT_FALSE(FindFunctionOffset(libc->host_path, "no_such_function_here").ok());
  EXPECT_FALSE(FindFunctionOffset("/nonexistent/lib.so", "getpid").ok());
}

// --- /proc ------------------------------------------------------------------

TEST(DiscoverProc, ParsesMapsLines) {
  std::vector<MapEntry> maps = ParseMaps(
      "7f0000000000-7f0000001000 r--p 00000000 fd:01 1234    /opt/my libs/libtorch_cpu.so.2.1\n"
      "7f0000001000-7f0000005000 r-xp 00001000 fd:01 1234    /opt/my libs/libtorch_cpu.so.2.1\n"
      "7f0000006000-7f0000007000 rw-p 00000000 00:00 0 \n"
      "garbage line\n"
      "7ffd00000000-7ffd00001000 r-xp 00000000 00:00 0       [vdso]\n");
  ASSERT_EQ(maps.size(), 4u);
  EXPECT_EQ(maps[1].start, 0x7f0000001000u);
  EXPECT_EQ(maps[1].offset, 0x1000u);
  EXPECT_EQ(maps[1].perms, "r-xp");
  EXPECT_EQ(maps[1].inode, 1234u);
  EXPECT_EQ(maps[1].path, "/opt/my libs/libtorch_cpu.so.2.1");
  EXPECT_EQ(maps[2].path, "");
  MappedImage image;
  ASSERT_TRUE(FindImageInMaps(maps, 42, "libtorch_cpu.so", &image));
  EXPECT_EQ(image.path, "/opt/my libs/libtorch_cpu.so.2.1");
  EXPECT_EQ(image.host_path, "/proc/42/root/opt/my libs/libtorch_cpu.so.2.1");
  EXPECT_EQ(image.mappings.size(), 2u);
  // File bytes to addresses: through the mapping that holds them.
  EXPECT_EQ(MappedAddress(image, 0x10), std::optional<uint64_t>(0x7f0000000010u));
  EXPECT_EQ(MappedAddress(image, 0x1234), std::optional<uint64_t>(0x7f0000001234u));
  EXPECT_EQ(MappedAddress(image, 0x5000), std::nullopt);  // past the last mapping
  EXPECT_FALSE(FindImageInMaps(maps, 42, "libc10", &image));

  std::vector<MapEntry> deleted =
      ParseMaps("7f0000000000-7f0000001000 r-xp 00000000 fd:01 9 /usr/lib/libtorch_cpu.so (deleted)\n");
  ASSERT_TRUE(FindImageInMaps(deleted, 7, "libtorch_cpu.so", &image));
  EXPECT_EQ(image.path, "/usr/lib/libtorch_cpu.so");
  EXPECT_EQ(image.host_path, "/proc/7/map_files/7f0000000000-7f0000001000");
}

uint32_t UnusedPid() {
  // pid_max is one past the largest pid the kernel hands out.
  unsigned long pid_max = 4194304;
  if (FILE* f = std::fopen("/proc/sys/kernel/pid_max", "r")) {
    if (std::fscanf(f, "%lu", &pid_max) != 1) pid_max = 4194304;
    std::fclose(f);
  }
  return static_cast<uint32_t>(pid_max);
}

TEST(DiscoverProc, ThisProcess) {
  uint32_t self = static_cast<uint32_t>(getpid());
  StatusOr<std::vector<MapEntry>> maps = ReadMaps(self);
  ASSERT_TRUE(maps.ok()) << maps.status().message();
  StatusOr<MappedImage> libc = FindMappedImage(self, "libc.so");
  ASSERT_TRUE(libc.ok()) << libc.status().message();
  EXPECT_EQ(libc->host_path, "/proc/" + std::to_string(self) + "/root" + libc->path);
  EXPECT_TRUE(Exists(libc->host_path));
  EXPECT_FALSE(libc->mappings.empty());

  StatusOr<MappedImage> torch = FindMappedImage(self, "libtorch_nothere.so");
  ASSERT_FALSE(torch.ok());
  EXPECT_EQ(torch.status().message(), "process " + std::to_string(self) + " (" + ReadProcessComm(self) +
                                          ") has no libtorch_nothere.so mapped: is it a PyTorch process?");

  EXPECT_FALSE(ReadProcessComm(self).empty());
  EXPECT_NE(ReadProcessCmdline(self).find(ReadProcessComm(self).substr(0, 8)), std::string::npos);
  std::vector<uint32_t> tids = ListThreads(self);
  EXPECT_NE(std::find(tids.begin(), tids.end(), static_cast<uint32_t>(gettid())), tids.end());
  EXPECT_EQ(ReadThreadComm(self, static_cast<uint32_t>(gettid())), ReadProcessComm(self));
  EXPECT_TRUE(IsProcessAlive(self));
}

TEST(DiscoverProc, MissingProcess) {
  uint32_t pid = UnusedPid();
  StatusOr<MappedImage> image = FindMappedImage(pid, "libtorch_cpu.so");
  ASSERT_FALSE(image.ok());
  EXPECT_EQ(image.status().message(), "no process with pid " + std::to_string(pid));
  EXPECT_FALSE(IsProcessAlive(pid));
  EXPECT_EQ(ReadProcessComm(pid), "");
  EXPECT_EQ(ReadProcessCmdline(pid), "");
  EXPECT_TRUE(ListThreads(pid).empty());
}

// A zombie is said to be one (it has exited), not "is it a PyTorch process?".
TEST(DiscoverProc, AZombieIsSaidToBeOne) {
  pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  for (int i = 0; i < 500 && ReadProcessState(static_cast<uint32_t>(child)) != 'Z'; ++i) usleep(2000);
  StatusOr<MappedImage> image = FindMappedImage(static_cast<uint32_t>(child), "libtorch_cpu.so");
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_FALSE(image.ok());
  EXPECT_NE(image.status().message().find("is a zombie: it has exited"), std::string::npos)
      << image.status().message();
}

// A tracer that runs torchprobe is named as another torchprobe; anything
// else may be a debugger.
TEST(DiscoverProc, ATracerRunningTorchprobeIsNamedAsSuch) {
  const char* binary = std::getenv("TORCHPROBE");
  if (!binary || !Exists(binary)) GTEST_SKIP() << "needs $TORCHPROBE (make test sets it)";
  pid_t sleeper = test::Spawn({"sleep", "30"}, "/dev/null");
  // torchprobe waiting for the sleeper to load libtorch: alive until killed.
  pid_t waiting = test::Spawn({binary, "record", "--wait", "--pid", std::to_string(sleeper), "-o", "/dev/null"},
                              "/dev/null");
  // Both exec'd (a spawned child has the test's name until then).
  for (int i = 0; i < 500 && (ReadProcessComm(static_cast<uint32_t>(waiting)) != "torchprobe" ||
                              ReadProcessComm(static_cast<uint32_t>(sleeper)) != "sleep");
       ++i)
    usleep(2000);
  std::string theirs = DescribeTracer(static_cast<uint32_t>(waiting), binary);
  std::string other = DescribeTracer(static_cast<uint32_t>(sleeper), binary);
  for (pid_t pid : {waiting, sleeper}) {
    kill(pid, SIGKILL);
    test::Wait(pid);
  }
  EXPECT_EQ(theirs, "pid " + std::to_string(waiting) + " (torchprobe), another torchprobe");
  EXPECT_EQ(other, "pid " + std::to_string(sleeper) + " (sleep), a debugger?");
}

// --- the real libtorch --------------------------------------------------------

// Every schema torch registers, printed by torch itself; empty without it.
std::set<std::string> TorchSchemas() {
  std::set<std::string> schemas;
  const char* python = std::getenv("PYTHON");
  std::string interpreter = python && *python ? python : "/usr/bin/python3";
  if (!Exists(interpreter)) return schemas;
  std::string command = interpreter +
                        " -c 'import torch\nfor s in torch._C._jit_get_all_schemas(): print(str(s))' "
                        "2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return schemas;
  std::string line;
  char buf[8192];
  while (std::fgets(buf, sizeof(buf), pipe)) {
    line += buf;
    if (!line.empty() && line.back() == '\n') {
      line.pop_back();
      schemas.insert(line);
      line.clear();
    }
  }
  pclose(pipe);
  return schemas;
}

TEST(DiscoverReturnSites, RecognisesNearReturns) {
  EXPECT_TRUE(IsReturnInstruction("\xC3"));
  EXPECT_TRUE(IsReturnInstruction("\xF3\xC3"));          // rep ret
  EXPECT_TRUE(IsReturnInstruction("\xF2\xC3"));          // bnd ret
  EXPECT_TRUE(IsReturnInstruction(std::string("\xC2\x08\x00", 3)));  // ret 8
  EXPECT_FALSE(IsReturnInstruction(""));
  EXPECT_FALSE(IsReturnInstruction("\x90"));
  EXPECT_FALSE(IsReturnInstruction(std::string("\xB8\xC3\x00\x00\x00", 5)));  // mov $0xc3,%eax
}

TEST(DiscoverReturnSites, FollowsInstructionBoundaries) {
  StatusOr<std::unique_ptr<ReturnSiteFinder>> finder = ReturnSiteFinder::Create();
  ASSERT_TRUE(finder.ok()) << finder.status().message();
  // push %rbp; mov $0xc3,%eax; je +1; pop %rbp; ret; pop %rbp; ret
  const std::string code("\x55\xB8\xC3\x00\x00\x00\x74\x02\x5D\xC3\x5D\xC3", 12);
  EXPECT_EQ((*finder)->Find(code, 0x1000), (std::vector<uint64_t>{0x1009, 0x100b}));
}

TEST(DiscoverLibtorch, DebianLibtorchCpu) {
  if (!Exists(kDebianLibtorch)) GTEST_SKIP() << kDebianLibtorch << " not installed (python3-torch)";
  StatusOr<OpProbeSet> set = FindOpProbes(kDebianLibtorch);
  ASSERT_TRUE(set.ok()) << set.status().message();
  EXPECT_EQ(set->image_path, kDebianLibtorch);
  // Every at::_ops::<op>::call but the 6 the profiler never records, the 11
  // c10d::ops collective wrappers, the 13 copies of Dispatcher::callBoxed,
  // autograd's engine and its 604 node classes' apply.
  EXPECT_EQ(set->unobserved, 6u);
  EXPECT_EQ(set->boxed, 13u);
  EXPECT_EQ(set->probes.size(), 2952u - 6u + 11u + 13u + 1u + 604u);
  size_t collectives = 0;
  for (const OpProbe& probe : set->probes) collectives += probe.op.name.rfind("c10d::", 0) == 0;
  EXPECT_EQ(collectives, 11u);
  EXPECT_EQ(set->unresolved, 0u);
  // Nearly every op function returns through a `ret` in its own body.
  EXPECT_LE(set->without_returns, 10u);

  StatusOr<std::unique_ptr<ElfImage>> image = ElfImage::Open(kDebianLibtorch);
  ASSERT_TRUE(image.ok());
  std::set<std::string> schemas_seen;
  const OpProbe* sum = nullptr;
  const OpProbe* mul = nullptr;
  uint64_t last_offset = 0;
  for (const OpProbe& probe : set->probes) {
    EXPECT_GE(probe.file_offset, last_offset);
    if (probe.op.name.rfind("c10d::", 0) == 0) continue;  // the collectives: see CollectiveName
    if (probe.boxed) continue;                             // see BoxedProbesTest
    if (probe.op.category == kAutogradNode) continue;      // see AutogradProbesTest
    EXPECT_FALSE(IsUnobservedOp(probe.op.name)) << probe.op.name;
    EXPECT_TRUE(IsOpCallSymbol(probe.symbol)) << probe.symbol;
    last_offset = probe.file_offset;
    bool in_code = false;
    for (const LoadSegment& seg : (*image)->segments())
      in_code |= (seg.flags & PF_X) && probe.file_offset >= seg.offset && probe.file_offset < seg.offset + seg.file_size;
    EXPECT_TRUE(in_code) << probe.symbol;
    // Every return site holds a return instruction, after the entry unless
    // it is in a function the op tail-calls.
    for (uint64_t ret : probe.return_offsets) {
      if (!probe.tail_returns) {
        EXPECT_GT(ret, probe.file_offset) << probe.symbol;
      }
      unsigned char byte = 0;
      std::ifstream file(kDebianLibtorch, std::ios::binary);
      file.seekg(static_cast<std::streamoff>(ret));
      file.read(reinterpret_cast<char*>(&byte), 1);
      EXPECT_TRUE(byte == 0xC3 || byte == 0xC2 || byte == 0xF3 || byte == 0xF2) << probe.symbol;
    }
    if (!probe.resolved) continue;
    std::string key = probe.op.name + (probe.op.overload.empty() ? "" : "." + probe.op.overload) + "(";
    EXPECT_EQ(probe.op.schema.rfind(key, 0), 0u) << probe.op.schema;
    EXPECT_TRUE(schemas_seen.insert(probe.op.schema).second) << "two ops with " << probe.op.schema;
    if (probe.symbol.starts_with("_ZN2at4_ops15sum_dim_IntList4callE")) sum = &probe;
    if (probe.symbol.starts_with("_ZN2at4_ops10mul_Tensor4callE")) mul = &probe;
  }
  ASSERT_NE(sum, nullptr);
  EXPECT_EQ(sum->op.name, "aten::sum");
  EXPECT_EQ(sum->op.overload, "dim_IntList");
  // 1.13 spells the dim list optional ("int[1]? dim"), as torch prints it.
  EXPECT_EQ(sum->op.schema,
            "aten::sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor");
  ASSERT_NE(mul, nullptr);
  EXPECT_EQ(mul->op.name, "aten::mul");
  EXPECT_EQ(mul->op.overload, "Tensor");
  EXPECT_EQ(mul->op.schema, "aten::mul.Tensor(Tensor self, Tensor other) -> Tensor");

  std::set<std::string> torch_schemas = TorchSchemas();
  if (torch_schemas.empty()) GTEST_SKIP() << "python3 cannot import torch: schema cross-check skipped";
  int mismatches = 0;
  for (const OpProbe& probe : set->probes) {
    if (!probe.resolved || probe.op.schema.empty() || torch_schemas.count(probe.op.schema)) continue;
    if (++mismatches <= 10) ADD_FAILURE() << "torch does not print " << probe.op.schema;
  }
  EXPECT_EQ(mismatches, 0);
}

}  // namespace
namespace {

TEST(CollectiveNameTest, ProfilerNamesForC10dAndGlooSymbols) {
  // PyTorch 1.x: the c10d::ops wrappers; the backend's methods run inside.
  const char* ops_allreduce =
      "_ZN4c10d3ops9allreduceERKN3c1013intrusive_ptrINS_12ProcessGroupENS1_6detail34intrusive_"
      "target_default_null_typeIS3_EEEENS1_8ArrayRefIN2at6TensorEEERKNS_16AllreduceOptionsE";
  const char* gloo_allreduce =
      "_ZN4c10d16ProcessGroupGloo9allreduceERSt6vectorIN2at6TensorESaIS3_EERKNS_16AllreduceOptionsE";
  EXPECT_EQ(CollectiveName(ops_allreduce, true), "c10d::allreduce_");
  EXPECT_EQ(CollectiveName(gloo_allreduce, true), std::nullopt);
  // PyTorch 2.x: no wrappers, the backend's methods stand in.
  EXPECT_EQ(CollectiveName(gloo_allreduce, false), "c10d::allreduce_");
  EXPECT_EQ(CollectiveName("_ZN4c10d16ProcessGroupGloo7barrierERKNS_14BarrierOptionsE", false), "c10d::barrier");
  EXPECT_EQ(CollectiveName("_ZN4c10d16ProcessGroupGloo4recvERSt6vectorIN2at6TensorESaIS3_EEii", false), "c10d::recv_");
  EXPECT_EQ(CollectiveName("_ZN4c10d16ProcessGroupGloo7enqueueEN3c1013intrusive_ptrINS0_9AsyncWorkE", false), std::nullopt);
  // libgloo's entry points, by their profiling titles.
  EXPECT_EQ(CollectiveName("_ZN4gloo9allreduceERKNS_16AllreduceOptionsE", true), "gloo:all_reduce");
  EXPECT_EQ(CollectiveName("_ZN4gloo9allgatherERNS_16AllgatherOptionsE", true), "gloo:all_gather");
  EXPECT_EQ(CollectiveName("_ZN4gloo8alltoallERNS_15AlltoallOptionsE", true), "gloo:all_to_all");
  EXPECT_EQ(CollectiveName("_ZN4gloo7Context4rankEv", true), std::nullopt);
}

}  // namespace
}  // namespace torchprobe

// Finding a process' CPython and its layout; see the header.
#include "userspace/discover/python_runtime.h"

#include <cstring>
#include <memory>
#include <utility>
#include <optional>

#include "userspace/base/proc_maps.h"
#include "userspace/base/remote_memory.h"
#include "userspace/discover/elf_symbols.h"

namespace torchprobe {
namespace {

constexpr uint16_t kU16Max = 0xffff;

// Debian's CPython 3.11 (x86-64, no Py_DEBUG): offsetof() on its headers.
void Layout311(PythonRuntime* r) {
  tp_py_layout& l = r->layout;
  l.threads_head = 16;       // PyInterpreterState.threads.head
  l.tstate_next = 8;
  l.tstate_thread_id = 152;
  l.tstate_cframe = 56;      // PyThreadState.cframe
  l.current_frame = 8;       // _PyCFrame.current_frame
  l.frame_code = 32;         // _PyInterpreterFrame.f_code
  l.frame_previous = 48;
  l.frame_instr = 56;        // prev_instr
  l.frame_owner = 69;
  l.code_adaptive = 184;     // PyCodeObject.co_code_adaptive
  l.owner_cstack = TP_PY_NO_OWNER;
  PythonObjectLayout& o = r->objects;
  o.code_filename = 112;
  o.code_qualname = 128;
  o.code_linetable = 136;
  o.code_firstlineno = 72;
  o.unicode_state = 32;
  o.unicode_length = 16;
  o.ascii_size = 48;
  o.compact_size = 72;
}

constexpr uint64_t kInterpretersHead311 = 40;  // _PyRuntimeState.interpreters.head
constexpr uint64_t kGil311 = 360;              // _PyRuntimeState.ceval.gil
// sizeof(struct _gil_runtime_state) on x86-64 glibc, 3.11 and 3.13 (with
// the GIL): interval, last_holder, locked, switch_number, then cond, mutex,
// switch_cond, switch_mutex (48 + 40 bytes each pair).
constexpr uint64_t kGilSize = 208;
constexpr size_t kCevalGilWord313 = 14;  // _Py_DebugOffsets.interpreter_state.ceval_gil

uint64_t Word(std::string_view bytes, size_t index) {
  uint64_t value = 0;
  if ((index + 1) * 8 <= bytes.size()) std::memcpy(&value, bytes.data() + index * 8, 8);
  return value;
}

bool Fits16(uint64_t value) { return value < kU16Max; }

}  // namespace

// _Py_DebugOffsets of 3.13 as 64-bit words: cookie "xdebugpy", version,
// free_threaded; runtime_state {size, finalizing, interpreters_head};
// interpreter_state {size, id, next, threads_head, gc, imports_modules,
// sysdict, builtins, ceval_gil, gil_runtime_state, gil_..._enabled,
// gil_..._locked, gil_..._holder}; thread_state {size, prev, next, interp,
// current_frame, thread_id, native_thread_id, datastack_chunk, status};
// interpreter_frame {size, previous, executable, instr_ptr, localsplus,
// owner}; code_object {size, filename, name, qualname, linetable,
// firstlineno, argcount, localsplusnames, localspluskinds,
// co_code_adaptive}; pyobject {size, ob_type}; type_object {size, tp_name,
// tp_repr, tp_flags}; tuple {size, ob_item, ob_size}; list {size, ob_item,
// ob_size}; dict {size, ma_keys, ma_values}; float {size, ob_fval}; long
// {size, lv_tag, ob_digit}; bytes {size, ob_size, ob_sval}; unicode {size,
// state, length, asciiobject_size}; ...
Status LayoutFromDebugOffsets(std::string_view bytes, PythonRuntime* r) {
  if (bytes.size() < 71 * 8 || bytes.substr(0, 8) != "xdebugpy")
    return Status::Error("its _PyRuntime does not begin with CPython's debug offsets");
  uint64_t version = Word(bytes, 1);
  int major = static_cast<int>(version >> 24), minor = static_cast<int>((version >> 16) & 0xff);
  if (major != 3 || minor != 13)
    return Status::Error("CPython " + std::to_string(major) + "." + std::to_string(minor) +
                         "'s debug offsets are not 3.13's");
  if (Word(bytes, 2) != 0) return Status::Error("free-threaded CPython 3.13 is not supported");
  tp_py_layout& l = r->layout;
  PythonObjectLayout& o = r->objects;
  // Each field and the word of the debug offsets that holds it.
  const std::pair<uint16_t*, int> walk_fields[] = {
      {&l.threads_head, 9}, {&l.tstate_next, 21},    {&l.current_frame, 23}, {&l.tstate_thread_id, 24},
      {&l.frame_previous, 29}, {&l.frame_code, 30}, {&l.frame_instr, 31},    {&l.frame_owner, 33},
      {&l.code_adaptive, 43}};
  const std::pair<uint32_t*, int> object_fields[] = {
      {&o.code_filename, 35}, {&o.code_qualname, 37},   {&o.code_linetable, 38},
      {&o.code_firstlineno, 39}, {&o.ob_type, 45},   {&o.bytes_size, 65},      {&o.bytes_data, 66},
      {&o.unicode_state, 68}, {&o.unicode_length, 69}, {&o.ascii_size, 70}};
  for (const auto& [field, word] : walk_fields) {
    if (!Fits16(Word(bytes, word))) return Status::Error("CPython 3.13's debug offsets are out of range");
    *field = static_cast<uint16_t>(Word(bytes, word));
  }
  for (const auto& [field, word] : object_fields) {
    if (!Fits16(Word(bytes, word))) return Status::Error("CPython 3.13's debug offsets are out of range");
    *field = static_cast<uint32_t>(Word(bytes, word));
  }
  l.interp_head = Word(bytes, 5);  // an offset into _PyRuntime until placed
  l.tstate_cframe = TP_PY_NO_CFRAME;
  l.owner_cstack = 3;  // FRAME_OWNED_BY_CSTACK in 3.13
  o.compact_size = o.ascii_size + 16;  // utf8_length, utf8
  // Every frame field the walk reads lies in the bytes it reads of a frame.
  for (uint16_t field : {l.frame_previous, l.frame_code, l.frame_instr})
    if (field % 8 || field + 8 > TP_PY_FRAME_READ) return Status::Error("CPython 3.13's frame layout is not the one torchprobe reads");
  if (l.frame_owner >= TP_PY_FRAME_READ) return Status::Error("CPython 3.13's frame layout is not the one torchprobe reads");
  return Status::Ok();
}

StatusOr<PythonRuntime> FindPythonRuntime(uint32_t pid) {
  MappedImage image;
  StatusOr<MappedImage> found = FindMappedImage(pid, "libpython3.");
  if (!found.ok()) found = FindMappedImage(pid, "python3.");
  if (!found.ok()) return Status::Error("pid " + std::to_string(pid) + " runs no CPython (no libpython3.X or python3.X mapped)");
  image = *found;
  StatusOr<std::unique_ptr<ElfImage>> opened = ElfImage::Open(image.host_path);
  if (!opened.ok()) return opened.status();
  const ElfImage& elf = **opened;
  std::optional<uint64_t> runtime_vaddr, version_vaddr, code_type_vaddr, bytes_type_vaddr;
  elf.ForEachSymbol([&](const ElfSymbol& symbol) {
    if (symbol.name == "_PyRuntime") runtime_vaddr = symbol.vaddr;
    else if (symbol.name == "Py_Version") version_vaddr = symbol.vaddr;
    else if (symbol.name == "PyCode_Type") code_type_vaddr = symbol.vaddr;
    else if (symbol.name == "PyBytes_Type") bytes_type_vaddr = symbol.vaddr;
  });
  if (!runtime_vaddr || !version_vaddr || !code_type_vaddr || !bytes_type_vaddr)
    return Status::Error(image.path + " exports no _PyRuntime, Py_Version, PyCode_Type or PyBytes_Type (CPython before 3.11?)");
  std::string_view version_bytes = elf.BytesAt(*version_vaddr, 8);
  if (version_bytes.size() < 4) return Status::Error("cannot read Py_Version in " + image.path);
  uint32_t version = 0;
  std::memcpy(&version, version_bytes.data(), 4);
  PythonRuntime runtime;
  runtime.image = image.path;
  runtime.major = static_cast<int>(version >> 24);
  runtime.minor = static_cast<int>((version >> 16) & 0xff);
  runtime.micro = static_cast<int>((version >> 8) & 0xff);
  std::string name = "CPython " + std::to_string(runtime.major) + "." + std::to_string(runtime.minor);
  uint64_t interp_head = 0;
  std::string_view debug_offsets = elf.BytesAt(*runtime_vaddr, 128 * 8);  // 3.13's
  if (runtime.major == 3 && runtime.minor == 11) {
    Layout311(&runtime);
    interp_head = kInterpretersHead311;
  } else if (runtime.major == 3 && runtime.minor == 13) {
    Status status = LayoutFromDebugOffsets(debug_offsets, &runtime);
    if (!status.ok()) return Status::Error(image.path + ": " + status.message());
    interp_head = runtime.layout.interp_head;
  } else {
    return Status::Error(name + " (" + image.path + ") is not supported: Python stacks read 3.11 and 3.13");
  }
  std::optional<uint64_t> runtime_offset = elf.FileOffset(*runtime_vaddr);
  std::optional<uint64_t> code_type_offset = elf.FileOffset(*code_type_vaddr);
  std::optional<uint64_t> bytes_type_offset = elf.FileOffset(*bytes_type_vaddr);
  std::optional<uint64_t> runtime_address, code_type_address, bytes_type_address;
  if (runtime_offset) runtime_address = MappedAddress(image, *runtime_offset);
  if (code_type_offset) code_type_address = MappedAddress(image, *code_type_offset);
  if (bytes_type_offset) bytes_type_address = MappedAddress(image, *bytes_type_offset);
  if (!runtime_address || !code_type_address || !bytes_type_address)
    return Status::Error("cannot place _PyRuntime, PyCode_Type or PyBytes_Type of " + image.path + " in pid " +
                         std::to_string(pid));
  runtime.layout.interp_head = *runtime_address + interp_head;
  runtime.code_type = *code_type_address;
  runtime.bytes_type = *bytes_type_address;
  if (runtime.minor == 11) {
    runtime.gil_begin = *runtime_address + kGil311;
  } else {
    uint64_t interp = 0, gil = 0;
    uint64_t gil_field = Word(debug_offsets, kCevalGilWord313);
    if (!ReadRemote(static_cast<pid_t>(pid), runtime.layout.interp_head, &interp, 8) || !interp)
      runtime.gil_missing = "its interpreter is not up yet";
    else if (!Fits16(gil_field) || !ReadRemote(static_cast<pid_t>(pid), interp + gil_field, &gil, 8) || !gil)
      runtime.gil_missing = "its interpreter's GIL pointer cannot be read";
    else
      runtime.gil_begin = gil;
  }
  if (runtime.gil_begin) runtime.gil_end = runtime.gil_begin + kGilSize;
  return runtime;
}

}  // namespace torchprobe

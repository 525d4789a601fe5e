// The agent's output folder: window files, their index, rotation.
//
//   DIR/index.jsonl      one JSON object per window file present, oldest first
//   DIR/<host>-pid<P>[-rank<R>]-<UTC time>-w<N>.pftrace   the windows (window_name.h)
//   DIR/<same name>.et.json, .kineto.json   a window's other files, when asked for
//   DIR/.partial/        windows being written; emptied at every start
//
// A window is committed index first, file second: the index is rewritten
// (atomically, AtomicFile) with the new entry, then the finished file is
// renamed from .partial/ into DIR. A crash between the two leaves an entry
// without its file, which Open() drops; it never leaves a file the index
// does not list. A window's other files (companions) move in after its
// .pftrace, and go before it: an entry whose companion is missing keeps its
// other files (Open() drops the companion from it). Rotation removes the
// oldest windows (every file of each, and their entries) until the folder
// holds at most --max-files windows and --max-bytes bytes.
//
// Root deletes files here, in a folder others may share (-o /tmp/x), so
// nothing is done by path: DIR and .partial are opened once and every file
// is reached through them (openat, renameat, unlinkat). .partial must be a
// folder of ours (not a symlink; made 0700), else the agent does not start.
// index.jsonl is read only when it is a regular file of ours, and even then
// a line is trusted only for a name this store makes (window_name.h) whose
// file in DIR is a regular file of ours (not a symlink, not another user's
// file): anything else is dropped from the index and never deleted.
#ifndef TORCHPROBE_AGENT_WINDOW_STORE_H
#define TORCHPROBE_AGENT_WINDOW_STORE_H

#include <cstdint>
#include <string>
#include <vector>

#include "userspace/agent/leak_growth.h"
#include "userspace/agent/target_scan.h"

namespace torchprobe {

struct WindowEntry {
  std::string file;  // name in DIR
  std::vector<std::string> companions;  // its other files' names in DIR (window_name.h)
  uint64_t bytes = 0;  // of all its files
  std::string host;
  TargetInfo target;
  uint64_t start_unix_ns = 0;  // when the window was started (CLOCK_REALTIME)
  double duration_s = 0;
  bool triggered = false;      // by `torchprobe trigger`, not the schedule
  std::string dump;            // a flight recorder dump's reason (request, stall, signal); "" a window
  uint64_t events = 0;         // op events in it
  uint64_t dropped = 0;        // events lost in BPF
  uint64_t attach_ns = 0;
  uint64_t detach_ns = 0;
  uint64_t cost_ns = 0;        // what it cost the target (see duty_budget.h)
  uint64_t steps = 0;          // ProfilerStep slices in it
  uint64_t step_p50_ns = 0;    // their median wall time (of an even count, the middle two's mean)
  uint64_t step_max_ns = 0;    // their longest
  std::vector<GrowingLeak> growing;  // --memory: ops growing up to this window (leak_growth.h)
};

class WindowStore {
 public:
  WindowStore() = default;
  ~WindowStore();
  WindowStore(const WindowStore&) = delete;
  WindowStore& operator=(const WindowStore&) = delete;

  // Creates DIR and DIR/.partial, empties .partial (temporary files of a run
  // that died) and reads the index back, dropping entries whose file is gone
  // or not ours. False with a one-line *error. *note: what was not trusted
  // (an index not ours, lines dropped), "" when all was.
  bool Open(const std::string& dir, uint64_t max_bytes, uint64_t max_files, std::string* error,
            std::string* note = nullptr);

  // The name of a window of `target` started now: its file's name in
  // .partial/ while it is written, and in DIR once committed.
  std::string NewName(const std::string& host, const TargetInfo& target, uint64_t unix_ns);
  // .partial, as opened: where a window's record writes.
  int partial_fd() const { return partial_fd_; }
  // A path that reaches `name` in .partial as it was opened, whatever has
  // become of DIR's path since (for readers that take a path).
  std::string PartialPath(const std::string& name) const;
  void RemovePartial(const std::string& name);
  // Moves entry->file and its companions from .partial into DIR, indexes
  // them and rotates; entry->bytes is filled in. A companion record did not
  // write is left out of the entry (counted in *missing when given).
  // Returns false with *error (the partial files are removed).
  bool Commit(WindowEntry* entry, std::string* error, size_t* missing = nullptr);

  const std::vector<WindowEntry>& entries() const { return entries_; }
  uint64_t bytes() const;
  uint64_t files_removed() const { return files_removed_; }
  const std::string& dir() const { return dir_; }

  static std::string EntryJson(const WindowEntry& entry);

 private:
  bool WriteIndex(const std::vector<WindowEntry>& entries, std::string* error);
  void Rotate(std::vector<WindowEntry>* entries, std::vector<WindowEntry>* removed) const;
  // The size of `name` in DIR when it is a regular file of ours; -1 if not.
  int64_t OursInDir(const std::string& name) const;
  // Removes a window's files from DIR (each only while it is still ours).
  void RemoveFromDir(const WindowEntry& entry);

  std::string dir_;
  int dir_fd_ = -1;
  int partial_fd_ = -1;
  uint64_t max_bytes_ = 0;  // 0: no bound
  uint64_t max_files_ = 0;
  std::vector<WindowEntry> entries_;
  uint64_t sequence_ = 0;  // -wN: windows named by this agent
  uint64_t files_removed_ = 0;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_AGENT_WINDOW_STORE_H

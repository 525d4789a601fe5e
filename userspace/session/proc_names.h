// Process and thread names read from /proc while the target lives.
#ifndef TORCHPROBE_SESSION_PROC_NAMES_H
#define TORCHPROBE_SESSION_PROC_NAMES_H

#include "userspace/model/op_stack_model.h"

namespace torchprobe {

class ProcNames : public NameSource {
 public:
  ProcessInfo Process(uint32_t pid) override;
  std::string Thread(uint32_t pid, uint32_t tid) override;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_SESSION_PROC_NAMES_H

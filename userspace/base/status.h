// Recoverable errors as values: a Status names the operation and why it
// failed in one line, ready for stderr. No exceptions cross stage borders.
#ifndef TORCHPROBE_BASE_STATUS_H
#define TORCHPROBE_BASE_STATUS_H

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

namespace torchprobe {

class Status {
 public:
  static Status Ok() { return Status(); }
  static Status Error(std::string message) { return Status(std::move(message)); }
  bool ok() const { return !message_.has_value(); }
  const std::string& message() const {
    static const std::string kEmpty;
    return message_ ? *message_ : kEmpty;
  }

 private:
  Status() = default;
  explicit Status(std::string message) : message_(std::move(message)) {}
  std::optional<std::string> message_;
};

template <class T>
class StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)), status_(Status::Ok()) {}  // NOLINT
  StatusOr(Status status) : status_(std::move(status)) {}                 // NOLINT
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  // Using the value of a failed result is a bug: say so and stop, rather
  // than run on with garbage (a segfault at best).
  T& value() { return Checked(); }
  const T& value() const { return Checked(); }
  T& operator*() { return Checked(); }
  const T& operator*() const { return Checked(); }
  T* operator->() { return &Checked(); }
  const T* operator->() const { return &Checked(); }

 private:
  T& Checked() const {
    if (!value_) {
      std::fprintf(stderr, "torchprobe: internal error: the value of a failed result was used (%s)\n",
                   status_.message().c_str());
      std::abort();
    }
    return const_cast<T&>(*value_);
  }
  std::optional<T> value_;
  Status status_;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_BASE_STATUS_H

// Valid UTF-8, for text that comes from a target's memory (names, file
// paths) and goes into formats whose readers refuse anything else (JSON,
// Python's pickle).
#ifndef TORCHPROBE_BASE_UTF8_H
#define TORCHPROBE_BASE_UTF8_H

#include <cstddef>
#include <string_view>

namespace torchprobe {

// The length of the valid UTF-8 sequence that starts at text[i] (1 to 4);
// 0 when none does: a stray continuation byte, a cut sequence, an overlong
// form, a surrogate or a code point past U+10FFFF.
size_t Utf8Length(std::string_view text, size_t i);

}  // namespace torchprobe

#endif  // TORCHPROBE_BASE_UTF8_H

// Operator name resolution; see the header for the order of sources.
#include "userspace/discover/op_names.h"

#include <map>

#include "userspace/discover/schema_format.h"

namespace torchprobe {
namespace {

constexpr std::string_view kAten = "aten";

OpInfo MakeOpInfo(std::string_view ns, std::string_view key, std::string schema) {
  OpInfo op;
  size_t dot = key.find('.');
  op.name = std::string(ns) + "::" + std::string(key.substr(0, dot));
  op.overload = dot == std::string_view::npos ? "" : std::string(key.substr(dot + 1));
  op.schema = std::move(schema);
  return op;
}

// A tail seen inside another namespace's schema ("quantized::", "prim::")
// describes that namespace's op, not ours.
bool ForeignNamespace(std::string_view prefix) {
  return prefix.find("::") != std::string_view::npos && !prefix.starts_with("aten::");
}

}  // namespace

std::optional<OpInfo> ResolveFromConstants(const OpConstants& constants) {
  if (!constants.schema_str) return std::nullopt;
  std::string_view ns = kAten;
  if (constants.name) {
    size_t colons = constants.name->find("::");
    if (colons != std::string::npos) ns = std::string_view(*constants.name).substr(0, colons);
  }
  std::optional<SchemaText> text = SplitSchema(*constants.schema_str);
  std::optional<std::string> schema = FormatSchema(ns, *constants.schema_str);
  if (!text || !schema) return std::nullopt;
  OpInfo op = MakeOpInfo(ns, text->key, std::move(*schema));
  if (constants.name) op.name = *constants.name;
  if (constants.overload_name) op.overload = *constants.overload_name;
  return op;
}

std::optional<OpInfo> ResolveFromSchemaStrings(std::string_view struct_name,
                                               const std::optional<std::vector<ArgKind>>& call_kinds,
                                               const SchemaStringIndex& index) {
  struct Votes {
    int count = 0;
    bool at_string_start = false;
  };
  std::map<std::string_view, Votes> by_text;  // ordered: ties resolve the same way every run
  for (const NameSplit& split : CandidateSplits(struct_name)) {
    std::string key = split.overload.empty() ? split.name : split.name + "." + split.overload;
    const std::vector<SchemaSighting>* sightings = index.Find(key);
    if (sightings == nullptr) continue;
    for (const SchemaSighting& sighting : *sightings) {
      if (ForeignNamespace(sighting.prefix)) continue;
      std::optional<SchemaText> schema = SplitSchema(sighting.text);
      if (!schema) continue;
      if (call_kinds && SchemaArgKinds(*schema) != *call_kinds) continue;
      Votes& votes = by_text[sighting.text];
      ++votes.count;
      votes.at_string_start |= sighting.prefix.empty();
    }
  }
  // A string of its own beats any tail; among equals, more sightings win.
  std::string_view best;
  Votes best_votes;
  for (const auto& [text, votes] : by_text) {
    if (best.empty() || (votes.at_string_start && !best_votes.at_string_start) ||
        (votes.at_string_start == best_votes.at_string_start && votes.count > best_votes.count)) {
      best = text;
      best_votes = votes;
    }
  }
  if (best.empty()) return std::nullopt;
  std::optional<SchemaText> schema = SplitSchema(best);
  std::optional<std::string> printed = FormatSchema(kAten, best);
  if (!schema || !printed) return std::nullopt;
  return MakeOpInfo(kAten, schema->key, std::move(*printed));
}

OpInfo GuessOpInfo(std::string_view struct_name, const std::set<std::string>& known_names) {
  OpInfo op;
  for (const NameSplit& split : CandidateSplits(struct_name)) {
    std::string name = "aten::" + split.name;
    if (known_names.count(name) && name.size() > op.name.size()) {
      op.name = name;
      op.overload = split.overload;
    }
  }
  if (!op.name.empty()) return op;
  if (struct_name.ends_with("_out") && struct_name.size() > 4) {
    op.name = "aten::" + std::string(struct_name.substr(0, struct_name.size() - 4));
    op.overload = "out";
  } else {
    op.name = "aten::" + std::string(struct_name);
  }
  return op;
}

}  // namespace torchprobe

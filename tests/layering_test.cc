// The folders of userspace/ import one way only: tools/include-graph holds the
// layering (base, then discover/attach/collect/cupti, model, export, report,
// and the commands on top) and names every include against it.
#include <gtest/gtest.h>

#include <string>

#include "tests/test_support.h"

namespace torchprobe {
namespace {

TEST(LayeringTest, NoFolderImportsUpward) {
  test::CommandResult graph = test::RunCommand({test::Python(), test::RepoPath("tools/include-graph")});
  EXPECT_EQ(graph.exit_code, 0) << graph.out << graph.err;
  EXPECT_NE(graph.out.find("model -> base"), std::string::npos) << "no graph read:\n" << graph.out << graph.err;
}

}  // namespace
}  // namespace torchprobe

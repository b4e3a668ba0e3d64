// Fixture of the one_ir_refuses test (tests/CMakeLists.txt): a second action
// type beside StepAction, as the schedule had before issue 27.
namespace fixture {
enum class Op { F, B, AllReduce };
struct Action {
  Op op;
  int microbatch;
};
}  // namespace fixture

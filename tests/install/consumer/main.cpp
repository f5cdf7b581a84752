// Uses the installed headers and library: a model preset, a described device, the built-in
// policy, and a selection over the installed library's registry. Exits non-zero on a mismatch.
#include <latte/latte.hpp>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  latte::Deployment deployment;
  deployment.tp = 8;
  const latte::ModelSpec model = latte::load_model("glm-5", deployment);
  const latte::AttentionSpec spec = latte::attention_spec(model, latte::Op::sparse_mla);
  if (spec.num_heads != 8 || spec.scale != 0.0625f || spec.topk != 2048) {
    std::fprintf(stderr, "unexpected spec: %s\n", spec.summary().c_str());
    return 1;
  }
  if (latte::describe_device("sm_120").max_smem_per_block != 101376) return 2;
  if (latte::Policy::builtin().rules().empty()) return 3;

  latte::Context& context = latte::Context::global();
  if (argc > 1) context.load_plugin(argv[1]);  // the installed example plugin
  latte::SelectOptions options;
  options.use_environment = false;
  const latte::Selection selection = context.explain(spec, latte::describe_device("cpu"), options);
  std::printf("%s", selection.explain().c_str());
  if (argc > 1 && selection.chosen != "example.cpu_sparse_mla") {
    std::fprintf(stderr, "expected the installed example plugin to be chosen, got '%s'\n", selection.chosen.c_str());
    return 4;
  }
  std::printf("latte %s consumer: ok\n", latte::kVersion);
  return EXIT_SUCCESS;
}

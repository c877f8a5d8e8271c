// flashladder — tests/fuzz_manifest.cpp: libFuzzer on the golden manifest's reader (built by
// tests/fuzz.cmake). Any text must either be accepted as a manifest that describes a valid problem,
// or be refused with fl::Error: no crash, no read outside a buffer (AddressSanitizer), no undefined
// behaviour (UBSan: a 1e300 cast to int64 is one), no other exception escaping.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "reference/golden.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  fl::golden::Manifest m;
  try {
    m = fl::golden::parse_manifest_text(text, "fuzz");
  } catch (const fl::Error&) {
    return 0;  // refused, with a message
  }
  // Accepted: the problem is valid, every output's tol is the rule's, and the layout is complete.
  if (!m.p.invalid_reason().empty()) std::abort();
  if (m.tensors.size() != (m.p.alibi == fl::Alibi::none ? 9u : 10u)) std::abort();  // + alibi_slopes
  for (const fl::golden::TensorInfo& t : m.tensors)
    if (!t.input && !(t.tol.tol == 2 * t.tol.baseline_err + t.tol.floor)) std::abort();
  return 0;
}

// flashladder — tests/fuzz_npy.cpp: libFuzzer on the .npy reader (built by tests/fuzz.cmake).
// Any input must either parse or be refused with fl::Error: no crash, no read outside the buffer
// (AddressSanitizer), no undefined behaviour (UBSan), no other exception. What parses must survive
// a round trip: serialize, parse again, same type, shape and bytes.
#include <cstdint>
#include <cstdlib>

#include "common/npy.hpp"
#include "common/problem.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fl::npy::Array a;
  try {
    a = fl::npy::parse(data, size, "fuzz");
  } catch (const fl::Error&) {
    return 0;  // refused, with a message: the expected outcome for most inputs
  }
  const std::vector<uint8_t> bytes = fl::npy::serialize(a, a.version);
  const fl::npy::Array b = fl::npy::parse(bytes.data(), bytes.size(), "round trip");
  if (b.kind != a.kind || b.shape != a.shape || b.data != a.data || b.version != a.version) std::abort();
  if (int64_t(a.data.size()) != a.count() * fl::npy::item_bytes(a.kind)) std::abort();
  return 0;
}

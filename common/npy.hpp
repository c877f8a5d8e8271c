// flashladder — common/npy.hpp: the .npy files through which other implementations meet the oracle.
//
// Only what the golden files need: little-endian f2, f4, f8 and u2 (bf16 bit patterns: numpy has no
// bf16, so the manifest says which u2 files hold bf16), C order, header versions 1.0, 2.0 and 3.0.
// Everything else is refused with an fl::Error that names the file and the problem. The reader takes
// a byte buffer and never reads outside it, so the fuzz target (tests/fuzz_npy.cpp) drives the very
// code the program runs. This file depends on nothing but the standard library and fl::Error.
//
// Why no library: Debian 12 packages no C++ .npy library (`apt-cache search npy`: no libcnpy; the
// one candidate, xtensor's xnpy.hpp, pulls in xtensor and parses the header with asserts and
// string searches, not a refusal per malformed case). The format is one short header and raw bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fl::npy {

/// The element types read and written. u2 carries bf16 bit patterns when the manifest says so.
enum class Kind { f2, f4, f8, u2 };

const char* descr(Kind k);   // "<f2", "<f4", "<f8", "<u2"
int item_bytes(Kind k);      // 2, 4, 8, 2

struct Array {
  Kind kind = Kind::f8;
  std::vector<int64_t> shape;  // C order; () is a scalar of one element
  std::vector<uint8_t> data;   // count() * item_bytes(kind) bytes, little-endian
  int version = 1;             // header major version it was read with (1, 2 or 3)
  int64_t count() const;       // product of shape
};

/// Parses a whole .npy file held in [bytes, bytes + size). `name` (the path) prefixes every error.
Array parse(const uint8_t* bytes, size_t size, const std::string& name);

/// Reads and parses a file; refuses a missing, unreadable or non-regular file. The preamble and
/// header are read and judged first (the data's length against the file's size), the data last.
Array read(const std::string& path);

/// read(), then refuses an element type or shape other than the caller's, naming both.
Array read_expect(const std::string& path, Kind kind, const std::vector<int64_t>& shape);

/// The bytes of a .npy file. version 0 picks 1 when the header fits its 16-bit length, else 2;
/// the header is padded with spaces so the data starts on a 64-byte boundary, as numpy writes it.
std::vector<uint8_t> serialize(const Array& a, int version = 0);

/// Writes serialize(a, version) to path; an error names the path when it cannot be written.
void write(const std::string& path, const Array& a, int version = 0);

/// "(2, 3, 4)", as numpy prints a shape.
std::string shape_text(const std::vector<int64_t>& shape);

}  // namespace fl::npy

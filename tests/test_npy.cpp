// flashladder — tests/test_npy.cpp: the .npy reader and writer. Round trips for every element type
// and header version; every malformed-file class refused with a message that names it, built here
// byte by byte, so that what is refused is visible in the test.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "common/npy.hpp"
#include "common/problem.hpp"

namespace fl {
namespace {

namespace fs = std::filesystem;
using npy::Kind;

npy::Array sample(Kind k, std::vector<int64_t> shape) {
  npy::Array a;
  a.kind = k;
  a.shape = std::move(shape);
  a.data.resize(size_t(a.count() * npy::item_bytes(k)));
  for (size_t i = 0; i < a.data.size(); ++i) a.data[i] = uint8_t(i * 37 + 11);  // any bit pattern will do
  return a;
}

// A .npy file from its parts, for the malformed cases: preamble, header text, data bytes.
std::vector<uint8_t> raw(const std::string& header, size_t data_bytes, int major = 1, int minor = 0,
                         int64_t len_field = -1) {
  std::string f = "\x93NUMPY";
  f += char(major);
  f += char(minor);
  const size_t len = len_field < 0 ? header.size() : size_t(len_field);
  const int len_bytes = major == 1 ? 2 : 4;
  for (int i = 0; i < len_bytes; ++i) f += char(uint8_t(len >> (8 * i)));
  f += header;
  f.append(data_bytes, '\0');
  return std::vector<uint8_t>(f.begin(), f.end());
}
std::string dict(const std::string& descr, const std::string& order, const std::string& shape) {
  return "{'descr': '" + descr + "', 'fortran_order': " + order + ", 'shape': " + shape + ", }\n";
}

// parse() must refuse bytes with a message containing `what` (and the file's name).
void refused(const std::vector<uint8_t>& bytes, const std::string& what) {
  try {
    npy::parse(bytes.data(), bytes.size(), "bad.npy");
    ADD_FAILURE() << "accepted a file that should be refused for: " << what;
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(what), std::string::npos) << "message: " << m << "\nwanted: " << what;
    EXPECT_EQ(m.rfind("bad.npy: ", 0), 0u) << "message does not name the file: " << m;
  }
}

TEST(Npy, RoundTripEveryKindAndVersion) {
  for (Kind k : {Kind::f2, Kind::f4, Kind::f8, Kind::u2})
    for (int version : {1, 2, 3})
      for (const std::vector<int64_t>& shape :
           std::vector<std::vector<int64_t>>{{}, {0}, {5}, {2, 3}, {3, 1, 4, 7}, {1, 0, 2}}) {
        const npy::Array a = sample(k, shape);
        const std::vector<uint8_t> bytes = npy::serialize(a, version);
        EXPECT_EQ(bytes[6], version);
        EXPECT_EQ((bytes.size() - a.data.size()) % 64, 0u) << "data not 64-byte aligned";
        const npy::Array b = npy::parse(bytes.data(), bytes.size(), "rt.npy");
        EXPECT_EQ(b.kind, k);
        EXPECT_EQ(b.shape, shape) << npy::shape_text(shape);
        EXPECT_EQ(b.data, a.data);
        EXPECT_EQ(b.version, version);
      }
}

TEST(Npy, FileRoundTripAndReadExpect) {
  const fs::path dir = fs::temp_directory_path() / ("fl_npy_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "x.npy").string();
  const npy::Array a = sample(Kind::f8, {2, 3, 4});
  npy::write(path, a);
  const npy::Array b = npy::read_expect(path, Kind::f8, {2, 3, 4});
  EXPECT_EQ(b.data, a.data);
  EXPECT_THROW(npy::read_expect(path, Kind::f4, {2, 3, 4}), Error);
  try {
    npy::read_expect(path, Kind::f8, {3, 2, 4});
    ADD_FAILURE() << "wrong shape accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shape (2, 3, 4) where (3, 2, 4) is expected"), std::string::npos) << e.what();
  }
  try {
    npy::read_expect(path, Kind::f2, {2, 3, 4});
    ADD_FAILURE() << "wrong dtype accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dtype <f8 where <f2 is expected"), std::string::npos) << e.what();
  }
  try {
    npy::read((dir / "absent.npy").string());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("absent.npy: no such file"), std::string::npos) << e.what();
  }
  try {
    npy::read(dir.string());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
  // Truncating the file on disk is caught by the same rule as a truncated buffer.
  fs::resize_file(path, fs::file_size(path) - 8);
  EXPECT_THROW(npy::read(path), Error);
  fs::remove_all(dir);
}

// numpy's own bytes for np.save(f, np.arange(3, dtype='<f4')): the format as numpy writes it.
TEST(Npy, ReadsNumpysBytes) {
  std::string h = "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }";
  h.append((64 - (10 + h.size() + 1) % 64) % 64, ' ');  // numpy pads to a multiple of 64
  h += '\n';
  std::vector<uint8_t> f = raw(h, 0);
  for (float x : {0.f, 1.f, 2.f}) {
    uint8_t b[4];
    std::memcpy(b, &x, 4);
    f.insert(f.end(), b, b + 4);
  }
  const npy::Array a = npy::parse(f.data(), f.size(), "numpy.npy");
  ASSERT_EQ(a.shape, std::vector<int64_t>{3});
  float x[3];
  std::memcpy(x, a.data.data(), 12);
  EXPECT_EQ(x[2], 2.f);
  // Double quotes and no trailing comma are the same literal to Python.
  const std::vector<uint8_t> g = raw("{\"descr\": \"<f8\", \"fortran_order\": False, \"shape\": (2,)}\n", 16);
  EXPECT_EQ(npy::parse(g.data(), g.size(), "g.npy").count(), 2);
}

TEST(Npy, RefusesMissingMagic) {
  refused({}, "not a .npy file");
  refused({0x93, 'N', 'U', 'M'}, "not a .npy file");
  std::vector<uint8_t> f = raw(dict("<f8", "False", "(1,)"), 8);
  f[1] = 'X';
  refused(f, "does not start with the magic");
}

TEST(Npy, RefusesUnknownVersion) {
  refused(raw(dict("<f8", "False", "(1,)"), 8, 4, 0), "unsupported .npy version 4.0");
  refused(raw(dict("<f8", "False", "(1,)"), 8, 1, 1), "unsupported .npy version 1.1");
  refused(raw(dict("<f8", "False", "(1,)"), 8, 0, 0), "unsupported .npy version 0.0");
}

TEST(Npy, RefusesTruncatedPreamble) {
  std::vector<uint8_t> f = raw(dict("<f8", "False", "(1,)"), 8);
  f.resize(9);
  refused(f, "truncated preamble");
  std::vector<uint8_t> g = raw(dict("<f8", "False", "(1,)"), 8, 2);
  g.resize(11);
  refused(g, "truncated preamble");
}

TEST(Npy, RefusesALyingHeaderLength) {
  const std::string h = dict("<f8", "False", "(1,)");
  refused(raw(h, 0, 1, 0, int64_t(h.size()) + 100), "the header length field says");
  refused(raw(h, 8, 2, 0, int64_t(1) << 31), "the header length field says");
  // Shorter than the dict: the '\n' that ends the header is not where the field says.
  refused(raw(h, 8, 1, 0, int64_t(h.size()) - 5), "not terminated by '\\n'");
  // Longer than numpy reads by default (max_header_size): refused by its length field, unread.
  std::string padded = h;
  padded.insert(padded.size() - 1, 20000, ' ');
  refused(raw(padded, 8, 2), "the header length field says 20058 bytes, more than the 10000 read");
}

TEST(Npy, RefusesBadHeaderText) {
  refused(raw("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", 8), "not terminated");
  refused(raw("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), \n", 8), "expected a quoted string");
  refused(raw("{'descr': '<f8', 'fortran_order': False, 'shape': (1,)\n", 8), "expected '}' or ','");
  refused(raw("{'descr': '<f\xc3\xa9', 'fortran_order': False, 'shape': (1,), }\n", 8), "0xc3");
  const char nul[] = "{'descr': '<f8',\0 'fortran_order': False, 'shape': (1,), }\n";
  refused(raw(std::string(nul, sizeof nul - 1), 8), "is 0x0");
  refused(raw("{'descr' '<f8', 'fortran_order': False, 'shape': (1,), }\n", 8), "expected ':' after a key");
  refused(raw("{'descr': '<f8, 'fortran_order': False, 'shape': (1,), }\n", 8), "expected '}' or ','");
  refused(raw("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), } x\n", 8), "text after the closing '}'");
  refused(raw("{'descr': '<f8', 'fortran_order': false, 'shape': (1,), }\n", 8), "expected True or False");
  refused(raw("{'descr': '<\\f8', 'fortran_order': False, 'shape': (1,), }\n", 8), "escape sequences");
  refused(raw("['descr', '<f8']\n", 8), "expected '{'");
}

TEST(Npy, RefusesWrongKeys) {
  refused(raw("{'descr': '<f8', 'shape': (1,), }\n", 8), "lacks the key 'fortran_order'");
  refused(raw("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), 'x': 1, }\n", 8), "unknown key 'x'");
  refused(raw("{'descr': '<f8', 'descr': '<f8', 'fortran_order': False, 'shape': (1,), }\n", 8), "duplicate key 'descr'");
  refused(raw("{}\n", 8), "lacks the key 'descr'");
}

TEST(Npy, RefusesFortranOrder) { refused(raw(dict("<f8", "True", "(2, 2)"), 32), "Fortran-order arrays are not read"); }

TEST(Npy, RefusesBigEndianAndUnknownDtypes) {
  refused(raw(dict(">f8", "False", "(1,)"), 8), "big-endian dtype '>f8' is not read");
  refused(raw(dict(">u2", "False", "(1,)"), 2), "big-endian dtype '>u2'");
  refused(raw(dict("<i4", "False", "(1,)"), 4), "dtype '<i4' is not read");
  refused(raw(dict("|b1", "False", "(1,)"), 1), "dtype '|b1' is not read");
  refused(raw(dict("<f16", "False", "(1,)"), 16), "dtype '<f16' is not read");
  refused(raw("{'descr': [('a', '<f8')], 'fortran_order': False, 'shape': (1,), }\n", 8), "structured dtypes");
}

TEST(Npy, RefusesBadShapes) {
  refused(raw(dict("<f8", "False", "(3)"), 24), "a one-element shape is written (n,)");
  refused(raw(dict("<f8", "False", "(-1,)"), 8), "negative dimension");
  refused(raw(dict("<f8", "False", "(3L,)"), 24), "expected ',' or ')'");
  refused(raw(dict("<f8", "False", "(,)"), 8), "expected a dimension");
  refused(raw(dict("<f8", "False", "(99999999999999999999999,)"), 8), "dimension larger than 2^40");
  // Each dimension fine, the product past 2^40 bytes (and past 2^64 without the check).
  refused(raw(dict("<f8", "False", "(1099511627776, 1099511627776, 1099511627776)"), 8), "exceeds the 2^40-byte limit");
  refused(raw(dict("<f8", "False", "(65536, 65536, 65536)"), 8), "exceeds the 2^40-byte limit");
  std::string many = "(";
  for (int i = 0; i < 33; ++i) many += "1, ";
  refused(raw(dict("<f8", "False", many + ")"), 8), "more than 32 dimensions");
}

TEST(Npy, RefusesTruncatedOrTrailingData) {
  refused(raw(dict("<f8", "False", "(2, 3)"), 47), "truncated data: shape (2, 3) of <f8 needs 48 bytes but 47 follow");
  refused(raw(dict("<f2", "False", "(4,)"), 0), "truncated data");
  refused(raw(dict("<f4", "False", "(2,)"), 12), "4 bytes follow the data");
  // Both sizes named: the file's, and the one its header describes.
  refused(raw(dict("<f4", "False", "(2,)"), 12), "the file is 80 bytes; its header describes 76");
  refused(raw(dict("<f8", "False", "(2, 3)"), 47), "the file is 117 bytes; its header describes 118");
}

// read() loaded the whole file before it looked at the first byte: an 8 GiB o.npy of zeros was
// refused as "not a .npy file" after 6 s and 8.5 GB of memory. The header is read and judged against
// the file's size first. Files of 2^40 bytes (the limit; sparse, nothing is on disk) cannot be held
// in memory, so each is refused for what its first bytes say or not at all.
TEST(Npy, ReadJudgesTheHeaderBeforeTheData) {
  const fs::path dir = fs::temp_directory_path() / ("fl_npy_big_" + std::to_string(getpid()));
  fs::create_directories(dir);
  auto refused_file = [&](const std::vector<uint8_t>& head, const std::string& what) {
    const fs::path path = dir / "big.npy";
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(head.data()), std::streamsize(head.size()));
    std::error_code ec;
    fs::resize_file(path, uintmax_t(1) << 40, ec);
    if (ec) GTEST_SKIP() << "this file system holds no sparse file of 2^40 bytes: " << ec.message();
    try {
      npy::read(path.string());
      ADD_FAILURE() << "read a 2^40-byte file; wanted: " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  // A header that ends within the first 12 bytes read (a 1-byte header, 1 byte of data).
  const std::vector<uint8_t> tiny = raw("\n", 1);
  std::ofstream(dir / "tiny.npy", std::ios::binary).write(reinterpret_cast<const char*>(tiny.data()), std::streamsize(tiny.size()));
  try {
    npy::read((dir / "tiny.npy").string());
    ADD_FAILURE() << "read a 1-byte header";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("malformed header dict at offset 0: expected '{'"), std::string::npos) << e.what();
  }
  refused_file({0, 0, 0, 0}, "not a .npy file: it does not start with the magic");
  refused_file(raw(dict("<f8", "False", "(2,)"), 16),
               "bytes follow the data that shape (2,) of <f8 describes (16 bytes): the file is 1099511627776 bytes");
  fs::remove_all(dir);
}

TEST(Npy, WriterRefusesInconsistentArrays) {
  npy::Array a = sample(Kind::f4, {2, 2});
  a.data.pop_back();
  EXPECT_THROW(npy::serialize(a), Error);
  EXPECT_THROW(npy::serialize(sample(Kind::f4, {2}), 4), Error);
  EXPECT_THROW(npy::write("/nonexistent-dir/x.npy", sample(Kind::f4, {2})), Error);
}

}  // namespace
}  // namespace fl

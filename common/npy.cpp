// flashladder — common/npy.cpp: the .npy reader and writer (format: numpy's NEP 1, "format.py").
//
//   "\x93NUMPY" major minor  header_len (u16 for 1.0, u32 for 2.0/3.0)  header  data
// header is a Python dict literal, e.g. {'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }
// padded with spaces and ended by '\n'. It is parsed here by a small recursive-descent reader that
// accepts exactly the literal grammar numpy writes for these three keys; each read is bounds-checked
// against the end of the header, and the header against the end of the buffer.
#include "common/npy.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>
#include <sstream>

#include "common/problem.hpp"  // fl::Error

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the .npy data is copied as little-endian bytes; a big-endian host would need a byte swap"
#endif

namespace fl::npy {

const char* descr(Kind k) {
  switch (k) {
    case Kind::f2: return "<f2";
    case Kind::f4: return "<f4";
    case Kind::f8: return "<f8";
    case Kind::u2: return "<u2";
  }
  return "?";
}

int item_bytes(Kind k) { return k == Kind::f8 ? 8 : k == Kind::f4 ? 4 : 2; }

int64_t Array::count() const {
  int64_t n = 1;
  for (int64_t x : shape) n *= x;
  return n;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << "(";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  if (shape.size() == 1) s << ",";
  s << ")";
  return s.str();
}

namespace {

constexpr uint8_t kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
constexpr size_t kMaxDims = 32;                   // numpy's NPY_MAXDIMS before 2.0
constexpr int64_t kMaxBytes = int64_t(1) << 40;  // 1 TiB: any real tensor fits; products stay in int64
// A header of these three keys is under 600 bytes (32 dimensions of 2^40); numpy's np.load refuses a
// longer one than this by default (max_header_size). Bounds what read() takes before judging it.
constexpr size_t kMaxHeader = 10000;

[[noreturn]] void fail(const std::string& name, const std::string& what) { throw Error(name + ": " + what); }

// The header dict: {key: value, ...} with optional trailing comma, spaces between tokens.
struct Dict {
  const char* begin;
  const char* p;
  const char* end;
  const std::string& name;

  [[noreturn]] void bad(const std::string& what) const {
    fail(name, "malformed header dict at offset " + std::to_string(p - begin) + ": " + what);
  }
  void skip() {
    while (p < end && *p == ' ') ++p;
  }
  bool eat(char c) {
    skip();
    if (p < end && *p == c) {
      ++p;
      return true;
    }
    return false;
  }
  void need(char c, const char* where) {
    if (!eat(c)) bad(std::string("expected '") + c + "' " + where);
  }
  std::string string_lit() {
    skip();
    if (p >= end || (*p != '\'' && *p != '"')) bad("expected a quoted string");
    const char q = *p++;
    std::string s;
    while (p < end && *p != q) {
      if (*p == '\\') bad("escape sequences are not read in header strings");
      if (s.size() >= 64) bad("string longer than 64 characters");
      s += *p++;
    }
    if (p >= end) bad("unterminated string");
    ++p;
    return s;
  }
  bool boolean() {
    skip();
    for (const char* word : {"True", "False"}) {
      const size_t n = std::strlen(word);
      if (size_t(end - p) >= n && std::memcmp(p, word, n) == 0) {
        p += n;
        return word[0] == 'T';
      }
    }
    bad("expected True or False");
  }
  int64_t dim() {
    skip();
    if (p < end && *p == '-') bad("negative dimension in shape");
    if (p >= end || *p < '0' || *p > '9') bad("expected a dimension (a non-negative integer)");
    int64_t v = 0;
    while (p < end && *p >= '0' && *p <= '9') {
      if (v > kMaxBytes) bad("dimension larger than 2^40");
      v = v * 10 + (*p++ - '0');
    }
    return v;
  }
  std::vector<int64_t> tuple() {
    need('(', "to open the shape tuple");
    std::vector<int64_t> shape;
    if (eat(')')) return shape;
    for (;;) {
      if (shape.size() >= kMaxDims) bad("more than 32 dimensions");
      shape.push_back(dim());
      if (eat(')')) {
        if (shape.size() == 1) bad("shape (n) is not a tuple; a one-element shape is written (n,)");
        return shape;
      }
      need(',', "or ')' in the shape tuple");
      if (eat(')')) return shape;
    }
  }
};

struct Header {
  Kind kind;
  std::vector<int64_t> shape;
  int version;
  size_t data_offset;
  size_t data_bytes;
};

Kind kind_of(const std::string& d, const std::string& name) {
  for (Kind k : {Kind::f2, Kind::f4, Kind::f8, Kind::u2})
    if (d == descr(k)) return k;
  if (!d.empty() && d[0] == '>')
    fail(name, "big-endian dtype '" + d + "' is not read: save it little-endian (numpy: a.astype('<" + d.substr(1) +
                   "'))");
  fail(name, "dtype '" + d + "' is not read: only '<f2', '<f4', '<f8' and '<u2' (bf16 bits) are");
}

// The preamble (magic, version, header length), judged against size, the length of the whole file:
// returns the offset of the data, the end of the header. Reads only bytes [0, min(size, 12)), so a
// file is judged by its first 12 bytes before any more of it is read.
size_t preamble(const uint8_t* bytes, size_t size, const std::string& name, int* version) {
  if (size < sizeof kMagic || std::memcmp(bytes, kMagic, sizeof kMagic) != 0)
    fail(name, "not a .npy file: it does not start with the magic \\x93NUMPY");
  if (size < 8) fail(name, "truncated preamble: " + std::to_string(size) + " bytes, no version");
  *version = bytes[6];
  if (!((*version == 1 || *version == 2 || *version == 3) && bytes[7] == 0))
    fail(name, "unsupported .npy version " + std::to_string(bytes[6]) + "." + std::to_string(bytes[7]) +
                   "; versions 1.0, 2.0 and 3.0 are read");
  const size_t pre = *version == 1 ? 10 : 12;
  if (size < pre) fail(name, "truncated preamble: " + std::to_string(size) + " bytes, no header length");
  size_t hlen = size_t(bytes[8]) | size_t(bytes[9]) << 8;
  if (*version != 1) hlen |= size_t(bytes[10]) << 16 | size_t(bytes[11]) << 24;
  if (hlen > size - pre)
    fail(name, "the header length field says " + std::to_string(hlen) + " bytes but only " +
                   std::to_string(size - pre) + " follow the preamble");
  if (hlen > kMaxHeader)
    fail(name, "the header length field says " + std::to_string(hlen) + " bytes, more than the " +
                   std::to_string(kMaxHeader) + " read (numpy's np.load reads no more by default)");
  return pre + hlen;
}

// The header of a file of `size` bytes; bytes holds at least its preamble and header (the data
// need not be there: only its length, size minus the header's end, is judged).
Header parse_header(const uint8_t* bytes, size_t size, const std::string& name) {
  Header h;
  const size_t end = preamble(bytes, size, name, &h.version);
  const size_t pre = h.version == 1 ? 10 : 12, hlen = end - pre;
  const char* text = reinterpret_cast<const char*>(bytes + pre);
  // Every byte ASCII and printable (version 3.0 allows UTF-8, but these three keys never need it),
  // and the header ends with '\n' as numpy writes it: a length field that cuts it short shows here.
  for (size_t i = 0; i < hlen; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\n' && i + 1 == hlen) break;
    if (c < 0x20 || c > 0x7e) {
      std::ostringstream s;
      s << "header byte " << i << " is 0x" << std::hex << int(c) << ": the header must be printable ASCII"
        << " ending in '\\n'";
      fail(name, s.str());
    }
  }
  if (hlen == 0 || text[hlen - 1] != '\n')
    fail(name, "the header is not terminated by '\\n' within the " + std::to_string(hlen) +
                   " bytes its length field gives (unterminated, or the field lies)");

  Dict d{text, text, text + hlen - 1, name};
  d.need('{', "to open the header dict");
  bool seen_descr = false, seen_order = false, seen_shape = false, fortran = false;
  std::string dtype;
  while (!d.eat('}')) {
    const std::string key = d.string_lit();
    d.need(':', "after a key");
    bool* seen = key == "descr" ? &seen_descr : key == "fortran_order" ? &seen_order : key == "shape" ? &seen_shape : nullptr;
    if (!seen) d.bad("unknown key '" + key + "' (only 'descr', 'fortran_order' and 'shape' are allowed)");
    if (*seen) d.bad("duplicate key '" + key + "'");
    *seen = true;
    d.skip();
    if (key == "descr") {
      if (d.p < d.end && (*d.p == '[' || *d.p == '{')) d.bad("structured dtypes are not read");
      dtype = d.string_lit();
    } else if (key == "fortran_order") {
      fortran = d.boolean();
    } else {
      h.shape = d.tuple();
    }
    if (!d.eat(',')) {
      d.need('}', "or ',' after a value");
      break;
    }
  }
  d.skip();
  if (d.p != d.end) d.bad("text after the closing '}'");
  if (!(seen_descr && seen_order && seen_shape))
    fail(name, std::string("the header dict lacks the key '") + (!seen_descr ? "descr" : !seen_order ? "fortran_order" : "shape") + "'");
  h.kind = kind_of(dtype, name);
  if (fortran) fail(name, "Fortran-order arrays are not read: save C order (numpy: np.ascontiguousarray(a))");

  int64_t bytes_needed = item_bytes(h.kind);
  for (int64_t x : h.shape)
    if (x != 0 && bytes_needed > kMaxBytes / x)
      fail(name, "shape " + shape_text(h.shape) + " of " + dtype + " exceeds the 2^40-byte limit");
    else
      bytes_needed *= x;
  h.data_offset = pre + hlen;
  const size_t have = size - h.data_offset;
  const std::string sizes = "the file is " + std::to_string(size) + " bytes; its header describes " +
                            std::to_string(h.data_offset + size_t(bytes_needed));
  if (have < size_t(bytes_needed))
    fail(name, "truncated data: shape " + shape_text(h.shape) + " of " + dtype + " needs " +
                   std::to_string(bytes_needed) + " bytes but " + std::to_string(have) + " follow the header (" +
                   sizes + ")");
  if (have > size_t(bytes_needed))
    fail(name, std::to_string(have - size_t(bytes_needed)) + " bytes follow the data that shape " +
                   shape_text(h.shape) + " of " + dtype + " describes (" + std::to_string(bytes_needed) +
                   " bytes): " + sizes + "; the header does not describe this file");
  h.data_bytes = size_t(bytes_needed);
  return h;
}

}  // namespace

Array parse(const uint8_t* bytes, size_t size, const std::string& name) {
  Header h = parse_header(bytes, size, name);
  Array a;
  a.kind = h.kind;
  a.shape = std::move(h.shape);
  a.version = h.version;
  a.data.assign(bytes + h.data_offset, bytes + h.data_offset + h.data_bytes);
  return a;
}

Array read(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) fail(path, "no such file");
  if (!fs::is_regular_file(path, ec)) fail(path, "not a regular file");
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) fail(path, "cannot read its size: " + ec.message());
  if (size > uintmax_t(kMaxBytes)) fail(path, "larger than the 2^40-byte limit");
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, "cannot be opened for reading");
  // Preamble, header, then data, each judged before the next is read: the whole file used to be read
  // first, so an 8 GiB file of zeros took 6 s and 8.5 GB to be refused for its first byte.
  auto read_to = [&](std::vector<uint8_t>& buf, size_t n) {  // buf grown to n bytes (kept when longer)
    const size_t from = buf.size();
    if (n <= from) return;
    try {
      buf.resize(n);
    } catch (const std::bad_alloc&) {
      fail(path, "too large to hold in memory (" + std::to_string(n) + " bytes)");
    }
    f.read(reinterpret_cast<char*>(buf.data() + from), std::streamsize(n - from));
    if (size_t(f.gcount()) != n - from) fail(path, "short read: the file changed while being read");
  };
  std::vector<uint8_t> buf;
  read_to(buf, size_t(std::min<uintmax_t>(size, 12)));
  int version;
  read_to(buf, preamble(buf.data(), size_t(size), path, &version));
  Header h = parse_header(buf.data(), size_t(size), path);  // the data's length against the file's
  Array a;
  a.kind = h.kind;
  a.shape = std::move(h.shape);
  a.version = h.version;
  read_to(a.data, h.data_bytes);
  return a;
}

Array read_expect(const std::string& path, Kind kind, const std::vector<int64_t>& shape) {
  Array a = read(path);
  if (a.kind != kind)
    fail(path, std::string("dtype ") + descr(a.kind) + " where " + descr(kind) + " is expected");
  if (a.shape != shape)
    fail(path, "shape " + shape_text(a.shape) + " where " + shape_text(shape) + " is expected");
  return a;
}

std::vector<uint8_t> serialize(const Array& a, int version) {
  if (a.shape.size() > kMaxDims) throw Error("npy: more than 32 dimensions");
  int64_t bytes = item_bytes(a.kind);
  for (int64_t x : a.shape) {
    if (x < 0 || (x != 0 && bytes > kMaxBytes / x))
      throw Error("npy: shape " + shape_text(a.shape) + " is negative or exceeds the 2^40-byte limit");
    bytes *= x;
  }
  if (size_t(bytes) != a.data.size())
    throw Error("npy: shape " + shape_text(a.shape) + " of " + descr(a.kind) + " needs " + std::to_string(bytes) +
                " bytes, the array holds " + std::to_string(a.data.size()));
  std::string dict = std::string("{'descr': '") + descr(a.kind) + "', 'fortran_order': False, 'shape': " +
                     shape_text(a.shape) + ", }";
  if (version == 0) version = dict.size() + 10 + 64 < 65536 ? 1 : 2;
  if (version < 1 || version > 3) throw Error("npy: version " + std::to_string(version) + " cannot be written");
  const size_t pre = version == 1 ? 10 : 12;
  const size_t pad = (64 - (pre + dict.size() + 1) % 64) % 64;  // data starts 64-byte aligned
  dict.append(pad, ' ');
  dict += '\n';
  if (version == 1 && dict.size() > 65535) throw Error("npy: header too long for version 1.0");
  std::vector<uint8_t> out(kMagic, kMagic + sizeof kMagic);
  out.push_back(uint8_t(version));
  out.push_back(0);
  for (size_t i = 0; i < pre - 8; ++i) out.push_back(uint8_t(dict.size() >> (8 * i)));
  out.insert(out.end(), dict.begin(), dict.end());
  out.insert(out.end(), a.data.begin(), a.data.end());
  return out;
}

void write(const std::string& path, const Array& a, int version) {
  const std::vector<uint8_t> bytes = serialize(a, version);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) fail(path, "cannot be opened for writing");
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  f.close();
  if (!f) fail(path, "write failed (disk full?)");
}

}  // namespace fl::npy

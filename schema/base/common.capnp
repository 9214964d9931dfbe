# Types shared by Tessera's file formats: checksummed float data, dtypes, and key/value entries.
# The only code that reads or builds them is schema/ (docs/design.md §2).
@0x9e2de7ddf72c764a;

$import "/capnp/c++.capnp".namespace("tessera::wire");

# A variable's element type (tessera/tensor.h DType; the numbers match).
enum DType {
  unspecified @0;
  float32 @1;
  int64 @2;
  string @3;
}

# One piece of a tensor's values: little-endian float32s, at most 1 MiB, and zlib's CRC-32 of
# exactly those bytes. A tensor's values are its chunks concatenated, in order (see
# Note [Checksums] in schema/base/internal/field_codec.cc).
struct Chunk {
  data @0 :Data;
  crc32 @1 :UInt32;
}

# A float32 tensor: row-major values of `shape` ([] is a scalar of one value).
struct Tensor {
  shape @0 :List(Int64);
  chunks @1 :List(Chunk);
}

# std::map<std::string, double> entries, in key order.
struct NumberEntry {
  key @0 :Text;
  value @1 :Float64;
}

# std::map<std::string, std::string> entries, in key order.
struct TextEntry {
  key @0 :Text;
  value @1 :Text;
}
